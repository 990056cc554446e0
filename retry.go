package idem

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/hashicorp/go-retryablehttp"
)

// The retry rule.
//
// What is retried is go-retryablehttp's ErrorPropagatedRetryPolicy
// (connection errors, attempt timeouts, 429, and 5xx other than 501; not
// certificate errors, unsupported schemes, invalid headers or too many
// redirects), extended with two answers it does not know:
//
//   - 408 Request Timeout: the server gave up waiting for the request and
//     says so; the request can be sent again.
//   - 409 Conflict carrying Retry-After: the server holds the key in flight
//     for an earlier attempt and asks the client to come back (the IETF
//     idempotency-key draft's concurrent-request answer). A 409 without
//     Retry-After is an ordinary conflict and final.
//
// A body that fails to arrive in full after a final status is a failed
// attempt too, retried like a connection error.
//
// When the next attempt is sent is cenkalti/backoff's ExponentialBackOff,
// jittered by default, raised to the server's Retry-After (parsed by
// go-retryablehttp) and capped by Config.MaxWait. No attempt is started
// once Config.MaxElapsed has passed, more than Config.MaxAttempts are never
// made, and the client-wide retry budget (budget.go) may stop retries
// early. Every wait ends at once when the request's context ends: the wait
// is go-retryablehttp's, which selects on the context.

// Reasons retrying stops before the server gave a final answer. They are
// wrapped in OutcomeError.Err.
var (
	// ErrRetryBudgetExhausted: the client-wide retry budget is empty (many
	// recent attempts failed), so no retry was made. See RetryBudget.
	ErrRetryBudgetExhausted = errors.New("idem: retry budget exhausted")
	errAttemptsExhausted    = errors.New("attempts exhausted")
	errElapsedExhausted     = errors.New("maximum elapsed time reached")
)

// retryable classifies the result of one attempt: whether to send another,
// and, when not, the error that explains why (nil for a final answer).
func retryable(ctx context.Context, resp *http.Response, err error) (bool, error) {
	if err == nil && ctx.Err() == nil {
		switch resp.StatusCode {
		case http.StatusRequestTimeout:
			return true, fmt.Errorf("unexpected HTTP status %s", resp.Status)
		case http.StatusConflict:
			if resp.Header.Get("Retry-After") != "" {
				return true, fmt.Errorf("key in flight: %s", resp.Status)
			}
		}
	}
	return retryablehttp.ErrorPropagatedRetryPolicy(ctx, resp, err)
}

// retryAfter returns the wait the server asked for with Retry-After, in
// either of its forms (delay-seconds or HTTP-date). The parsing is
// go-retryablehttp's, which it applies to 429 and 503 answers only; the
// header means the same on the other answers idem retries (408, 409 in
// flight, 500, 502, 504), so it is read from a 503 view of the response.
func retryAfter(resp *http.Response) (time.Duration, bool) {
	if resp == nil || len(resp.Header.Values("Retry-After")) == 0 {
		return 0, false
	}
	view := &http.Response{StatusCode: http.StatusServiceUnavailable, Header: resp.Header}
	// With min and max zero, DefaultBackoff returns the Retry-After delay,
	// or zero when the header does not parse.
	d := retryablehttp.DefaultBackoff(0, 0, 0, view)
	return d, d > 0
}

// Attempt describes one attempt of an operation. Config.OnAttempt receives
// one after each attempt's fate is decided.
type Attempt struct {
	Operation string        // the operation ID ("" for a request without one)
	Key       string        // the idempotency key the attempt carried
	Number    int           // 1 for the first attempt of this Do
	Status    int           // the response status; 0 if no response arrived
	Err       error         // the transport or body error, or why retrying stopped
	Retry     bool          // whether another attempt follows
	Wait      time.Duration // the wait before that attempt, when Retry
}

// attempts is the retry state of one Do: it decides, after each attempt,
// whether and when the next one goes, and remembers the last result for
// the OutcomeError.
type attempts struct {
	c       *Client
	op, key string
	backoff *backoff.ExponentialBackOff
	started time.Time

	n      int           // attempts made so far
	wait   time.Duration // the wait chosen after the last attempt
	status int           // last response status
	header http.Header   // last response header
	err    error         // last transport or body error

	// A final answer is decided in two steps: go-retryablehttp calls
	// CheckRetry, then the response handler reads the body, then calls
	// CheckRetry again with the reading's error. decided holds the first
	// step's verdict for the second.
	decided  bool
	final    bool  // the decided response is the server's final answer
	decision error // why retrying stopped, for a decided response
}

func (c *Client) newAttempts(op, key string) *attempts {
	b := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(c.cfg.InitialWait),
		backoff.WithMaxInterval(c.cfg.MaxWait),
		backoff.WithRandomizationFactor(c.cfg.Jitter),
		backoff.WithMaxElapsedTime(0), // MaxElapsed is enforced by next, Retry-After included
		backoff.WithClockProvider(clockFunc(c.now)),
	)
	return &attempts{c: c, op: op, key: key, backoff: b, started: c.now()}
}

// begin is go-retryablehttp's RequestLogHook: it runs before every attempt.
func (a *attempts) begin(_ retryablehttp.Logger, _ *http.Request, _ int) {
	a.n++
	a.decided, a.final, a.decision = false, false, nil
}

// next is go-retryablehttp's Backoff: the wait checkRetry chose.
func (a *attempts) next(_, _ time.Duration, _ int, _ *http.Response) time.Duration {
	return a.wait
}

// checkRetry is go-retryablehttp's CheckRetry.
func (a *attempts) checkRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	if a.decided {
		a.decided = false
		if err == nil {
			if a.final {
				a.c.budget.succeed()
			}
			a.report(false)
			return false, a.decision
		}
		// The body broke off after a final status: the attempt failed.
	}
	a.note(resp, err)
	retry, why := retryable(ctx, resp, err)
	if !retry {
		return a.decide(resp, err, why == nil, why)
	}
	a.c.budget.fail()
	var stop error
	switch {
	case a.n >= a.c.cfg.MaxAttempts:
		stop = errAttemptsExhausted
	case !a.c.budget.allowRetry():
		stop = ErrRetryBudgetExhausted
	default:
		a.wait = a.backoff.NextBackOff()
		if ra, ok := retryAfter(resp); ok && ra > a.wait {
			a.wait = ra
		}
		a.wait = min(a.wait, a.c.cfg.MaxWait)
		if a.c.now().Sub(a.started)+a.wait > a.c.cfg.MaxElapsed {
			stop = errElapsedExhausted
		}
	}
	if stop != nil {
		if why != nil {
			stop = fmt.Errorf("%w: %w", stop, why)
		}
		return a.decide(resp, err, false, stop)
	}
	a.report(true)
	return true, why
}

// decide ends the retries. A response whose body has not been read yet
// goes through the response handler first, and its verdict is reported
// when CheckRetry is called after it.
func (a *attempts) decide(resp *http.Response, err error, final bool, why error) (bool, error) {
	if resp != nil && err == nil {
		a.decided, a.final, a.decision = true, final, why
		return false, why
	}
	if why != nil {
		a.err = why
	}
	a.report(false)
	return false, why
}

func (a *attempts) note(resp *http.Response, err error) {
	a.status, a.header, a.err = 0, nil, err
	if resp != nil {
		a.status, a.header = resp.StatusCode, resp.Header
	}
}

func (a *attempts) report(retry bool) {
	if a.c.cfg.OnAttempt == nil {
		return
	}
	at := Attempt{Operation: a.op, Key: a.key, Number: a.n, Status: a.status, Err: a.err, Retry: retry}
	if retry {
		at.Wait = a.wait
	} else if a.decision != nil && a.err == nil {
		at.Err = a.decision
	}
	a.c.cfg.OnAttempt(at)
}

// clockFunc adapts Config.Now to backoff.Clock.
type clockFunc func() time.Time

func (f clockFunc) Now() time.Time { return f() }
