package idem

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-cleanhttp"
	"github.com/hashicorp/go-retryablehttp"
	"github.com/idemkit/idem/internal/journalkit"
	"github.com/idemkit/idem/internal/redact"
	"github.com/idemkit/idem/journal"
)

// Config configures a Client, which without a Journal remembers its
// operations in this process only, in bounded memory. The zero Config is
// usable: a zero field takes the Default constant of its name, or the
// default its doc states.
type Config struct {
	// Journal keeps operations across restarts; without one, a Client
	// remembers them in this process only: the pending ones, the outcomes
	// of its latest within 16 MiB, and at most MaxOperations in all, until
	// KeyTTL (to 9/8 KeyTTL) after each completed. A Do it cannot answer
	// is refused before sending (journal.ErrOutcomeForgotten,
	// ErrTooManyOperations),
	// never sent again under a new key. Clients may share a Journal.
	Journal journal.Journal
	// MaxOperations bounds a Client without a Journal (see Journal). Default 1<<23.
	MaxOperations int

	// HTTPClient sends the attempts (see Redirects). Default:
	// go-cleanhttp's pooled client.
	HTTPClient *http.Client

	// AttemptTimeout bounds each attempt, the recorded body read included.
	AttemptTimeout time.Duration
	// MaxAttempts bounds one Do's attempts.
	MaxAttempts int
	// MaxElapsed bounds one Do's retrying.
	MaxElapsed time.Duration
	// InitialWait is the first wait; later ones grow by half.
	InitialWait time.Duration
	// MaxWait caps every wait, a Retry-After included.
	MaxWait time.Duration
	// Jitter spreads each wait over [1-Jitter, 1+Jitter] times its value,
	// at most 1; negative turns it off.
	Jitter float64

	// RetryBudget bounds retries across the Client's operations (on by default).
	RetryBudget RetryBudget
	// Dialect is how the API speaks idempotency: the zero Dialect sends
	// the key in Idempotency-Key, as the IETF draft does. Set its
	// KeyHeader for another header.
	Dialect Dialect

	// MaxBufferedBody bounds a request body without GetBody, held in
	// memory to be replayed (ErrBodyTooLarge).
	MaxBufferedBody int64
	// MaxRecordedBody bounds the response body recorded with an outcome
	// (ErrBodyNotRecorded).
	MaxRecordedBody int64
	// MaxRecordedHeader bounds the response header recorded, as counted on
	// the wire.
	MaxRecordedHeader int64

	// UnrecordedHeaders names response header fields never recorded,
	// besides cookies and credentials (see Secrets). Default nil.
	UnrecordedHeaders []string
	// RedactedParams names query parameters whose values are never
	// written, besides credential-like ones (see Secrets). Default nil.
	RedactedParams []string

	// CheckRetry, when set, amends DefaultCheckRetry (see Retries).
	CheckRetry func(ctx context.Context, resp *http.Response, err error) (bool, error)

	// OnAttempt, when set, is called after each attempt. Default nil.
	OnAttempt func(Attempt)
	// OnOperation, when set, is called as every operation ends. Default nil.
	OnOperation func(OperationEnd)
	// OnOperationStart, when set, is called as every operation starts; the
	// context it returns is the operation's. Default nil.
	OnOperationStart func(ctx context.Context, id string) context.Context

	// Logger receives the Client's records (see Logging). Default
	// slog.Default().
	Logger *slog.Logger

	// BaseURLMoves lets journaled operations resume under their keys after
	// their API moved: old URL prefix -> new prefix. Default nil.
	BaseURLMoves map[string]string
}

// Defaults of Config, applied by New to zero fields.
const (
	DefaultAttemptTimeout  = 10 * time.Second
	DefaultMaxAttempts     = 8
	DefaultMaxElapsed      = 2 * time.Minute
	DefaultInitialWait     = 250 * time.Millisecond
	DefaultMaxWait         = 30 * time.Second
	DefaultJitter          = 0.5
	DefaultMaxBufferedBody = 1 << 20
	DefaultMaxRecordedBody = 64 << 10

	DefaultMaxRecordedHeader = 16 << 10

	// DefaultKeyTTL (24 hours) is the key lifetime of a server whose Dialect
	// states none.
	DefaultKeyTTL = journalkit.DefaultKeyTTL
)

// keyTTL returns the key lifetime the Client records with each operation
// it begins: the Dialect's Retention, else DefaultKeyTTL.
func keyTTL(d Dialect) time.Duration {
	if d.Retention > 0 {
		return d.Retention
	}
	return DefaultKeyTTL
}

// errorBodyLimit bounds the prefix of a last response kept in an Unknown
// OutcomeError.
const errorBodyLimit = 4 << 10

// Client sends requests as idempotent operations. It is safe for concurrent
// use.
type Client struct {
	cfg     Config
	dialect Dialect       // cfg.Dialect, its signals copied
	ttl     time.Duration // the key lifetime recorded with each operation begun
	journal journal.Journal
	hc      *http.Client
	budget  *budget
	secrets redact.Rules
	log     *slog.Logger
	now     func() time.Time

	callerRedirect func(*http.Request, []*http.Request) error // HTTPClient's CheckRedirect

	senders sync.Pool // of *sender (retry.go)
}

// New returns a Client for cfg, with defaults filled in.
func New(cfg Config) (*Client, error) { return newClient(cfg, nil) }

// newClient is New with a clock for a Client without a journal (nil:
// time.Now); a Client with a journal uses the journal's.
func newClient(cfg Config, now func() time.Time) (*Client, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	d := cfg.Dialect.resolved()
	cfg.setDefaults(d)
	switch {
	case cfg.Journal != nil:
		now = cfg.Journal.Now
	case now == nil:
		now = time.Now
	}
	c := &Client{cfg: cfg, dialect: d, ttl: keyTTL(d), journal: cfg.Journal, budget: newBudget(cfg.RetryBudget),
		secrets: newSecrets(cfg), log: cfg.Logger, now: now}
	if c.journal == nil {
		c.journal = newMemoryJournalFor(c.ttl, now, cfg.MaxOperations) // journal_memory.go
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	c.hc, c.callerRedirect = attemptClient(cfg.HTTPClient)
	return c, nil
}

// check returns an error matching ErrInvalidConfig if New cannot use cfg.
func (cfg *Config) check() error {
	if cfg.MaxAttempts < 0 || cfg.AttemptTimeout < 0 || cfg.MaxElapsed < 0 || cfg.InitialWait < 0 ||
		cfg.MaxWait < 0 || cfg.MaxOperations < 0 || cfg.MaxBufferedBody < 0 || cfg.MaxRecordedBody < 0 || cfg.MaxRecordedHeader < 0 ||
		!(cfg.Jitter <= 1) || math.IsInf(cfg.Jitter, -1) {
		return fmt.Errorf("idem: %w: Config has a negative limit, or a Jitter that is not a number at most 1", ErrInvalidConfig)
	}
	if err := cfg.Dialect.check(); err != nil {
		return fmt.Errorf("idem: %w: dialect %q: %w", ErrInvalidConfig, cfg.Dialect.Name, err)
	}
	if v := reflect.ValueOf(cfg.Journal); v.Kind() == reflect.Pointer && v.IsNil() {
		return fmt.Errorf("idem: %w: Journal is a nil %T", ErrInvalidConfig, cfg.Journal)
	}
	return nil
}

// setDefaults fills in cfg's zero fields, for a Client of dialect d.
func (cfg *Config) setDefaults(d Dialect) {
	setDefault(&cfg.AttemptTimeout, DefaultAttemptTimeout)
	setDefault(&cfg.MaxAttempts, DefaultMaxAttempts)
	setDefault(&cfg.MaxElapsed, DefaultMaxElapsed)
	setDefault(&cfg.InitialWait, DefaultInitialWait)
	setDefault(&cfg.MaxWait, DefaultMaxWait)
	setDefault(&cfg.MaxOperations, defaultMaxOperations)
	setDefault(&cfg.MaxBufferedBody, DefaultMaxBufferedBody)
	setDefault(&cfg.MaxRecordedBody, DefaultMaxRecordedBody)
	setDefault(&cfg.MaxRecordedHeader, DefaultMaxRecordedHeader)
	switch {
	case cfg.Jitter == 0:
		cfg.Jitter = DefaultJitter
	case cfg.Jitter < 0:
		cfg.Jitter = 0
	}
}

// resolved returns d as a Client sends it: its signals copied, and its
// key header, unless the key goes in a body field, named in canonical
// form (Idempotency-Key by default).
func (d Dialect) resolved() Dialect {
	d.Signals = slices.Clone(d.Signals)
	if d.KeyField == "" {
		setDefault(&d.KeyHeader, defaultKeyHeader)
		d.KeyHeader = http.CanonicalHeaderKey(d.KeyHeader)
	}
	return d
}

// defaultKeyHeader carries the key when the dialect names no header.
const defaultKeyHeader = "Idempotency-Key"

// attemptClient returns the client that sends attempts, made from hc (nil:
// go-cleanhttp's pooled client), and hc's own CheckRedirect.
func attemptClient(hc *http.Client) (*http.Client, func(*http.Request, []*http.Request) error) {
	if hc == nil {
		hc = cleanhttp.DefaultPooledClient()
	}
	attempt := *hc
	// AttemptTimeout is applied by attemptDeadline (attempt_deadline.go),
	// not by http.Client.Timeout, whose goroutine per request costs more.
	attempt.Timeout = 0
	// go-retryablehttp closes the idle connections of its client's
	// transport whenever it gives up; on a transport shared with the rest
	// of the program (http.DefaultTransport) that would empty everyone's
	// pool on every unknown outcome. Broken connections are dropped by the
	// transport itself.
	attempt.Transport = attemptDeadline{keepIdle{attempt.Transport}}
	attempt.CheckRedirect = followRedirect(hc.CheckRedirect)
	return &attempt, hc.CheckRedirect
}

// keepIdle hides its transport's CloseIdleConnections.
type keepIdle struct{ rt http.RoundTripper }

func (k keepIdle) RoundTrip(r *http.Request) (*http.Response, error) {
	if k.rt == nil {
		return http.DefaultTransport.RoundTrip(r)
	}
	return k.rt.RoundTrip(r)
}

// validHeaderName reports whether name is an HTTP field name (RFC 9110 token).
func validHeaderName(name string) bool {
	for _, r := range name {
		if r > '~' || r <= ' ' || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r) {
			return false
		}
	}
	return name != ""
}

func setDefault[T comparable](field *T, def T) {
	var zero T
	if *field == zero {
		*field = def
	}
}

// Do sends req as the operation named id and returns the server's final
// response, or an *OutcomeError (see Outcomes). req.Context() bounds the whole
// Do. Do closes req.Body, as http.Client.Do does. When the journal cannot
// be reached, Do sends nothing and returns an error matching
// [journal.ErrUnavailable].
func (c *Client) Do(id string, req *http.Request) (*http.Response, error) {
	if id == "" {
		closeBody(req)
		return nil, fmt.Errorf("idem: %w: empty operation ID", ErrInvalidRequest)
	}
	return c.doClaimed(id, req, nil)
}

// doClaimed is Do of an operation whose claim the caller may have taken
// (nil: Do takes it), released when it returns.
func (c *Client) doClaimed(id string, req *http.Request, claim journal.Claim) (*http.Response, error) {
	res, err := c.do(id, req, claim)
	if err != nil {
		return nil, err
	}
	if res.outcome == OutcomeRejected {
		defer drain(res.resp.Body)
		return nil, res.rejection()
	}
	return res.resp, nil
}

// result is what one do ended with: a response with its outcome (Done or
// Rejected), which the caller owns and must close.
type result struct {
	op      journal.Operation
	outcome Outcome
	resp    *http.Response
	n       int // attempts; 0 for an outcome answered from the journal

	// For a rejection: the body's first bytes, up to MaxRecordedBody, and
	// whether the body was longer; whether the header lacks fields that
	// were not recorded.
	body            []byte
	bodyTruncated   bool
	headerTruncated bool
}

func (r result) rejection() *OutcomeError {
	return &OutcomeError{
		ID: r.op.ID, Key: r.op.Key, Outcome: OutcomeRejected, Attempts: r.n, Recorded: r.n == 0,
		Status: r.resp.StatusCode, Header: r.resp.Header, Body: r.body, BodyTruncated: r.bodyTruncated,
		HeaderTruncated: r.headerTruncated,
	}
}

// recordedResult is the result of an operation answered from the journal.
func recordedResult(op journal.Operation, req *http.Request) result {
	res := result{op: op, outcome: OutcomeDone, resp: recordedResponse(op, req), body: op.Body,
		bodyTruncated: op.BodyTruncated, headerTruncated: op.HeaderTruncated}
	if op.State == journal.StateRejected {
		res.outcome = OutcomeRejected
	}
	return res
}

// do runs an operation, under claim if the caller took it, and tells
// Config.OnOperationStart and OnOperation how it starts and ends.
func (c *Client) do(id string, req *http.Request, claim journal.Claim) (result, error) {
	if start := c.cfg.OnOperationStart; start != nil && req != nil {
		req = req.WithContext(start(req.Context(), id))
	}
	if c.cfg.OnOperation == nil {
		return c.run(id, req, claim)
	}
	start := time.Now()
	res, err := c.run(id, req, claim)
	end := endOf(id, res, err, time.Since(start))
	if req != nil {
		end.Context = req.Context()
	}
	c.cfg.OnOperation(end)
	return res, err
}

// RetryBudgetTokens returns the tokens left in the retry budget.
func (c *Client) RetryBudgetTokens() float64 { return c.budget.available() }

// run runs an operation; an empty id is a request without one, whose key
// lives only as long as this call. A claim the caller took is released
// when run returns; without one, run takes it.
func (c *Client) run(id string, req *http.Request, claim journal.Claim) (result, error) {
	if claim != nil {
		defer claim.Release()
	}
	if err := validate(id, req); err != nil {
		closeBody(req)
		return result{}, err
	}
	ctx := req.Context()
	lim, err := c.callLimits(ctx)
	if err != nil {
		closeBody(req)
		return result{}, wrapf(err, "operation %s", journalkit.QuoteID(id))
	}
	body, err := captureBody(req, c.cfg.MaxBufferedBody)
	if err == nil && c.dialect.KeyField != "" {
		body, err = body.object(c.dialect.KeyField, c.cfg.MaxBufferedBody)
	}
	if err != nil {
		return result{}, wrapf(err, "operation %s", journalkit.QuoteID(id))
	}
	fp := body.fingerprint
	var op journal.Operation
	if id == "" {
		key, err := newKey()
		if err != nil {
			return result{}, err
		}
		op = journal.Operation{Key: key, Fingerprint: fp, Created: c.now(), KeyTTL: c.ttl, State: journal.StatePending}
	} else {
		if claim == nil {
			if _, err := c.resendBeforeClaim(ctx, id); err != nil { // resend.go
				return result{}, err
			}
			if cb, ok := c.journal.(journal.ClaimBeginner); ok {
				return c.runClaimBegin(ctx, cb, id, req, body, lim)
			}
			if claim, err = c.journal.Claim(ctx, id); err != nil {
				return result{}, wrapf(err, "operation %s: %s", journalkit.QuoteID(id), claimFailure(ctx, err))
			}
			defer claim.Release()
		}
		if err := ctx.Err(); err != nil { // nothing is journaled for a Do given up on
			return result{}, wrapf(err, "operation %s", journalkit.QuoteID(id))
		}
		op, err = c.admit(ctx, claim, id, req, body)
		if err != nil {
			return result{op: op}, err // op holds the key of a refused operation, if known
		}
		if op.State != journal.StatePending {
			c.log.Debug("idem: returning recorded outcome", "op", id, "key", op.Key, "state", op.State)
			return recordedResult(op, req), nil
		}
		if err := c.dialect.keyFits(op.Key); err != nil { // a key journaled by another version, or dialect
			return result{op: op}, fmt.Errorf("idem: operation %q: %w", id, err)
		}
		return c.send(ctx, claim, op, req, body, lim)
	}
	return c.send(ctx, nil, op, req, body, lim)
}

// runClaimBegin is run's operation with an ID through a journal that
// claims and begins in one step: the key is minted before the claim, and
// what the journal held instead is judged as admit judges it.
func (c *Client) runClaimBegin(ctx context.Context, cb journal.ClaimBeginner, id string, req *http.Request, body requestBody, lim limits) (result, error) {
	if err := ctx.Err(); err != nil { // nothing is journaled for a Do given up on
		return result{}, wrapf(err, "operation %s", journalkit.QuoteID(id))
	}
	key, err := newKey()
	if err != nil {
		return result{}, err
	}
	mine := journal.Operation{
		ID: id, Key: key, Fingerprint: body.fingerprint, Method: req.Method, URL: c.journaledURL(req, body),
		Created: c.now(), KeyTTL: c.ttl, State: journal.StatePending,
	}
	claim, err := cb.ClaimBegin(ctx, mine)
	if err != nil {
		return result{}, wrapf(err, "operation %s: %s", journalkit.QuoteID(id), claimFailure(ctx, err))
	}
	defer claim.Release()
	op, ok := claim.Operation()
	switch {
	case !ok:
		return result{}, fmt.Errorf("idem: operation %s: journaling intent: %w", journalkit.QuoteID(id), journal.ErrNoSuchOperation)
	case op.Key != mine.Key: // what the journal held: judged as admit judges it
		if op, err = c.judge(op, id, req, body); err != nil {
			return result{op: op}, err
		}
	}
	if op.State != journal.StatePending {
		c.log.Debug("idem: returning recorded outcome", "op", id, "key", op.Key, "state", op.State)
		return recordedResult(op, req), nil
	}
	if err := c.dialect.keyFits(op.Key); err != nil { // a key journaled by another version, or dialect
		return result{op: op}, fmt.Errorf("idem: operation %q: %w", id, err)
	}
	return c.send(ctx, claim, op, req, body, lim)
}

// claimFailure says in a few words what a failed Journal.Claim was doing:
// waiting for another Do of the operation, or asking the journal.
func claimFailure(ctx context.Context, err error) string {
	switch {
	case errors.Is(err, journal.ErrClaimed), ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return "waiting for a concurrent Do"
	case errors.Is(err, journal.ErrInvalidOperation):
		return "the journal refuses its ID"
	}
	return "claiming it in the journal"
}

// admit finds the operation in the journal, or mints its key and journals
// its intent. The intent is durable when admit returns (C2).
func (c *Client) admit(ctx context.Context, claim journal.Claim, id string, req *http.Request, body requestBody) (journal.Operation, error) {
	fp := body.fingerprint
	op, ok := claim.Operation()
	if !ok {
		key, err := newKey()
		if err != nil {
			return journal.Operation{}, err
		}
		op = journal.Operation{
			ID: id, Key: key, Fingerprint: fp, Method: req.Method, URL: c.journaledURL(req, body),
			Created: c.now(), KeyTTL: c.ttl, State: journal.StatePending,
		}
		err = claim.Begin(ctx, op)
		if err == nil {
			return op, nil
		}
		// A shared journal's claim on a new ID races with other
		// machines' until Begin: the loser's claim ends up holding what
		// the winner began (Claim.Begin), which is judged below like any
		// operation found in the journal. Its key is the one sent.
		if op, ok = claim.Operation(); !ok || !errors.Is(err, journal.ErrOperationExists) {
			return journal.Operation{}, wrapf(err, "operation %s: journaling intent", journalkit.QuoteID(id))
		}
	}
	return c.judge(op, id, req, body)
}

// judge refuses an operation the journal held whose fingerprint is not
// the request's (C5), or whose key has expired (C6).
func (c *Client) judge(op journal.Operation, id string, req *http.Request, body requestBody) (journal.Operation, error) {
	fp := body.fingerprint
	switch {
	case op.Fingerprint != fp && !c.movedFrom(op, req, body): // rebase.go
		return op, fmt.Errorf("idem: operation %s (key %s): %w: %s", journalkit.QuoteID(id), op.Key, ErrMismatch, c.difference(op, req, body))
	case op.State == journal.StatePending && !c.keyUsable(op.Created, op.KeyTTL, c.now()):
		return op, fmt.Errorf("idem: operation %s (key %s, minted %s): %w",
			journalkit.QuoteID(id), op.Key, op.Created.Format(time.RFC3339), ErrKeyExpired)
	}
	return op, nil
}

// journaledURL is req's URL as the journal records it: by the secrets
// rule, without user info or fragment and with secret query values
// replaced; a URL with none of them is the fingerprint's as it is.
func (c *Client) journaledURL(req *http.Request, body requestBody) string {
	if req.URL.User != nil || req.URL.RawQuery != "" || req.URL.Fragment != "" {
		return c.secrets.URL(req.URL)
	}
	return body.url
}

// difference says how req differs from the request op was journaled with,
// for ErrMismatch: its method, its URL, or else its body (or a secret of
// its URL, which the journal does not hold).
func (c *Client) difference(op journal.Operation, req *http.Request, body requestBody) string {
	switch url := c.journaledURL(req, body); {
	case op.Method != req.Method:
		return fmt.Sprintf("the method differs (journaled %s, now %s)", op.Method, req.Method)
	case op.URL != url:
		return fmt.Sprintf("the URL differs (journaled %q, now %q)", op.URL, url)
	case url != body.url:
		return "the body differs, or a secret in the URL"
	}
	return "the body differs"
}

// send makes the attempts of a pending operation and records its outcome.
func (c *Client) send(ctx context.Context, claim journal.Claim, op journal.Operation, req *http.Request, body requestBody, lim limits) (result, error) {
	a, err := c.prepare(ctx, claim, op, req, body, lim)
	if err != nil {
		return result{}, err
	}
	resp, err := c.sendAttempts(&a.rreq, a) // retry.go
	if err != nil {
		err = c.secrets.Error(err)
		if a.claimLost() && !errors.Is(err, journal.ErrClaimLost) {
			err = fmt.Errorf("%w: %w", journal.ErrClaimLost, err)
		}
		return result{}, c.unknown(a, resp, err)
	}
	res := c.record(ctx, claim, op, resp, a)
	if c.log.Enabled(ctx, slog.LevelDebug) { // spares the arguments' allocations when off
		c.log.Debug("idem: operation ended", "op", op.ID, "key", op.Key, "outcome", res.outcome,
			"status", resp.StatusCode, "attempts", a.n)
	}
	return res, nil
}

// prepare returns the attempts of op: the request every attempt sends,
// with the key in its header or body, and its body to replay.
func (c *Client) prepare(ctx context.Context, claim journal.Claim, op journal.Operation, req *http.Request, body requestBody, lim limits) (*attempts, error) {
	var length int64
	a := c.newAttempts(op, lim)
	if claim != nil {
		a.lost = claim.Lost()
	}
	// A shallow copy with a header map of its own is all the attempts
	// need: they add the key header and replace the body, and change
	// nothing else (a deep req.Clone cost a tenth of the client's time).
	// The copy, its context and its key header's value live in the
	// attempts: one allocation for all of them.
	a.ctx = attemptsContext{ctx, a}
	a.req = *req.WithContext(&a.ctx)
	out := &a.req
	out.Body, out.GetBody = nil, nil
	out.Header = make(http.Header, len(req.Header)+1)
	for name, values := range req.Header {
		// A key the caller set itself, under a name Set does not replace
		// (the map written directly, not in canonical form), would go out
		// beside the journaled one (C1).
		if name != c.dialect.KeyHeader && strings.EqualFold(name, c.dialect.KeyHeader) {
			continue
		}
		out.Header[name] = values
	}
	if c.dialect.KeyHeader != "" { // canonical (New): what Header.Set would write
		a.keyHeader[0] = c.keyValue(op.Key)
		out.Header[c.dialect.KeyHeader] = a.keyHeader[:]
	}
	a.content, length = body.rewind, body.length
	if field := c.dialect.KeyField; field != "" { // the key in the body (D1), on every attempt
		keyed := bodyWithKey(body.rewind.([]byte), field, op.Key)
		a.content, length = keyed, int64(len(keyed))
	}
	rreq := &a.rreq
	rreq.Request = out
	var content any // nil: no body
	if a.content != nil {
		content = retryablehttp.ReaderFunc(a.openBody)
	}
	a.probing = true
	err := rreq.SetBody(content)
	a.probing = false
	if err != nil {
		return nil, wrapf(err, "preparing request")
	}
	rreq.ContentLength = length
	return a, nil
}

// record returns the result of op's final answer resp, done or rejected,
// and records it under claim when the caller holds one.
func (c *Client) record(ctx context.Context, claim journal.Claim, op journal.Operation, resp *http.Response, a *attempts) result {
	res := result{op: op, outcome: OutcomeDone, resp: resp, n: a.n}
	state := journal.StateDone
	if a.answer == AnswerApplied {
		markApplied(resp) // not a header: the response carries the server's alone
	}
	if a.answer == AnswerRefused || a.answer != AnswerApplied && rejects(resp.StatusCode) {
		res.outcome, state = OutcomeRejected, journal.StateRejected
		res.body, res.bodyTruncated = a.final[:min(len(a.final), int(c.cfg.MaxRecordedBody))], !a.fits
	}
	if claim == nil {
		return res
	}
	op.State, op.Completed = state, c.now()
	// Complete encodes the header: no copy is needed.
	op.Status = resp.StatusCode
	h, truncated := redact.Bound(c.secrets.RecordedHeader(resp.Header), c.cfg.MaxRecordedHeader)
	var m journalkit.Marks
	op.Header, m = journalkit.SplitMarks(h) // a server's fields of the marks' names are not marks
	op.HeaderTruncated, op.Unrecorded, op.Applied = truncated, m.Unrecorded, a.answer == AnswerApplied
	if a.fits {
		op.Body = a.final
	} else {
		op.BodyTruncated = true
	}
	// The completion is not waited for (C3): were it lost, the next Do
	// would resend under the same key and get the server's replay. It is
	// recorded even when ctx ended just after the answer came.
	if err := claim.Complete(context.WithoutCancel(ctx), op); err != nil {
		c.log.Error("idem: recording outcome", "op", op.ID, "key", op.Key, "err", err)
	}
	res.op = op
	return res
}

// rejects reports whether a final status says the server did not apply the
// request (see ErrRejected): a 4xx or 5xx that retryable does not retry,
// or a redirect left unfollowed.
func rejects(status int) bool {
	return status >= 400 || unfollowedRedirect(status)
}

// unknown builds the error of a Do that ended without a final answer.
func (c *Client) unknown(a *attempts, resp *http.Response, err error) error {
	e := &OutcomeError{
		ID: a.op, Key: a.key, Outcome: OutcomeUnknown, Attempts: a.n,
		Status: a.status, Header: a.header, Body: a.body, BodyTruncated: a.bodyTruncated, Err: err,
	}
	if a.err != nil && !errors.Is(err, a.err) { // why retrying stopped, and what failed last
		e.Err = fmt.Errorf("%w: %w", err, a.err)
	}
	if resp != nil {
		drain(resp.Body)
	}
	c.log.Debug("idem: operation outcome", "op", a.op, "key", a.key, "outcome", e.Outcome,
		"attempts", a.n, "status", a.status, "err", e.Err)
	return e
}

// keyUsable reports whether an attempt sent at the given time with a key
// minted at created, which the server keeps ttl (the lifetime its
// operation records), is sure to be done with before the key is ttl old:
// the attempt may take AttemptTimeout to reach the server and be answered,
// and a server that has swept the key by then would apply it as new.
func (c *Client) keyUsable(created time.Time, ttl time.Duration, at time.Time) bool {
	return at.Add(c.cfg.AttemptTimeout).Sub(created) < ttl
}

// keyValue formats a key for the key header.
func (c *Client) keyValue(key string) string {
	if c.dialect.QuotedKey {
		return strconv.Quote(key)
	}
	return key
}

// maxIDLength bounds operation IDs, as the journal does.
const maxIDLength = 4096

// validate refuses requests that cannot be sent as operations.
func validate(id string, req *http.Request) error {
	switch {
	case len(id) > maxIDLength:
		return fmt.Errorf("idem: %w: operation ID of %d bytes, more than %d", ErrInvalidRequest, len(id), maxIDLength)
	case req == nil:
		return fmt.Errorf("idem: %w: nil request", ErrInvalidRequest)
	case req.URL == nil:
		return fmt.Errorf("idem: %w: request without URL", ErrInvalidRequest)
	case req.URL.Scheme != "http" && req.URL.Scheme != "https":
		return fmt.Errorf("idem: %w: unsupported URL scheme %q", ErrInvalidRequest, req.URL.Scheme)
	case req.URL.Host == "":
		return fmt.Errorf("idem: %w: URL without host", ErrInvalidRequest)
	}
	return nil
}

func closeBody(req *http.Request) {
	if req != nil && req.Body != nil {
		req.Body.Close()
	}
}

// The RoundTripper form, for code that only accepts an *http.Client
// (generated API clients, SDKs).

type operationKey struct{}

// WithOperation returns a context that names the operation a request
// belongs to, for the Client's RoundTripper and StandardClient.
func WithOperation(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, operationKey{}, id)
}

// OperationFrom returns the operation ID that WithOperation stored in ctx.
func OperationFrom(ctx context.Context) (string, bool) {
	id, ok := ctx.Value(operationKey{}).(string)
	return id, ok && id != ""
}

// RoundTripper returns an http.RoundTripper that sends each request as an
// operation of c: the one WithOperation names, or, for a mutating request
// without one, an operation of its own; a GET, HEAD or OPTIONS request
// without one is sent once, without a key. Unlike Do, a rejection is
// returned as the server's response. Errors report false from their
// RetryableError method, so an SDK's own retry loop does not retry them.
func (c *Client) RoundTripper() http.RoundTripper { return roundTripper{c} }

// StandardClient returns an *http.Client whose transport is
// c.RoundTripper() and that stops at the redirects idem leaves unfollowed.
func (c *Client) StandardClient() *http.Client {
	return &http.Client{Transport: c.RoundTripper(), CheckRedirect: c.standardRedirect}
}

// standardRedirect is StandardClient's CheckRedirect: a redirect after a
// request that carried a key was left unfollowed on purpose; any other
// follows the caller's policy.
func (c *Client) standardRedirect(req *http.Request, via []*http.Request) error {
	if carriesKey(via[len(via)-1]) {
		return http.ErrUseLastResponse
	}
	return defaultRedirect(c.callerRedirect, req, via)
}

// carriesKey reports whether the RoundTripper sends req as an operation.
func carriesKey(req *http.Request) bool {
	_, named := OperationFrom(req.Context())
	return named || !safeMethod(req.Method)
}

type roundTripper struct{ c *Client }

func (t roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if prev := req.Response; prev != nil && prev.Request != nil && carriesKey(prev.Request) {
		closeBody(req)
		return nil, notRetryable{fmt.Errorf("idem: %w: the *http.Client around idem's RoundTripper followed a %s redirect of a request that "+
			"carries a key; use Client.StandardClient, or a CheckRedirect that returns http.ErrUseLastResponse", ErrInvalidRequest, prev.Status)}
	}
	if !carriesKey(req) {
		return t.c.passThrough(req)
	}
	id, _ := OperationFrom(req.Context())
	res, err := t.c.do(id, req, nil)
	if err != nil {
		return nil, notRetryable{err}
	}
	return res.resp, nil
}

// passThrough sends a safe request that names no operation once, as
// RoundTripper describes; the client around the RoundTripper follows its
// redirects.
func (c *Client) passThrough(req *http.Request) (*http.Response, error) {
	hc := http.Client{
		Transport:     c.hc.Transport,
		Jar:           c.hc.Jar,
		Timeout:       c.cfg.AttemptTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	// The jar adds its cookies to the request it is given: give it a copy,
	// as a RoundTripper must not change the caller's.
	return hc.Do(req.Clone(req.Context()))
}
