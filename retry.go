package idem

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/hashicorp/go-retryablehttp"
	"github.com/idemkit/idem/journal"
)

// Reasons retrying stops before a final answer, wrapped in
// OutcomeError.Err of an unknown outcome. ErrKeyExpired stops it too.
var (
	// ErrAttemptsExhausted is returned when MaxAttempts attempts were made.
	ErrAttemptsExhausted = errors.New("attempts exhausted")
	// ErrMaxElapsed is returned when the next attempt would start after
	// MaxElapsed.
	ErrMaxElapsed = errors.New("maximum elapsed time reached")
	// ErrRetryBudgetExhausted is returned when the RetryBudget stopped a retry.
	ErrRetryBudgetExhausted = errors.New("retry budget exhausted")
	// ErrRetryDeclined is returned when Config.CheckRetry stopped a retry
	// the rule would make; its own error, if any, is wrapped too.
	ErrRetryDeclined = errors.New("Config.CheckRetry declined to retry")
)

// DefaultCheckRetry is the retry rule (see Retries) as a go-retryablehttp
// CheckRetry. A Config.CheckRetry may call it.
func DefaultCheckRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	return retryable(ctx, resp, err)
}

// retryable classifies the result of one attempt: whether to send another,
// and, when not, the error that explains why (nil for a final answer).
func retryable(ctx context.Context, resp *http.Response, err error) (bool, error) {
	if err == nil && ctx.Err() == nil {
		switch resp.StatusCode {
		case http.StatusRequestTimeout:
			return true, fmt.Errorf("unexpected HTTP status %s", resp.Status)
		case http.StatusConflict:
			if !replayed(resp) {
				return true, fmt.Errorf("key in flight: %s", resp.Status)
			}
		}
	}
	return retryablehttp.ErrorPropagatedRetryPolicy(ctx, resp, err)
}

// replayed reports whether resp is a server's stored answer for the key,
// replayed (the Idempotent-Replayed header of Stripe and the reference
// server), rather than an answer about this attempt.
func replayed(resp *http.Response) bool {
	return strings.EqualFold(strings.TrimSpace(resp.Header.Get("Idempotent-Replayed")), "true")
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
	if hugeDelay.MatchString(resp.Header.Get("Retry-After")) {
		return math.MaxInt64, true // too many seconds for a time.Duration: "much later"
	}
	view := &http.Response{StatusCode: http.StatusServiceUnavailable, Header: resp.Header}
	// With min and max zero, DefaultBackoff returns the Retry-After delay,
	// or zero when the header does not parse.
	d := retryablehttp.DefaultBackoff(0, 0, 0, view)
	return d, d > 0
}

// hugeDelay matches delay-seconds of ten digits or more, which overflow a
// time.Duration in go-retryablehttp's parsing (2^63ns is about 9.2e9 s).
var hugeDelay = regexp.MustCompile(`^\s*[0-9]{10,}\s*$`)

// Attempt describes one attempt of an operation, for Config.OnAttempt.
type Attempt struct {
	ID     string        // the operation ID ("" for a request without one)
	Key    string        // the idempotency key the attempt carried
	Number int           // 1 for the first attempt of this Do
	Status int           // the response status; 0 if no response arrived
	Err    error         // the transport or body error, or why retrying stopped
	Retry  bool          // whether another attempt follows
	Wait   time.Duration // the wait before that attempt, when Retry
}

// attempts is the retry state of one Do: go-retryablehttp calls its
// checkRetry after every attempt, and it decides whether and when the next
// one goes. It reads the body of a final answer within the attempt, so a
// body that breaks off is a failed attempt, and it keeps the last result
// for the OutcomeError.
type attempts struct {
	c       *Client
	op, key string
	created time.Time     // when the key was minted: it must not outlive ttl,
	ttl     time.Duration // the key lifetime its operation records
	backoff backoff.ExponentialBackOff
	started time.Time

	lim limits // the Config's bounds, or the call's (calloptions.go)

	// lost is closed if the operation's claim lapses (a shared journal's
	// lease, F3): no attempt starts after, and the one in flight is cut
	// short (attempt_deadline.go). Nil for a claim that cannot lapse.
	lost <-chan struct{}

	n    int           // attempts made so far
	wait time.Duration // the wait chosen after the last attempt
	stop error         // why retrying stopped before a final answer

	// The last attempt's response status, header and the first bytes of
	// its body, or its transport or body error.
	status        int
	header        http.Header
	body          []byte
	bodyTruncated bool
	err           error

	answer Answer // what the dialect's signals say of the last response; 0 if none matched

	final []byte // a final answer's body, up to MaxRecordedBody
	fits  bool   // the final answer's body is all in final

	deadline time.Time     // the running attempt's (attempt_deadline.go)
	closer   cancelOnClose // its response body, releasing the deadline when closed

	finalBody bytesBody // a final answer's body, read whole (readFinal)

	// The attempts' request (send): the caller's, shallow-copied with ctx
	// as its context, its key header's value, and what each attempt sends
	// as its body (content, read by openBody).
	ctx       attemptsContext
	req       http.Request
	rreq      retryablehttp.Request
	keyHeader [1]string
	content   any  // nil, []byte or getBody (requestBody.rewind)
	probing   bool // SetBody is calling openBody to learn the length
}

// attemptsContext is the context of an operation's requests: the caller's,
// carrying the attempts under attemptsKey (attempt_deadline.go). Being a
// field of the attempts, it costs no allocation of its own.
type attemptsContext struct {
	context.Context
	a *attempts
}

func (c *attemptsContext) Value(key any) any {
	if key == (attemptsKey{}) {
		return c.a
	}
	return c.Context.Value(key)
}

// openBody is go-retryablehttp's body function: a new reader of the body
// for each attempt, known to net/http as in memory when it is (so the
// header and body go out in one write). SetBody calls it once to learn the
// length, which send sets itself: that call (probing) reads nothing.
func (a *attempts) openBody() (io.Reader, error) {
	if a.probing {
		return http.NoBody, nil
	}
	switch b := a.content.(type) {
	case []byte:
		return io.NopCloser(bytes.NewReader(b)), nil
	case getBody:
		return b.open()
	}
	return http.NoBody, nil
}

func (c *Client) newAttempts(op journal.Operation, lim limits) *attempts {
	a := &attempts{c: c, op: op.ID, key: op.Key, created: op.Created, ttl: op.KeyTTL, lim: lim}
	// What backoff.NewExponentialBackOff builds, in place: one allocation
	// for the attempts and their backoff together.
	a.backoff = backoff.ExponentialBackOff{
		InitialInterval:     c.cfg.InitialWait,
		RandomizationFactor: c.cfg.Jitter,
		Multiplier:          backoff.DefaultMultiplier,
		MaxInterval:         c.cfg.MaxWait,
		MaxElapsedTime:      lim.elapsed,
		Stop:                backoff.Stop,
		Clock:               clockFunc(c.now),
	}
	a.backoff.Reset()
	a.started = c.now()
	return a
}

// sender is a go-retryablehttp Client whose hooks act on the attempts of
// the Do it is sending: RequestLogHook starts each attempt (begin),
// CheckRetry decides what follows it (checkRetry), and Backoff returns the
// wait checkRetry chose. A Client keeps its senders in a pool, as building
// go-retryablehttp's Client and binding its hooks for every Do cost four
// allocations.
type sender struct {
	rc retryablehttp.Client
	a  *attempts // the Do being sent; nil while the sender is in the pool
}

func (c *Client) newSender() *sender {
	s := &sender{}
	s.rc.HTTPClient = c.hc
	s.rc.ErrorHandler = retryablehttp.PassthroughErrorHandler
	s.rc.RequestLogHook = func(retryablehttp.Logger, *http.Request, int) { s.a.begin() }
	s.rc.CheckRetry = func(ctx context.Context, resp *http.Response, err error) (bool, error) {
		return s.a.checkRetry(ctx, resp, err)
	}
	s.rc.Backoff = func(_, _ time.Duration, _ int, _ *http.Response) time.Duration { return s.a.wait }
	return s
}

// sendAttempts makes the attempts a of req, through a pooled sender.
func (c *Client) sendAttempts(req *retryablehttp.Request, a *attempts) (*http.Response, error) {
	s, ok := c.senders.Get().(*sender)
	if !ok {
		s = c.newSender()
	}
	s.a, s.rc.RetryMax = a, a.lim.attempts-1
	resp, err := s.rc.Do(req)
	s.a = nil
	c.senders.Put(s)
	return resp, err
}

// begin runs before every attempt.
func (a *attempts) begin() {
	a.n++
	a.startDeadline()
}

// checkRetry is go-retryablehttp's CheckRetry.
func (a *attempts) checkRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	err = a.c.secrets.Error(err) // the secrets rule (secrets.go): the error names the URL
	if rerr := a.readAnswer(resp, err); rerr != nil {
		resp, err = nil, fmt.Errorf("reading response body: %w", rerr)
	}
	retry, why := a.classify(ctx, resp, err)
	if !retry && why == nil && err == nil {
		// A final answer. Its body is part of it: read it now, within the
		// attempt, to record it; if it breaks off, the attempt failed.
		if rerr := a.readFinal(resp); rerr != nil {
			err = fmt.Errorf("reading response body: %w", rerr)
			retry, why = retryable(ctx, nil, err)
		}
	}
	a.note(resp, err, retry || a.answer == AnswerKeyReused) // the OutcomeError shows what was not final
	if !retry {
		if why == nil && err == nil {
			a.c.budget.succeed()
		}
		a.stop = why
		a.report(false)
		return false, why
	}

	a.c.budget.fail()
	switch {
	case a.claimLost():
		a.stop = journal.ErrClaimLost
	case a.n >= a.lim.attempts:
		a.stop = ErrAttemptsExhausted
	case !a.c.budget.allowRetry():
		a.stop = ErrRetryBudgetExhausted
	default:
		a.wait, a.stop = a.nextWait(resp)
	}
	if a.stop != nil {
		if why != nil {
			a.stop = fmt.Errorf("%w: %w", a.stop, why)
		}
		a.report(false)
		return false, a.stop
	}
	a.report(true)
	return true, why
}

// classify is the retry rule, as Config.CheckRetry may amend it: it may
// retry an answer the rule takes for final, or stop retrying one the rule
// would retry; then the outcome is unknown (ErrRetryDeclined), never a
// recorded answer, since the server may still apply the request.
func (a *attempts) classify(ctx context.Context, resp *http.Response, err error) (bool, error) {
	retry, why := a.answered(ctx, resp, err)
	hook := a.c.cfg.CheckRetry
	if hook == nil || ctx.Err() != nil {
		return retry, why
	}
	again, herr := hook(ctx, resp, err)
	switch {
	case again && !retry && why == nil:
		return true, fmt.Errorf("Config.CheckRetry retries status %s", resp.Status)
	case !again && retry:
		if herr != nil {
			return false, fmt.Errorf("%w: %w", ErrRetryDeclined, herr)
		}
		return false, ErrRetryDeclined
	}
	return retry, why
}

// readAnswer reads what the dialect's signals say of an attempt's
// response into a.answer, reading the first bytes of its body when a
// signal looks into it (and putting them back for whoever reads it next).
func (a *attempts) readAnswer(resp *http.Response, err error) error {
	a.answer = 0
	if err != nil || resp == nil {
		return nil
	}
	var body []byte
	if a.c.dialect.readsBody(resp.StatusCode) {
		buf, _, rerr := readPrefix(resp.Body, answerBodyLimit, resp.ContentLength)
		if rerr != nil {
			return rerr
		}
		body = buf
		resp.Body = withPrefix(buf, resp.Body)
	}
	a.answer = a.c.dialect.answer(resp, body)
	return nil
}

// answered is the retry rule read through the dialect (D2): an answer in
// flight is retried, whatever its status; a key reused stops retrying,
// unknown; an answer applied or refused is final, whatever its status; a
// replay is final where the rule would take it for in flight (a 409), and
// read as the rule says otherwise.
func (a *attempts) answered(ctx context.Context, resp *http.Response, err error) (bool, error) {
	if err == nil && ctx.Err() == nil {
		switch a.answer {
		case AnswerInFlight:
			return true, fmt.Errorf("key in flight (%s): %s", a.c.dialect.Name, resp.Status)
		case AnswerKeyReused:
			return false, fmt.Errorf("%w: %s", ErrKeyReused, resp.Status)
		case AnswerApplied, AnswerRefused:
			return false, nil
		case AnswerReplay:
			if resp.StatusCode == http.StatusConflict {
				return false, nil
			}
		}
	}
	return retryable(ctx, resp, err)
}

// nextWait chooses the wait before the next attempt, or says why there is
// none: MaxElapsed would pass, or the key would outlive KeyTTL.
func (a *attempts) nextWait(resp *http.Response) (time.Duration, error) {
	wait := a.backoff.NextBackOff()
	if wait == backoff.Stop {
		return 0, ErrMaxElapsed
	}
	if ra, ok := retryAfter(resp); ok && ra > wait {
		wait = min(ra, a.c.cfg.MaxWait)
		if a.c.now().Sub(a.started)+wait > a.lim.elapsed {
			return 0, ErrMaxElapsed
		}
	}
	if !a.c.keyUsable(a.created, a.ttl, a.c.now().Add(wait)) {
		return 0, ErrKeyExpired
	}
	return wait, nil
}

// readFinal reads a final answer's body, up to MaxRecordedBody, and leaves
// resp.Body serving the same bytes to the caller.
func (a *attempts) readFinal(resp *http.Response) error {
	buf, complete, err := readPrefix(resp.Body, a.c.cfg.MaxRecordedBody, resp.ContentLength)
	if err != nil {
		return err
	}
	if complete {
		resp.Body.Close()
		a.finalBody.Reset(buf)
		resp.Body = &a.finalBody
	} else {
		resp.Body = withPrefix(buf, resp.Body)
	}
	a.final, a.fits = buf, complete
	return nil
}

// note keeps the last attempt's result. The first bytes of a response
// that is retried, or that ends the operation unknown (discard), are read
// for the OutcomeError before it is drained, and put back so the drain
// still keeps the connection.
func (a *attempts) note(resp *http.Response, err error, discard bool) {
	a.status, a.header, a.body, a.bodyTruncated, a.err = 0, nil, nil, false, err
	if resp == nil {
		return
	}
	a.status, a.header = resp.StatusCode, resp.Header
	if discard && err == nil {
		buf, complete, _ := readPrefix(resp.Body, errorBodyLimit, resp.ContentLength)
		a.body, a.bodyTruncated = buf[:min(len(buf), errorBodyLimit)], !complete
		resp.Body = withPrefix(buf, resp.Body)
	}
}

func (a *attempts) report(retry bool) {
	if a.c.cfg.OnAttempt == nil {
		return
	}
	at := Attempt{ID: a.op, Key: a.key, Number: a.n, Status: a.status, Err: a.err, Retry: retry}
	if retry {
		at.Wait = a.wait
	} else if a.err == nil {
		at.Err = a.stop
	}
	a.c.cfg.OnAttempt(at)
}

// clockFunc adapts the Client's clock, the journal's, to backoff.Clock.
type clockFunc func() time.Time

func (f clockFunc) Now() time.Time { return f() }
