// Package idem makes mutating HTTP calls happen exactly once in effect,
// over networks that only deliver at least once.
//
// A request that times out may have been applied. A 502 from a load
// balancer may follow a committed write. Retrying is only safe when the
// server can recognise the retry. So idem sends every attempt of a logical
// operation with the same Idempotency-Key, and a server that stores the
// key with its result (package testserver is a reference) answers a retry
// with the stored result instead of applying it again.
//
// The caller names each operation with a stable ID of its own: an invoice
// number, a batch row's primary key. The Client mints one random UUID key
// per operation, never per attempt. With a Journal, it writes the key to
// disk and fsyncs it before the first byte is sent. A batch job killed
// halfway then resumes every operation under its original key, and
// operations that completed are answered from the journal without a
// network call.
//
//	j, err := filejournal.Open("charges.journal", filejournal.Options{})
//	...
//	c, err := idem.New(idem.Config{Journal: j})
//	resp, err := c.Do("invoice-42", req)
//
// For code that only accepts an *http.Client, StandardClient gives one;
// WithOperation names the operation of a request.
//
// # Outcomes
//
// Do ends in one of three outcomes. Done: the server gave a final answer
// that applied the operation, returned as a response. Rejected: the server
// gave a final answer that did not apply it; Do returns an *OutcomeError
// matching ErrRejected, and the operation is never sent again. Unknown:
// retrying stopped before a final answer; Do returns an *OutcomeError
// matching ErrUnknown, the operation stays pending, and the next Do of it
// resumes under the same key.
//
// A status is final when retrying cannot change it. Among final statuses,
// these say the server did not apply the request, and end rejected:
//
//   - a 4xx other than 408, 409 and 429: the server refused the request as
//     it stands. This trusts that a 4xx comes from a server that did not
//     act, not from a proxy that forwarded the request and then failed;
//     proxies answer 502 and 504 for that.
//   - a 409 with Idempotent-Replayed: true, the server's stored answer.
//   - 501 Not Implemented.
//   - a redirect not followed (see Redirects).
//
// Everything else final is done. Before anything is sent, Do refuses an
// operation ID already used with another request (ErrMismatch) and a
// pending operation whose key may have expired (ErrKeyExpired; see Keys and
// expiry).
//
// # Retries
//
// An attempt is retried after a connection error, an attempt timeout, a
// body that breaks off, 408, 429, 5xx other than 501, and every 409 that
// is not a stored answer replayed. In the IETF idempotency-key draft a 409
// means a request with this key is still being processed, so taking it
// for a refusal could record "not applied" for an operation the server is
// applying: running out of attempts on 409s ends unknown. Certificate
// errors, unsupported schemes and too many redirects are not retried.
// This is go-retryablehttp's ErrorPropagatedRetryPolicy, extended for 408
// and 409; DefaultCheckRetry is the rule, and Config.CheckRetry may amend
// it: it may retry an answer the rule takes for final, and it may stop
// retrying one the rule would retry, but that ends unknown
// (ErrRetryDeclined), never final. A Config.Dialect's signals are read before the rule and may read
// an answer otherwise (see Dialects).
//
// Waits are cenkalti/backoff's jittered exponential backoff, raised to the
// server's Retry-After and capped by Config.MaxWait. Config.MaxAttempts and
// Config.MaxElapsed bound the retrying of one Do, and a client-wide
// RetryBudget stops retries when most recent attempts fail. Every wait ends
// at once when the request's context ends.
//
// # Dialects
//
// APIs differ in where they want the key (a header of their own, or a
// field of the JSON body), how long they keep it, and how they say "still
// processing", "already applied" or "key reused". Config.Dialect names
// the API's way (see Dialect; Stripe, Adyen, Square and the other
// built-in dialects), and the Client places the key, defaults KeyTTL and
// reads answers by it.
//
// # Redirects
//
// An attempt follows only a 307 or 308 to the origin (scheme, host and
// port, the Host header included) of the request the caller made, under
// the same key. A 301 or 302 would turn a POST into a bodiless GET, a 303
// fetches another resource, and a redirect to another origin would carry
// the key and the body to a host the caller never named. So every other
// redirect is the final answer:
//
//   - 303 See Other: the server applied the request. The operation is
//     done, and the 303 itself is recorded and returned; its Location is
//     not fetched.
//   - 301, 302, and 307 or 308 to another origin: rejected, and the
//     OutcomeError names the Location.
//
// Config.HTTPClient's CheckRedirect is asked about every redirect this rule
// allows, and may stop it; it cannot allow one the rule refuses. A safe
// request that names no operation is not an operation: through
// RoundTripper and StandardClient it follows redirects as net/http does.
//
// # Keys and expiry
//
// A key is minted once, when an operation is first seen, and journaled
// before the first attempt. Every attempt, in this process or any process
// that opens the same journal, sends the journaled key.
//
// A server keeps a key for a retention window (Config.KeyTTL, 24 hours by
// default). After it, the server has forgotten the key, and a resend would
// be applied as new. So no attempt is sent that could still be in flight
// when its key turns KeyTTL old: a pending operation whose key is older
// than KeyTTL less Config.AttemptTimeout is refused with ErrKeyExpired,
// nothing is sent, and retrying stops at the same edge. The journal lists
// such operations (ListExpired) for a person to reconcile with Settle. It
// judges them by its own KeyTTL: open it with the Client's.
//
// # Sending a refusal again
//
// A refusal is final: a rerun answers it from the journal, even after its
// cause is fixed, since the fingerprint covers method, URL and body but no
// header. When the refusal cannot have applied anything
// (RefusedWithoutEffect), CallOptions.Resend and BatchOptions.Resend may
// choose to send it again under a new key. The command idem journal
// resend does the same in bulk.
//
// # Journals
//
// A Journal keeps each operation's ID, key, fingerprint, state and
// outcome. Package filejournal keeps them in one file on one machine,
// package pgjournal in a PostgreSQL database shared by many,
// and a Client without Config.Journal in its memory. A Client uses a
// Journal in one pattern:
//
//	claim := j.Claim(ctx, id)        // one Do of id at a time, everywhere
//	op, ok := claim.Operation()      // resume, replay, or...
//	claim.Begin(ctx, op)             // ...journal a new intent, durably
//	claim.Complete(ctx, op)          // record the outcome
//	claim.Release()
//
// The intent is durable before the first attempt. The outcome need not be:
// losing it only causes a replay under the same key. Concurrent Do calls
// of one ID run one at a time, the second after the first.
//
// Each journal's package documents how it keeps them and how it fails.
//
// # Secrets
//
// Nothing idem writes or emits (the journal, log records, error messages)
// holds a session or a credential. A recorded response header leaves out
// cookies and credentials (DefaultUnrecordedHeaders, and
// Config.UnrecordedHeaders or Config.RecordedHeaders), and names what it
// left out in UnrecordedHeadersField. A URL is written without its user
// info, and with the values of query parameters that look like
// credentials replaced (DefaultRedactedParams, and Config.RedactedParams).
// The fingerprint still covers the real URL: a request whose token changed
// is another request (ErrMismatch). Compaction applies the same rule to
// what older versions recorded.
//
// # Logging
//
// A Client and a journal log through Config.Logger and the journal's own
// Logger option, slog.Default() unless set. Routine work
// (attempts, outcomes, answers from the journal, compactions) is logged at
// Debug, so a default logger shows none of it. What a person may need to
// know and no call returns (a torn tail cut, an automatic compaction that
// failed, an outcome that could not be recorded) is logged at Warn or
// Error. An outcome or error returned to the caller is not logged again
// above Debug. To silence idem, pass slog.New(slog.DiscardHandler).
package idem
