// Package idemaws keeps the client tokens of aws-sdk-go-v2 operations in an
// idem journal, so that an AWS operation is applied once across retries and
// process restarts.
//
// An AWS API that takes a client token (Cloud Control's CreateResource,
// ECS's RunTask, EC2's RunInstances, ACM's RequestCertificate, Route 53's
// CreateHostedZone and a thousand more) applies a request once per token.
// The SDK fills some tokens itself with a fresh random value on every
// call, and leaves the others to the program, so a process that crashes
// and calls again sends a new token, and the API applies the request
// twice. idem's HTTP layer cannot help: the SDK signs the request the
// token is in.
//
// idemaws works at the SDK's own layer. Install adds its middlewares to
// every operation of a client. For a call whose context names an operation
// (idem.WithOperation), once the SDK has validated the input, they:
//
//   - find the operation's token member: the one Config.Tokens names,
//     else the one of the table generated from AWS's models (TokenFor),
//     else the one the SDK's own token middleware fills; an empty member
//     holds its place through the SDK's validation, so that a required
//     one is filled too;
//   - claim the operation in the journal and take its token from there: a
//     new operation's token is minted once (from a random UUID, in the
//     member's format) and its intent
//     journaled, durably, before anything is sent; an unfinished one's is
//     the token it was first sent with, in this process or before a
//     restart, on this machine or another sharing the journal;
//   - set the token on the input before the SDK serializes and signs it,
//     in place of the one the SDK's own token middleware filled;
//   - record the outcome when the call ends, as idem.Client.Do does: done,
//     rejected, or unknown (left pending, to be resumed under its token);
//   - answer a call of a completed operation from the journal: the recorded
//     response goes through the SDK's own deserializer, and nothing is sent.
//
// A call without an operation in its context is left to the SDK.
//
// # One retry loop
//
// The SDK's retryer retries; idem adds no loop of its own. A call makes at
// most the retryer's MaxAttempts attempts (3 by default, set by
// aws.Config.RetryMaxAttempts or the client's Retryer), all under one
// token. Keep the client's HTTPClient a plain one, not an idem.Client's
// StandardClient, which would retry each attempt again.
//
// # Outcomes
//
// The outcome is read from how the SDK ended the call, and from the answer
// of its last attempt only when that answer is what ended it. Config.Dialect
// (idem.AWSCloudControl() by default) and the SDK's error code, whatever the
// protocol, tell a token held for another request
// (ClientTokenConflictException, IdempotentParameterMismatch) and an
// answer that the operation was applied before:
//
//   - success: done, and the response is recorded (without the header
//     fields idem never records, idem.DefaultUnrecordedHeaders);
//   - "already exists" for the operation's token (EFS's
//     FileSystemAlreadyExists, Route 53's HostedZoneAlreadyExists...), or
//     an answer the dialect reads as applied: done, answered with an
//     *AppliedError, now and on every later call;
//   - the token held for another request: final, answered with a
//     *TokenReusedError, now and on every later call, never sent again;
//   - unknown, the operation left pending: no answer ended the call (a
//     broken connection, the context ending while the SDK waited, a lapsed
//     claim); an error the retryer retries once its attempts ran out (5xx,
//     throttling, a code of the client's own retryer); a refusal of the
//     request's credentials or signature, which says nothing of an earlier
//     attempt; a 409;
//   - any other 4xx: rejected, and the response is recorded.
//
// A rejection or an unknown outcome is returned as an *idem.OutcomeError
// that wraps the SDK's error: errors.Is(err, idem.ErrRejected) and
// errors.As(err, &apiErr) both hold. A recorded answer goes through the
// SDK's deserializer again, without its Date (which the SDK would take for
// its clock's skew), and the SDK's retryer does not retry it. A done
// operation whose record holds no output the SDK can read (settled by
// hand, or its body not recorded) is answered with an error matching
// ErrNoOutput, never an output of nil fields.
//
// # Refusals
//
// Before anything is sent, a call is refused with an error matching:
// idem.ErrMismatch when the operation's input, service, operation or region
// differs from the one first journaled (the token aside); idem.ErrKeyExpired
// when its token has outlived its lifetime (the one AWS documents for the
// operation's token, capped by Config.KeyTTL), less the time an attempt
// needs (a minute, or a tenth of a shorter TTL); ErrNoClientToken when
// idemaws knows no token member of the AWS operation; ErrTokenSet when the
// input carries a token other than the operation's. The expiry is checked before each of
// the SDK's retries too: one it would send too late ends the call unknown,
// with idem.ErrKeyExpired. A completed operation whose answer was too large
// to record is answered with an error matching idem.ErrBodyNotRecorded.
// Settle or forget such an operation with the journal's own tools, as for
// Do.
//
// # Fingerprints
//
// An operation's fingerprint is its service, operation, region and input,
// the token aside, written canonically: fields by name, a nil or zero field
// left out (as the SDK leaves it out of the request, so that a field a
// later SDK adds changes nothing), map keys sorted, a union member with its
// type, a time as its instant, floats as text. An input holding a stream
// (an io.Reader) cannot be fingerprinted, and is refused with
// idem.ErrInvalidRequest.
package idemaws
