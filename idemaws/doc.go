// Package idemaws keeps the client tokens of aws-sdk-go-v2 operations in an
// idem journal, so that an AWS operation is applied once across retries and
// process restarts.
//
// An AWS API that takes a client token (Cloud Control's CreateResource,
// ECS's RunTask, EC2's RunInstances and many more) applies a request once
// per token. The SDK fills the token itself with a fresh random value on
// every call, so a process that crashes and calls again sends a new token,
// and the API applies the request twice. idem's HTTP layer cannot help: the
// SDK signs the body the token is in.
//
// idemaws works at the SDK's own layer. Install adds its middlewares to
// every operation of a client. For a call whose context names an operation
// (idem.WithOperation), once the SDK has validated the input, they:
//
//   - claim the operation in the journal and take its token from there: a
//     new operation's token is minted once (a random UUID) and its intent
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
// The API's answer is read with Options.Dialect (idem.AWSCloudControl by
// default), which knows AWS's errors for a token reused with other
// parameters (ClientTokenConflictException, IdempotentParameterMismatch):
//
//   - success: done, and the response is recorded;
//   - a token reused with other parameters, or an error the SDK's retryer
//     retries (5xx, throttling, a broken connection) once retrying stopped:
//     unknown, and the operation stays pending;
//   - any other 4xx: rejected, and the response is recorded.
//
// A rejection or an unknown outcome is returned as an *idem.OutcomeError
// that wraps the SDK's error: errors.Is(err, idem.ErrRejected) and
// errors.As(err, &apiErr) both hold.
//
// # Refusals
//
// Before anything is sent, a call is refused with an error matching:
// idem.ErrMismatch when the operation's input differs from the one first
// journaled (the token aside); idem.ErrKeyExpired when its token has
// outlived Options.KeyTTL; ErrNoClientToken when the AWS operation takes no
// client token; ErrTokenSet when the input carries a token other than the
// operation's. Settle or forget such an operation with the journal's own
// tools, as for Do.
package idemaws
