package idem_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/journal"
)

// wireAttempt is what a server saw of one attempt: its headers and body.
type wireAttempt struct {
	header http.Header
	body   []byte
}

// wire is a server that answers every attempt with steps (the last
// repeating), recording each attempt as it arrived.
type wire struct {
	srv   *httptest.Server
	mu    sync.Mutex
	steps []step
	seen  []wireAttempt
}

func newWire(t *testing.T, steps ...step) *wire {
	t.Helper()
	w := &wire{steps: steps}
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.mu.Lock()
		i := len(w.seen)
		w.seen = append(w.seen, wireAttempt{r.Header.Clone(), body})
		st := status(200, `{"ok":true}`)
		if len(w.steps) > 0 && w.steps[min(i, len(w.steps)-1)] != nil {
			st = w.steps[min(i, len(w.steps)-1)]
		}
		w.mu.Unlock()
		st(rw, r)
	}))
	t.Cleanup(w.srv.Close)
	return w
}

func (w *wire) attempts() []wireAttempt {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]wireAttempt(nil), w.seen...)
}

// bodyKey returns the value of the body's field, failing the test unless
// the body is a JSON object that has it.
func bodyKey(t *testing.T, body []byte, field string) string {
	t.Helper()
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		t.Fatalf("attempt body %q is not a JSON object: %v", body, err)
	}
	var key string
	if err := json.Unmarshal(fields[field], &key); err != nil {
		t.Fatalf("attempt body %q has no string field %q", body, field)
	}
	return key
}

// D1.1, D1.2: with a dialect that puts the key in a body field, every
// attempt carries the journaled key in that field and in no header, the
// caller's body byte for byte around it; a later process that opens the
// journal sends the same key the same way.
func TestDialectKeyInBodyOnEveryAttemptAndAcrossRestarts(t *testing.T) {
	w := newWire(t, status(503, "busy"), hangUp, status(502, "bad gateway"))
	path := filepath.Join(t.TempDir(), "ops.journal")
	const body = `{"amount_money": {"amount": 100, "currency": "USD"},  "source_id":"cnon:x"}`
	const attemptsPerRun = 3

	run := func() error {
		j := openJournal(t, path)
		defer j.Close()
		c := newClient(t, fast(idem.Config{Journal: j, Dialect: idem.Square(), MaxAttempts: attemptsPerRun}))
		_, err := c.Do("pay-1", post(t, context.Background(), w.srv.URL, body))
		return err
	}
	for i := range 2 { // the second run is a later process resuming the operation
		if err := run(); !errors.Is(err, idem.ErrUnknown) {
			t.Fatalf("run %d: err = %v, want ErrUnknown", i, err)
		}
	}

	j := openJournal(t, path)
	op, ok := lookup(j, "pay-1")
	j.Close()
	if !ok || op.State != journal.StatePending {
		t.Fatalf("journal holds %+v, %v; want the operation pending", op, ok)
	}
	seen := w.attempts()
	if len(seen) != 2*attemptsPerRun {
		t.Fatalf("server saw %d attempts, want %d", len(seen), 2*attemptsPerRun)
	}
	want := `{"idempotency_key":"` + op.Key + `",` + body[1:]
	for i, a := range seen {
		if got := bodyKey(t, a.body, "idempotency_key"); got != op.Key {
			t.Fatalf("attempt %d carried key %q in the body, want the journaled %q", i+1, got, op.Key)
		}
		if string(a.body) != want {
			t.Fatalf("attempt %d body\n%s\nwant\n%s", i+1, a.body, want)
		}
		if h := a.header.Get("Idempotency-Key"); h != "" {
			t.Fatalf("attempt %d carried Idempotency-Key %q; the dialect puts the key in the body only", i+1, h)
		}
	}
	if !uuidV4.MatchString(op.Key) {
		t.Fatalf("key %q is not a UUIDv4", op.Key)
	}
}

// D1.3: the fingerprint is taken over the caller's body, without the key:
// the operation resumed with the same body is sent under its key, and with
// another body it is refused with ErrMismatch before anything is sent.
func TestDialectFingerprintWithoutTheKey(t *testing.T) {
	w := newWire(t, hangUp, nil)
	j := openJournal(t, filepath.Join(t.TempDir(), "ops.journal"))
	defer j.Close()
	c := newClient(t, fast(idem.Config{Journal: j, Dialect: idem.AWSCloudControl(), MaxAttempts: 1}))
	const body = `{"TypeName":"AWS::S3::Bucket","DesiredState":"{}"}`

	if _, err := c.Do("bucket", post(t, context.Background(), w.srv.URL, body)); !errors.Is(err, idem.ErrUnknown) {
		t.Fatalf("first Do: err = %v, want ErrUnknown", err)
	}
	if _, err := c.Do("bucket", post(t, context.Background(), w.srv.URL, `{"TypeName":"AWS::S3::Bucket","DesiredState":"{\"x\":1}"}`)); !errors.Is(err, idem.ErrMismatch) {
		t.Fatalf("Do with another body: err = %v, want ErrMismatch", err)
	}
	if n := len(w.attempts()); n != 1 {
		t.Fatalf("server saw %d attempts after the mismatch, want 1", n)
	}
	resp, err := c.Do("bucket", post(t, context.Background(), w.srv.URL, body))
	if err != nil {
		t.Fatalf("resume with the same body: %v", err)
	}
	resp.Body.Close()
	seen := w.attempts()
	if len(seen) != 2 {
		t.Fatalf("server saw %d attempts, want 2", len(seen))
	}
	first, second := bodyKey(t, seen[0].body, "ClientToken"), bodyKey(t, seen[1].body, "ClientToken")
	if first != second {
		t.Fatalf("the resume carried ClientToken %q, the first attempt %q", second, first)
	}
}

// D1.4: a dialect that puts the key in the body refuses, before anything is
// sent or journaled, a body that is not a JSON object or already has the
// key's field, with ErrBodyNotObject (an ErrInvalidRequest).
func TestDialectBodyMustBeAJSONObject(t *testing.T) {
	w := newWire(t)
	j := openJournal(t, filepath.Join(t.TempDir(), "ops.journal"))
	defer j.Close()
	c := newClient(t, idem.Config{Journal: j, Dialect: idem.Square()})
	for _, body := range []string{"", "[]", `"x"`, "null", "{", `{"a":1} {"b":2}`, `{"idempotency_key":"mine"}`} {
		_, err := c.Do("op", post(t, context.Background(), w.srv.URL, body))
		if !errors.Is(err, idem.ErrBodyNotObject) || !errors.Is(err, idem.ErrInvalidRequest) {
			t.Fatalf("body %q: err = %v, want ErrBodyNotObject", body, err)
		}
	}
	// A body that carries the key is held in memory, within
	// MaxBufferedBody, also when the request has GetBody.
	small := newClient(t, idem.Config{Journal: j, Dialect: idem.Square(), MaxBufferedBody: 16})
	if _, err := small.Do("big", post(t, context.Background(), w.srv.URL, `{"amount_money":{"amount":100}}`)); !errors.Is(err, idem.ErrBodyTooLarge) {
		t.Fatalf("a body over MaxBufferedBody: err = %v, want ErrBodyTooLarge", err)
	}
	if n := len(w.attempts()); n != 0 {
		t.Fatalf("server saw %d attempts, want none", n)
	}
	if ops := list(j, journal.ListAll); len(ops) != 0 {
		t.Fatalf("journal holds %+v, want nothing", ops)
	}
}

// answerCase is one answer of a dialect, and what idem must make of it.
type answerCase struct {
	name    string
	dialect idem.Dialect
	answer  step
	outcome idem.Outcome // OutcomeUnknown: retried to the end, pending
	retried bool         // every attempt gets the answer: it is in flight
	applied bool         // done, flagged AlreadyApplied
	reused  bool         // unknown with ErrKeyReused, after one attempt
}

// refusing is a dialect of one's own that reads a 503 with a maintenance
// error as a refusal that applied nothing.
var refusing = idem.Dialect{Name: "maintenance", Signals: []idem.Signal{
	{Status: 503, Field: "error", Value: "maintenance", Answer: idem.AnswerRefused},
}}

var answerCases = []answerCase{
	// D2.1: in flight is never final, whatever its status.
	{name: "stripe in use", dialect: idem.Stripe(), answer: status(409, `{"error":{"code":"idempotency_key_in_use","type":"invalid_request_error"}}`), outcome: idem.OutcomeUnknown, retried: true},
	{name: "adyen 704", dialect: idem.Adyen(), answer: status(422, `{"status":422,"errorCode":"704","message":"request already processed or in progress","errorType":"validation"}`), outcome: idem.OutcomeUnknown, retried: true},
	{name: "checkout 409", dialect: idem.CheckoutCom(), answer: status(409, ""), outcome: idem.OutcomeUnknown, retried: true},
	{name: "checkout 429", dialect: idem.CheckoutCom(), answer: status(429, ""), outcome: idem.OutcomeUnknown, retried: true},
	{name: "mercadopago 409", dialect: idem.MercadoPago(), answer: status(409, `{"status":"409","error":"conflict"}`), outcome: idem.OutcomeUnknown, retried: true},
	{name: "picpay 208", dialect: idem.PicPay(), answer: status(208, `{}`), outcome: idem.OutcomeUnknown, retried: true},
	{name: "ietf 409", dialect: idem.IETFDraft(), answer: status(409, ""), outcome: idem.OutcomeUnknown, retried: true},
	{name: "zero 409", dialect: idem.Dialect{}, answer: status(409, ""), outcome: idem.OutcomeUnknown, retried: true},

	// D2.2: a stored replay is final as its status says, a 409 too.
	{name: "stripe replayed 409", dialect: idem.Stripe(), answer: status(409, `{"error":{"code":"idempotency_key_in_use"}}`, "Idempotent-Replayed", "true"), outcome: idem.OutcomeRejected},
	{name: "stripe replayed 200", dialect: idem.Stripe(), answer: status(200, `{"id":"ch_1"}`, "Idempotent-Replayed", "true"), outcome: idem.OutcomeDone},
	// Only a 409 is made final by the replay: a replayed server error is
	// a server error, retried, never a refusal (which would be recorded,
	// then resent under a new key).
	{name: "stripe replayed 500", dialect: idem.Stripe(), answer: status(500, `{"error":{"type":"api_error"}}`, "Idempotent-Replayed", "true"), outcome: idem.OutcomeUnknown, retried: true},
	{name: "stripe replayed 503", dialect: idem.Stripe(), answer: status(503, "", "Idempotent-Replayed", "true"), outcome: idem.OutcomeUnknown, retried: true},
	{name: "adyen replay", dialect: idem.Adyen(), answer: status(200, `{"resultCode":"Authorised"}`, "Idempotency-Key", "k"), outcome: idem.OutcomeDone},

	// D2.3: already applied, without a replay: done, flagged.
	{name: "primer 409", dialect: idem.Primer(), answer: status(409, `{"error":{"errorId":"IdempotencyKeyAlreadyExists","paymentId":"gg3r3tsa3","paymentStatus":"SETTLED"}}`), outcome: idem.OutcomeDone, applied: true},
	{name: "primer 400", dialect: idem.Primer(), answer: status(400, `{"error":{"errorId":"TransactionRequestIdempotencyKeyAlreadyExists","paymentId":"6gHJtooK6"}}`), outcome: idem.OutcomeDone, applied: true},

	// D2.4: the key reused with another request: unknown, ErrKeyReused,
	// not retried.
	{name: "stripe idempotency_error", dialect: idem.Stripe(), answer: status(400, `{"error":{"type":"idempotency_error","message":"Keys for idempotent requests can only be used with the same parameters"}}`), outcome: idem.OutcomeUnknown, reused: true},
	{name: "square reused", dialect: idem.Square(), answer: status(400, `{"errors":[{"category":"INVALID_REQUEST_ERROR","code":"INVALID_VALUE"},{"category":"INVALID_REQUEST_ERROR","code":"IDEMPOTENCY_KEY_REUSED"}]}`), outcome: idem.OutcomeUnknown, reused: true},
	{name: "aws namespaced", dialect: idem.AWSCloudControl(), answer: status(400, `{"__type":"com.amazonaws.cloudcontrol#ClientTokenConflictException","Message":"used"}`), outcome: idem.OutcomeUnknown, reused: true},
	{name: "aws header", dialect: idem.AWSCloudControl(), answer: status(400, `{"message":"mismatch"}`, "X-Amzn-ErrorType", "IdempotentParameterMismatchException:http://internal.amazon.com/"), outcome: idem.OutcomeUnknown, reused: true},
	{name: "paypal duplicate", dialect: idem.PayPal(), answer: status(422, `{"name":"DUPLICATE_REQUEST_ID","message":"The value of PayPal-Request-Id header has already been used."}`), outcome: idem.OutcomeUnknown, reused: true},
	{name: "ietf 422", dialect: idem.IETFDraft(), answer: status(422, `{"title":"key reused"}`), outcome: idem.OutcomeUnknown, reused: true},

	// D2.5: a refusal that applied nothing is rejected.
	{name: "stripe card declined", dialect: idem.Stripe(), answer: status(402, `{"error":{"type":"card_error","code":"card_declined"}}`), outcome: idem.OutcomeRejected},
	{name: "adyen other 422", dialect: idem.Adyen(), answer: status(422, `{"status":422,"errorCode":"14_012","message":"The provided SDK token could not be parsed."}`), outcome: idem.OutcomeRejected},
	{name: "square bad request", dialect: idem.Square(), answer: status(400, `{"errors":[{"code":"INVALID_VALUE"}]}`), outcome: idem.OutcomeRejected},
	{name: "primer other 400", dialect: idem.Primer(), answer: status(400, `{"error":{"errorId":"RequestValidationError"}}`), outcome: idem.OutcomeRejected},
	{name: "zero 422", dialect: idem.Dialect{}, answer: status(422, ""), outcome: idem.OutcomeRejected},
	{name: "own refusal", dialect: refusing, answer: status(503, `{"error":"maintenance"}`), outcome: idem.OutcomeRejected},
	{name: "own dialect, other 503", dialect: refusing, answer: status(503, `{"error":"overloaded"}`), outcome: idem.OutcomeUnknown, retried: true},
}

// D2: each built-in dialect's answers are read as it documents them: in
// flight retried and never recorded final (D2.1), a replay final as its
// status says (D2.2), already applied recorded done and flagged (D2.3),
// the key reused unknown and typed (D2.4), a refusal rejected (D2.5).
func TestDialectAnswers(t *testing.T) {
	for _, tc := range answerCases {
		t.Run(tc.name, func(t *testing.T) {
			const attempts = 3
			w := newWire(t, tc.answer)
			j := openJournal(t, filepath.Join(t.TempDir(), "ops.journal"))
			defer j.Close()
			c := newClient(t, fast(idem.Config{Journal: j, Dialect: tc.dialect, MaxAttempts: attempts}))
			resp, err := c.Do("op", post(t, context.Background(), w.srv.URL, `{"amount":100}`))
			if resp != nil {
				defer resp.Body.Close()
			}
			op, _ := lookup(j, "op")
			want := 1
			if tc.retried {
				want = attempts
			}
			if n := len(w.attempts()); n != want {
				t.Fatalf("server saw %d attempts, want %d", n, want)
			}
			switch tc.outcome {
			case idem.OutcomeDone:
				if err != nil {
					t.Fatalf("err = %v, want done", err)
				}
				if op.State != journal.StateDone {
					t.Fatalf("journal holds %s, want done", op.State)
				}
				if idem.AlreadyApplied(resp) != tc.applied || op.Applied != tc.applied {
					t.Fatalf("AlreadyApplied = %v, recorded %v; want %v", idem.AlreadyApplied(resp), op.Applied, tc.applied)
				}
			case idem.OutcomeRejected:
				if !errors.Is(err, idem.ErrRejected) || op.State != journal.StateRejected {
					t.Fatalf("err = %v, journal %s; want rejected", err, op.State)
				}
			case idem.OutcomeUnknown:
				if !errors.Is(err, idem.ErrUnknown) || op.State != journal.StatePending {
					t.Fatalf("err = %v, journal %s; want unknown and pending", err, op.State)
				}
				if errors.Is(err, idem.ErrKeyReused) != tc.reused {
					t.Fatalf("err = %v; matches ErrKeyReused: %v, want %v", err, errors.Is(err, idem.ErrKeyReused), tc.reused)
				}
				// The API's words on the key are in the error.
				var oe *idem.OutcomeError
				if tc.reused && (!errors.As(err, &oe) || oe.Status < 400 || len(oe.Body) == 0) {
					t.Fatalf("err = %#v; want an OutcomeError with the answer's status and body", err)
				}
			}
			if !tc.applied {
				return
			}
			// The flag is recorded: a later Do answered from the journal
			// says so too, with what the API answered.
			again, err := c.Do("op", post(t, context.Background(), w.srv.URL, `{"amount":100}`))
			if err != nil {
				t.Fatal(err)
			}
			defer again.Body.Close()
			if !idem.Recorded(again) || !idem.AlreadyApplied(again) || again.StatusCode != op.Status {
				t.Fatalf("recorded answer: recorded %v, applied %v, status %d; want the flagged %d", idem.Recorded(again), idem.AlreadyApplied(again), again.StatusCode, op.Status)
			}
		})
	}
}

// D2.3: a server cannot pass its own answer for one idem read as already
// applied: a field named Idem-Already-Applied in its response is the
// server's header to the caller, and neither the flag nor recorded.
func TestDialectAppliedFlagIsIdemsOwn(t *testing.T) {
	w := newWire(t, status(200, "ok", "Idem-Already-Applied", "true"))
	j := openJournal(t, filepath.Join(t.TempDir(), "ops.journal"))
	defer j.Close()
	c := newClient(t, idem.Config{Journal: j, Dialect: idem.Primer()})
	for i := range 2 {
		resp, err := c.Do("op", post(t, context.Background(), w.srv.URL, "{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if idem.AlreadyApplied(resp) || idem.Recorded(resp) != (i == 1) {
			t.Fatalf("Do %d: a plain 200 that carried the header: applied %v, recorded %v", i, idem.AlreadyApplied(resp), idem.Recorded(resp))
		}
		if want := []string{"true"}; i == 0 && !slices.Equal(resp.Header.Values("Idem-Already-Applied"), want) {
			t.Fatalf("the server's own field reached the caller as %q, want %q", resp.Header.Values("Idem-Already-Applied"), want)
		}
	}
	if op, _ := lookup(j, "op"); op.Applied || op.Header.Get("Idem-Already-Applied") != "" {
		t.Fatalf("recorded applied %v, header %v; want neither", op.Applied, op.Header)
	}
}

// C16.1: the applied flag is no header: an applied answer's response, live
// and from the journal, carries only the server's header fields, and
// AlreadyApplied says it is applied.
func TestAnAppliedResponseCarriesNoInventedHeader(t *testing.T) {
	w := newWire(t, status(409, `{"error":{"errorId":"IdempotencyKeyAlreadyExists"}}`, "X-Server", "s"))
	j := openJournal(t, filepath.Join(t.TempDir(), "ops.journal"))
	defer j.Close()
	c := newClient(t, idem.Config{Journal: j, Dialect: idem.Primer()})
	for i := range 2 {
		resp, err := c.Do("op", post(t, context.Background(), w.srv.URL, "{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if !idem.AlreadyApplied(resp) || idem.Recorded(resp) != (i == 1) {
			t.Fatalf("Do %d: applied %v, recorded %v; want applied", i, idem.AlreadyApplied(resp), idem.Recorded(resp))
		}
		for name := range resp.Header {
			if strings.HasPrefix(name, "Idem-") {
				t.Fatalf("Do %d: the response carries %s: %v", i, name, resp.Header)
			}
		}
		if resp.Header.Get("X-Server") != "s" {
			t.Fatalf("Do %d: the server's field is missing: %v", i, resp.Header)
		}
	}
	if op, _ := lookup(j, "op"); !op.Applied || op.Header.Get("Idem-Already-Applied") != "" {
		t.Fatalf("recorded applied %v, header %v; want the mark as a field", op.Applied, op.Header)
	}
}

// C16.8: marking a response applied keeps its Request: live and from the
// journal, the response's Request has the caller's method and URL, and its
// context the caller's values beside the mark. A response a transport
// returned without a Request gets one that carries the mark.
func TestAnAppliedResponseKeepsItsRequest(t *testing.T) {
	type callerKey struct{}
	ctx := context.WithValue(context.Background(), callerKey{}, "the caller's")
	w := newWire(t, status(409, `{"error":{"errorId":"IdempotencyKeyAlreadyExists"}}`))
	j := openJournal(t, filepath.Join(t.TempDir(), "ops.journal"))
	defer j.Close()
	c := newClient(t, idem.Config{Journal: j, Dialect: idem.Primer()})
	for i := range 2 {
		resp, err := c.Do("op", post(t, ctx, w.srv.URL+"/v1/payments", "{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		r := resp.Request
		if !idem.AlreadyApplied(resp) || idem.Recorded(resp) != (i == 1) || r == nil || r.Method != http.MethodPost ||
			r.URL == nil || r.URL.String() != w.srv.URL+"/v1/payments" || r.Context().Value(callerKey{}) != "the caller's" {
			t.Fatalf("Do %d: applied %v, recorded %v, request %+v; want applied, the caller's POST, URL and context",
				i, idem.AlreadyApplied(resp), idem.Recorded(resp), r)
		}
	}

	bare := func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 409, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(
			`{"error":{"errorId":"IdempotencyKeyAlreadyExists"}}`))}, nil
	}
	c = newClient(t, idem.Config{Dialect: idem.Primer(), HTTPClient: &http.Client{Transport: roundTripFunc(bare)}})
	resp, err := c.Do("bare", post(t, ctx, "http://api.example.test/v1/payments", "{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if !idem.AlreadyApplied(resp) || resp.Request == nil {
		t.Fatalf("a response without a Request: applied %v, request %v; want applied", idem.AlreadyApplied(resp), resp.Request)
	}
}

// roundTripFunc is a RoundTripper of one function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// D2.1: the dialect's reading composes with Config.CheckRetry: a CheckRetry
// that declines to retry an answer in flight ends the operation unknown,
// never done (PicPay's 208 is a 2xx).
func TestDialectInFlightComposesWithCheckRetry(t *testing.T) {
	w := newWire(t, status(208, "{}"))
	var asked int
	c := newClient(t, fast(idem.Config{Dialect: idem.PicPay(), MaxAttempts: 3,
		CheckRetry: func(ctx context.Context, resp *http.Response, err error) (bool, error) {
			asked++
			return false, nil
		}}))
	_, err := c.Do("op", post(t, context.Background(), w.srv.URL, "{}"))
	if !errors.Is(err, idem.ErrUnknown) || !errors.Is(err, idem.ErrRetryDeclined) {
		t.Fatalf("err = %v, want unknown with ErrRetryDeclined", err)
	}
	if asked != 1 || len(w.attempts()) != 1 {
		t.Fatalf("CheckRetry asked %d times over %d attempts, want 1 and 1", asked, len(w.attempts()))
	}
}

// D2.4: a Config.CheckRetry that would retry the status does not revive
// a key-reused answer, which idem judged final with its reason: one
// attempt, unknown with ErrKeyReused, the operation left pending.
func TestCheckRetryDoesNotReviveAKeyReusedAnswer(t *testing.T) {
	w := newWire(t, status(422, "{}"), status(201, "{}"))
	var asked int
	j, err := filejournal.Open(filepath.Join(t.TempDir(), "ops.journal"), filejournal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	reused := idem.Dialect{Name: "reused on 422", Signals: []idem.Signal{{Status: 422, Answer: idem.AnswerKeyReused}}}
	c := newClient(t, fast(idem.Config{Journal: j, Dialect: reused, MaxAttempts: 3,
		CheckRetry: func(ctx context.Context, resp *http.Response, err error) (bool, error) {
			asked++
			return resp != nil && resp.StatusCode == 422, nil
		}}))
	_, err = c.Do("op", post(t, context.Background(), w.srv.URL, "{}"))
	var oe *idem.OutcomeError
	if !errors.Is(err, idem.ErrUnknown) || !errors.Is(err, idem.ErrKeyReused) || !errors.As(err, &oe) || oe.Attempts != 1 || oe.Status != 422 {
		t.Fatalf("err = %v, want unknown with ErrKeyReused after one attempt answered 422", err)
	}
	if n := len(w.attempts()); n != 1 || asked != 1 {
		t.Fatalf("%d attempts, CheckRetry asked %d times; want 1 and 1", n, asked)
	}
	if pending, err := j.List(context.Background(), journal.ListPending); err != nil || len(pending) != 1 || pending[0].ID != "op" {
		t.Fatalf("pending operations %v, %v; want op alone", pending, err)
	}
}

// D1.5: the dialect's retention is the default KeyTTL: a pending key older
// than it is refused with ErrKeyExpired and nothing is sent, whatever the
// journal's own KeyTTL (two days here); a longer retention resumes what a
// shorter one would refuse. Each built-in dialect that publishes a
// retention is held to it.
func TestDialectRetentionIsTheDefaultKeyTTL(t *testing.T) {
	for _, tc := range []struct {
		dialect idem.Dialect
		age     time.Duration
		expired bool
	}{
		{idem.PayPal(), 6*time.Hour - time.Minute, true}, // within AttemptTimeout of its 6 hours
		{idem.PayPal(), 5 * time.Hour, false},
		{idem.Stripe(), 24*time.Hour - time.Minute, true},
		{idem.Stripe(), 23 * time.Hour, false},
		{idem.CheckoutCom(), 24*time.Hour - time.Minute, true},
		{idem.CheckoutCom(), 23 * time.Hour, false},
		{idem.AWSCloudControl(), 36*time.Hour - time.Minute, true},
		{idem.AWSCloudControl(), 35 * time.Hour, false},
		{idem.Adyen(), 30 * 24 * time.Hour, false}, // the journal's two days would refuse it
		{idem.Adyen(), 31 * 24 * time.Hour, true},
	} {
		w := newWire(t, hangUp, nil)
		now := newTestClock()
		j, err := filejournal.Open(filepath.Join(t.TempDir(), "ops.journal"), filejournal.Options{Now: now.Now})
		if err != nil {
			t.Fatal(err)
		}
		c := newClient(t, fast(idem.Config{Journal: j, Dialect: tc.dialect, MaxAttempts: 1, AttemptTimeout: 2 * time.Minute}))
		if _, err := c.Do("op", post(t, context.Background(), w.srv.URL, "{}")); !errors.Is(err, idem.ErrUnknown) {
			t.Fatalf("%s: first Do: err = %v, want ErrUnknown", tc.dialect.Name, err)
		}
		now.Advance(tc.age)
		resp, err := c.Do("op", post(t, context.Background(), w.srv.URL, "{}"))
		switch {
		case tc.expired && !errors.Is(err, idem.ErrKeyExpired):
			t.Fatalf("%s, key %s old: err = %v, want ErrKeyExpired", tc.dialect.Name, tc.age, err)
		case tc.expired && len(w.attempts()) != 1:
			t.Fatalf("%s, key %s old: server saw %d attempts, want 1", tc.dialect.Name, tc.age, len(w.attempts()))
		case !tc.expired && err != nil:
			t.Fatalf("%s, key %s old: err = %v, want the resume done", tc.dialect.Name, tc.age, err)
		case !tc.expired:
			resp.Body.Close()
		}
		j.Close()
	}
}

// D1.6: New refuses a dialect a UUIDv4 key would not fit, or that is not
// one; a KeyHeader set on the dialect value takes the place of its header, and
// cannot be set with a dialect that puts the key in the body.
func TestDialectChecked(t *testing.T) {
	for _, d := range []idem.Dialect{
		{Name: "short", MaxKeyLength: 32},
		{Name: "one byte short of a UUIDv4", MaxKeyLength: 35},
		{Name: "negative length", MaxKeyLength: -1},
		{Name: "negative retention", Retention: -time.Hour},
		{Name: "digits", KeyChars: "0123456789"},
		{Name: "both", KeyHeader: "K", KeyField: "k"},
		{Name: "bad header", KeyHeader: "a b"},
		{Name: "no answer", Signals: []idem.Signal{{Status: 409}}},
		{Name: "no condition", Signals: []idem.Signal{{Answer: idem.AnswerInFlight}}},
		{Name: "status below 100", Signals: []idem.Signal{{Status: 99, Answer: idem.AnswerInFlight}}},
		{Name: "status above 999", Signals: []idem.Signal{{Status: 1000, Answer: idem.AnswerInFlight}}},
		{Name: "value without field", Signals: []idem.Signal{{Status: 400, Value: "x", Answer: idem.AnswerRefused}}},
	} {
		if _, err := idem.New(idem.Config{Dialect: d}); !errors.Is(err, idem.ErrInvalidConfig) {
			t.Fatalf("dialect %q: err = %v, want ErrInvalidConfig", d.Name, err)
		}
	}
	for _, d := range []idem.Dialect{
		{Name: "a UUIDv4's length", MaxKeyLength: 36},
		{Name: "statuses at the bounds", Signals: []idem.Signal{{Status: 100, Answer: idem.AnswerInFlight}, {Status: 999, Answer: idem.AnswerRefused}}},
	} {
		if _, err := idem.New(idem.Config{Dialect: d}); err != nil {
			t.Fatalf("dialect %q: %v, want it taken", d.Name, err)
		}
	}
	square := idem.Square()
	square.KeyHeader = "X-Key"
	if _, err := idem.New(idem.Config{Dialect: square}); !errors.Is(err, idem.ErrInvalidConfig) {
		t.Fatalf("KeyHeader with a body dialect: err = %v, want ErrInvalidConfig", err)
	}
	for _, d := range idem.Dialects() {
		if _, err := idem.New(idem.Config{Dialect: d}); err != nil {
			t.Fatalf("built-in dialect %q: %v", d.Name, err)
		}
		if got, ok := idem.DialectNamed(strings.ToUpper(d.Name)); !ok || got.Name != d.Name {
			t.Fatalf("DialectNamed(%q) = %q, %v", strings.ToUpper(d.Name), got.Name, ok)
		}
	}

	w := newWire(t)
	for _, tc := range []struct {
		cfg        idem.Config
		header     string
		quoted     bool
		absentFrom string
	}{
		{idem.Config{Dialect: idem.PayPal()}, "PayPal-Request-Id", false, "Idempotency-Key"},
		{idem.Config{Dialect: func() idem.Dialect { d := idem.PayPal(); d.KeyHeader = "X-Own-Key"; return d }()}, "X-Own-Key", false, "PayPal-Request-Id"},
		{idem.Config{Dialect: idem.IETFDraft()}, "Idempotency-Key", true, ""},
		{idem.Config{Dialect: func() idem.Dialect { d := idem.Stripe(); d.QuotedKey = true; return d }()}, "Idempotency-Key", true, ""},
		{idem.Config{}, "Idempotency-Key", false, ""},
	} {
		c := newClient(t, tc.cfg)
		resp, err := c.Do("op", post(t, context.Background(), w.srv.URL, "{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		seen := w.attempts()
		h := seen[len(seen)-1].header
		key := h.Get(tc.header)
		if tc.quoted {
			key = strings.TrimSuffix(strings.TrimPrefix(key, `"`), `"`)
		}
		if !uuidV4.MatchString(key) || (tc.quoted && key == h.Get(tc.header)) {
			t.Fatalf("dialect %q: header %s = %q, want a UUIDv4 (quoted: %v)", tc.cfg.Dialect.Name, tc.header, h.Get(tc.header), tc.quoted)
		}
		if tc.absentFrom != "" && h.Get(tc.absentFrom) != "" {
			t.Fatalf("dialect %q: %s carried %q too", tc.cfg.Dialect.Name, tc.absentFrom, h.Get(tc.absentFrom))
		}
	}
}

// D2.3: the already-applied flag is kept in the record when the response
// header is over Config.MaxRecordedHeader and other fields are left out:
// small fields that sort before it fill the room to within a few bytes.
func TestDialectAppliedFlagSurvivesABoundedHeader(t *testing.T) {
	var padding []string
	for i := range 300 {
		padding = append(padding, fmt.Sprintf("A-%03d", i), "x")
	}
	w := newWire(t, status(409, `{"error":{"errorId":"IdempotencyKeyAlreadyExists"}}`, padding...))
	j := openJournal(t, filepath.Join(t.TempDir(), "ops.journal"))
	defer j.Close()
	c := newClient(t, idem.Config{Journal: j, Dialect: idem.Primer(), MaxRecordedHeader: 1024})
	resp, err := c.Do("op", post(t, context.Background(), w.srv.URL, "{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	op, _ := lookup(j, "op")
	if !op.HeaderTruncated || op.Header.Get("A-299") != "" || !op.Applied {
		t.Fatalf("recorded header %v (truncated %v), applied %v; want the padding left out and the mark kept", op.Header, op.HeaderTruncated, op.Applied)
	}
}

// D4.3: a built-in dialect is a fresh value on every call. An importer that
// changes the one it got (a field, its Signals slice) changes neither the
// next call's, nor what Dialects and DialectNamed return, nor a Client
// built after.
func TestABuiltInDialectCannotBeChangedByAnImporter(t *testing.T) {
	want := idem.Stripe()
	wantSignals := slices.Clone(want.Signals)

	got := idem.Stripe()
	got.KeyHeader, got.Retention = "X-Changed", time.Nanosecond
	got.Signals[0].Status, got.Signals[0].Answer = 599, idem.AnswerRefused
	got.Signals = append(got.Signals[:1], idem.Signal{Status: 200, Answer: idem.AnswerRefused})
	named, _ := idem.DialectNamed("stripe")
	named.Signals[0].Status = 598
	all := idem.Dialects()
	all[1].Signals[0].Status = 597
	all[1].KeyHeader = "X-Changed-Too"

	for what, d := range map[string]idem.Dialect{
		"Stripe()":               idem.Stripe(),
		"DialectNamed(stripe)":   func() idem.Dialect { d, _ := idem.DialectNamed("stripe"); return d }(),
		"Dialects()[1] (stripe)": idem.Dialects()[1],
	} {
		if d.Name != "stripe" || d.KeyHeader != want.KeyHeader || d.Retention != want.Retention || !slices.Equal(d.Signals, wantSignals) {
			t.Errorf("%s after an importer changed the ones it got: %+v, want %+v", what, d, want)
		}
	}

	// A Client built after reads Stripe's key-reused answer as it was, not
	// as the 599 an importer wrote over it.
	for _, d := range []idem.Dialect{got, named, all[1]} {
		d.Signals[len(d.Signals)-1].Status = 599
	}
	w := newWire(t, status(400, `{"error":{"type":"idempotency_error"}}`))
	c := newClient(t, idem.Config{Dialect: idem.Stripe(), MaxAttempts: 1})
	if _, err := c.Do("op", post(t, context.Background(), w.srv.URL, "{}")); !errors.Is(err, idem.ErrKeyReused) {
		t.Fatalf("a Client built after the changes: %v, want ErrKeyReused", err)
	}
	if h := w.attempts()[0].header; h.Get("Idempotency-Key") == "" || h.Get("X-Changed") != "" {
		t.Fatalf("a Client built after the changes sent the key in %v, want Idempotency-Key", h)
	}
}
