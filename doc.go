// Package idem makes mutating HTTP calls happen exactly once in effect, over
// networks that only deliver at least once.
//
// A request that times out may have been applied, and a 502 may follow a
// committed write. A retry is safe only when the server can recognise it. So
// idem sends every attempt of a logical operation with the same
// Idempotency-Key, and a server that stores the key with its result (package
// testserver is a reference) answers a retry with the stored result.
//
// The caller names each operation with a stable ID of its own, such as an
// invoice number. The Client mints one random UUID key per operation, never per
// attempt. With a Journal, it writes the key durably before the first byte is
// sent, so a job killed halfway resumes every operation under its original key,
// and completed operations are answered from the journal.
//
//	j, err := filejournal.Open("charges.journal", filejournal.Options{})
//	...
//	c, err := idem.New(idem.Config{Journal: j})
//	resp, err := c.Do("invoice-42", req)
//
// StandardClient gives an *http.Client; WithOperation names a request's
// operation. Config.Dialect says how the API speaks idempotency.
//
// # Outcomes
//
// Do ends in one of three outcomes. Done: a final answer that applied the
// operation, returned as a response. Rejected: a final answer that did not
// apply it; Do returns an *OutcomeError matching ErrRejected, and the
// operation is never sent again. Unknown: retrying stopped before a final
// answer; Do returns an *OutcomeError matching ErrUnknown, and the next Do
// resumes under the same key.
//
// A status is final when retrying cannot change it. These final statuses end
// rejected: a 4xx other than 408, 409 and 429; a 409 with Idempotent-Replayed:
// true; 501; a redirect not followed (see Redirects). Every other final status
// is done.
//
// # Retries
//
// An attempt is retried after a connection error, an attempt timeout, a body
// that breaks off, 408, 429, 5xx other than 501, and a 409 that is not a
// replayed answer: in the IETF idempotency-key draft a 409 means the key is
// still being processed, so running out of attempts on 409s ends unknown.
// Certificate errors, unsupported schemes and too many redirects are not
// retried. DefaultCheckRetry is this rule. Config.CheckRetry may amend it: it
// may retry an answer the rule takes for final, and stopping one the rule would
// retry ends unknown (ErrRetryDeclined), never final. A Config.Dialect's
// signals are read first (see Dialect).
//
// Waits are jittered exponential backoff, raised to the server's Retry-After.
// Config.MaxAttempts and Config.MaxElapsed bound one Do, and a client-wide
// RetryBudget stops retries when most recent attempts fail. Every wait ends
// when the request's context ends.
//
// # Redirects
//
// An attempt follows only a 307 or 308 to the origin of the request, under the
// same key. A 303 ends done, returned unfetched. A 301, a 302, and a 307 or 308
// to another origin end rejected, and the OutcomeError names the Location.
// Config.HTTPClient's CheckRedirect may stop a redirect this rule allows, never
// allow one it refuses.
//
// # Keys and expiry
//
// A key is minted once, when an operation is first seen, and journaled before
// the first attempt. Do refuses an operation ID already used with another
// request (ErrMismatch). A server forgets a key after its retention window
// (Dialect.Retention, else DefaultKeyTTL), recorded with each operation
// (Operation.KeyTTL) and judged by that record, and a resend would then be
// applied as new: no attempt is sent that could still be in flight when its
// key turns KeyTTL old (ErrKeyExpired); the journal lists such an operation
// for a person to reconcile with Settle.
//
// A refusal is final, even after its cause is fixed; CallOptions.Resend may
// send one that cannot have applied anything again under a new key.
//
// # Journals
//
// A journal keeps each operation's ID, key, fingerprint, state and outcome:
// package filejournal in a file, pgjournal in PostgreSQL. Package journal is
// the contract between them and a Client.
//
// # Secrets
//
// Nothing idem writes or logs holds a session or a credential: recorded
// headers leave out cookies and credentials (Config.UnrecordedHeaders), and
// URLs lose user info, fragments and credential-like query values
// (Config.RedactedParams). The fingerprint still covers the real URL.
//
// # Logging
//
// A Client logs routine work at Debug, and at Warn or Error what a person may
// need to know and no call returns (an outcome not recorded, a torn tail cut).
package idem
