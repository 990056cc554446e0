package idemaws

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/idemkit/idem"
	"github.com/idemkit/idem/journal"
)

// attemptMiddleware is next to the transport: every attempt of a named
// operation passes through it, after the SDK serialized and signed it.
type attemptMiddleware struct{ key *callKey }

func (*attemptMiddleware) ID() string { return attemptID }

func (m *attemptMiddleware) HandleDeserialize(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (
	middleware.DeserializeOutput, middleware.Metadata, error,
) {
	c, ok := ctx.Value(m.key).(*call)
	if !ok || c.claim == nil {
		return next.HandleDeserialize(ctx, in)
	}
	if c.replay != nil {
		return middleware.DeserializeOutput{RawResponse: &smithyhttp.Response{Response: recorded(c.replay)}}, middleware.Metadata{}, nil
	}
	select {
	case <-c.lost:
		return middleware.DeserializeOutput{}, middleware.Metadata{}, notRetryable{fmt.Errorf("idemaws: operation %q: %w", c.op.ID, journal.ErrClaimLost)}
	default:
	}
	// The SDK's retries are attempts of the operation too: none is sent
	// once the API may have forgotten its token.
	if !usable(c.o.journal.Now(), c.op.Created, c.op.KeyTTL) {
		return middleware.DeserializeOutput{}, middleware.Metadata{}, notRetryable{fmt.Errorf("idemaws: operation %q (token %s, minted %s): %w",
			c.op.ID, c.op.Key, c.op.Created.Format(time.RFC3339), idem.ErrKeyExpired)}
	}
	c.attempts++
	out, md, err := next.HandleDeserialize(ctx, in)
	c.resp, c.body, c.fits = nil, nil, false
	if raw, ok := out.RawResponse.(*smithyhttp.Response); ok && raw != nil && raw.Response != nil {
		c.resp = raw.Response
		c.body, c.fits = keep(raw.Response, c.o.maxBody)
	}
	return out, md, err
}

// replayMiddleware goes first in the Deserialize step: a recorded answer
// that the SDK reads as an error is final, and its retryer must not ask
// for it again.
type replayMiddleware struct{ key *callKey }

func (*replayMiddleware) ID() string { return replayID }

func (m *replayMiddleware) HandleDeserialize(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (
	middleware.DeserializeOutput, middleware.Metadata, error,
) {
	out, md, err := next.HandleDeserialize(ctx, in)
	if c, ok := ctx.Value(m.key).(*call); ok && c.replay != nil && err != nil {
		err = notRetryable{err}
	}
	return out, md, err
}

// keep reads up to limit bytes of resp's body, for the journal, and puts
// them back in front of the rest for the SDK to read. fits reports that
// the body was read whole.
func keep(resp *http.Response, limit int64) (body []byte, fits bool) {
	if resp.Body == nil || resp.Body == http.NoBody {
		return nil, true
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	fits = err == nil && int64(len(b)) <= limit
	if fits {
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(b))
		return b, true
	}
	// A body too long to record, or one that broke while read: the SDK
	// reads what was read and then the rest, and meets the error itself.
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), resp.Body), resp.Body}
	return b[:min(len(b), int(limit))], false
}

// recorded is the response the journal holds for a completed operation,
// without its Date: the SDK corrects its signing clock by the Date of what
// it reads, and a recorded one is as old as the record.
func recorded(op *journal.Operation) *http.Response {
	h := op.Header.Clone()
	if h == nil {
		h = http.Header{}
	}
	h.Del("Date")
	return &http.Response{
		Status: fmt.Sprintf("%d %s", op.Status, http.StatusText(op.Status)), StatusCode: op.Status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: io.NopCloser(bytes.NewReader(op.Body)), ContentLength: int64(len(op.Body)),
	}
}

// notRetryable is an error the SDK's retryer must not retry: its
// RetryableError method is how the retryer asks.
type notRetryable struct{ error }

func (e notRetryable) Unwrap() error { return e.error }

// RetryableError returns false.
func (notRetryable) RetryableError() bool { return false }
