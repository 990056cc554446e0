package idem

import (
	"context"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/idemkit/idem/journal"
)

// The attempt deadline: how Config.AttemptTimeout bounds each attempt.
//
// http.Client.Timeout would do it, but net/http implements it with a
// goroutine and a timer for every request, which made up about a third of
// the client's own cost per operation. Instead, attempts.begin sets the
// deadline of the attempt about to start, the request carries its attempts
// in its context (send), and attemptDeadline, the outermost transport of
// the Client's *http.Client, applies that deadline to every request of the
// attempt: the first one and any redirect, which net/http builds with the
// same context. As with http.Client.Timeout, the deadline keeps running
// while the response body is read (by idem, up to MaxRecordedBody, then by
// the caller) and is released when the body is closed, and an attempt that
// times out fails with an error matching context.DeadlineExceeded.

// attemptsKey is the context key under which a request carries the
// attempts of its operation.
type attemptsKey struct{}

// attemptDeadline applies the deadline of the running attempt to each
// request it sends through rt.
type attemptDeadline struct{ rt http.RoundTripper }

func (t attemptDeadline) RoundTrip(r *http.Request) (*http.Response, error) {
	a, ok := r.Context().Value(attemptsKey{}).(*attempts)
	if !ok {
		return t.rt.RoundTrip(r)
	}
	if a.claimLost() {
		closeBody(r)
		return nil, journal.ErrClaimLost // no attempt once the claim lapsed (F3)
	}
	ctx, cancel := context.WithDeadline(r.Context(), a.deadline)
	if a.lost != nil {
		cancel = cancelOnLoss(a.lost, cancel)
	}
	resp, err := t.rt.RoundTrip(r.WithContext(ctx))
	if err != nil {
		cancel()
		return nil, err
	}
	// One wrapper per Do, in the attempts: the responses of an attempt's
	// redirects, and the attempts that follow, come one at a time, each
	// after the body before it was closed (by net/http before it follows
	// a redirect, by go-retryablehttp before it retries).
	a.closer = cancelOnClose{resp.Body, cancel}
	resp.Body = &a.closer
	return resp, nil
}

// cancelOnClose releases an attempt's deadline when its body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// cancelOnLoss calls cancel when lost is closed, until the function it
// returns (which also calls cancel) is called: an attempt in flight when
// the claim lapses is cut short, since another machine may take the
// operation over. Only a claim that can lapse (a shared journal's lease)
// pays for the goroutine.
func cancelOnLoss(lost <-chan struct{}, cancel context.CancelFunc) context.CancelFunc {
	done := make(chan struct{})
	go func() {
		select {
		case <-lost:
			cancel()
		case <-done:
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		cancel()
	}
}

// claimLost reports whether the operation's claim has lapsed.
func (a *attempts) claimLost() bool {
	select {
	case <-a.lost:
		return true
	default:
		return false // also for a nil channel: a claim that cannot lapse
	}
}

// startDeadline sets the deadline of the attempt about to start. The
// deadline is on the real clock, not the journal's, like the network it
// bounds.
func (a *attempts) startDeadline() {
	a.deadline = time.Now().Add(a.c.cfg.AttemptTimeout)
}
