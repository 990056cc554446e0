// Package idem makes mutating HTTP calls happen exactly once in effect,
// over networks that only deliver at least once.
//
// A request that times out may have been applied; a 502 from a load
// balancer may follow a committed write. Retrying is only safe when the
// server can recognise the retry, so idem sends every attempt of a logical
// operation with the same Idempotency-Key, and a server that stores the key
// with its result (see package testserver for a reference) answers a retry
// with the stored result instead of applying it again.
//
// The caller names each operation with a stable ID of its own (an invoice
// number, a batch row's primary key). The Client mints one random UUID key
// per operation, never per attempt, and, with a Journal, writes it to disk
// and fsyncs it before the first byte is sent. A batch job killed halfway
// resumes every operation under its original key, and operations that
// completed are answered from the journal without a network call.
//
//	j, err := idem.OpenJournal("charges.journal")
//	...
//	c, err := idem.New(idem.Config{Journal: j})
//	resp, err := c.Do("invoice-42", req)
//
// Do ends in one of three outcomes: Done (the server's final answer, as a
// response), Rejected (the server refused the request; an *OutcomeError),
// or Unknown (retrying stopped before a final answer; an *OutcomeError, and
// the operation stays pending for the next Do). Retries follow
// go-retryablehttp's classification, extended for 408 and for every 409
// that is not a stored answer replayed (the key may be in flight), with
// cenkalti/backoff's jittered exponential waits, Retry-After honoured up to
// a cap, and a client-wide retry budget. Of redirects, an operation follows
// only a 307 or 308 to its own origin (see ErrRejected and
// Config.HTTPClient).
//
// The rules the package keeps (C1 to C14 for the client, D1 to D4 for the
// dialects of the APIs it calls, J1 to J9 for the file journal, F1 to F6
// for a journal shared by many machines) are stated in the repository's
// DESIGN.md.
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
// Attempt counts are a lower bound: net/http may itself resend a request
// that carries an Idempotency-Key on a new connection when a reused
// connection fails before the response begins (see http.Transport). That
// resend carries the same key, so it is as safe as idem's own.
//
// For code that only accepts an *http.Client, StandardClient gives one;
// name the operation of a request with WithOperation.
//
// # Logging
//
// A Client and a Journal log through their Logger (Config.Logger,
// JournalOptions.Logger), slog.Default() unless set, by one rule: what
// they do routinely (attempts, outcomes, answers from the journal,
// compactions) at Debug, so that a default logger shows none of it; what a
// person may need to know and no call returns (a torn tail cut on open, an
// unfinished compaction removed, an automatic compaction or the recording
// of an outcome that failed) at Warn or Error; and a journal that has
// latched a failure, once, at Error. An outcome or error returned to the
// caller is not logged again above Debug. To silence idem entirely, pass
// slog.New(slog.DiscardHandler).
package idem
