package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/idemserver"
	"github.com/idemkit/idem/idemserver/sqlite"
	"github.com/idemkit/idem/journal"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// started is the service on a real SQLite file behind a loopback server.
type started struct {
	svc *service
	url string
	gw  *gateway
}

func start(t *testing.T) *started {
	t.Helper()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "payments.db"))
	if err != nil {
		t.Fatal(err)
	}
	gw := newGateway()
	svc, err := newService(context.Background(), db, gw, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(svc.handler())
	t.Cleanup(func() {
		ts.Close()
		if err := svc.keys.Close(); err != nil {
			t.Error(err)
		}
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	})
	return &started{svc: svc, url: ts.URL, gw: gw}
}

// orders counts the orders, and those paid.
func (s *started) orders(t *testing.T) (all, paid int) {
	t.Helper()
	err := s.svc.db.QueryRow(`SELECT COUNT(*), COUNT(capture) FROM orders`).Scan(&all, &paid)
	if err != nil {
		t.Fatal(err)
	}
	return all, paid
}

// dropAnswers is a transport that delivers each request to the server and
// then loses the first n answers on the way back, as a connection reset
// after the server committed would.
type dropAnswers struct {
	n     atomic.Int32
	calls atomic.Int32
}

func (d *dropAnswers) RoundTrip(r *http.Request) (*http.Response, error) {
	d.calls.Add(1)
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil && d.n.Add(-1) >= 0 {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil, errors.New("connection reset by peer (answer dropped by the test)")
	}
	return resp, err
}

// client is an idem client over transport, retrying at once, with a
// journal at path ("" for none).
func client(t *testing.T, transport http.RoundTripper, journal journal.Journal, attempts int) *idem.Client {
	t.Helper()
	c, err := idem.New(idem.Config{
		Journal:     journal,
		HTTPClient:  &http.Client{Transport: transport},
		MaxAttempts: attempts,
		InitialWait: time.Millisecond,
		MaxWait:     10 * time.Millisecond,
		Jitter:      -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func post(t *testing.T, url, body string) *http.Request {
	t.Helper()
	r, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Content-Type", "application/json")
	return r
}

func decode(t *testing.T, resp *http.Response) order {
	t.Helper()
	defer resp.Body.Close()
	var o order
	if err := json.NewDecoder(resp.Body).Decode(&o); err != nil {
		t.Fatal(err)
	}
	return o
}

// The server commits the order, its answer is lost, the client resends
// under the same key and gets the stored answer: one order.
func TestDroppedAnswerIsReplayed(t *testing.T) {
	s := start(t)
	tr := &dropAnswers{}
	tr.n.Store(1)
	c := client(t, tr, nil, 4)
	resp, err := c.Do("order-1", post(t, s.url+"/orders", `{"item":"book","amount":1200}`))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusCreated || resp.Header.Get(idemserver.HeaderReplayed) != "true" {
		t.Fatalf("status %d, replayed %q; want 201 replayed", resp.StatusCode, resp.Header.Get(idemserver.HeaderReplayed))
	}
	o := decode(t, resp)
	if all, _ := s.orders(t); all != 1 || tr.calls.Load() != 2 {
		t.Fatalf("%d orders after %d attempts, want 1 after 2", all, tr.calls.Load())
	}
	if st := s.svc.keys.Stats(); st.Replays != 1 || st.Stored != 1 {
		t.Fatalf("stats %+v, want one stored answer replayed once", st)
	}
	if o.ID == "" || o.Item != "book" || o.Amount != 1200 {
		t.Fatalf("order %+v", o)
	}
}

// The client process gives up (it "dies") after the server captured the
// money and committed, with the answer lost; a new process on the same
// journal resumes the operation under its journaled key: one order paid,
// one capture, the gateway called once.
func TestClientRestartMidPayment(t *testing.T) {
	s := start(t)
	created, err := client(t, http.DefaultTransport, nil, 1).Do("order-1", post(t, s.url+"/orders", `{"item":"lamp","amount":4500}`))
	if err != nil {
		t.Fatal(err)
	}
	o := decode(t, created)

	path := filepath.Join(t.TempDir(), "client.journal")
	j, err := filejournal.Open(path, filejournal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tr := &dropAnswers{}
	tr.n.Store(1)
	_, err = client(t, tr, j, 1).Do("pay-"+o.ID, post(t, s.url+"/orders/"+o.ID+"/pay", `{}`))
	if !errors.Is(err, idem.ErrUnknown) {
		t.Fatalf("first process: %v, want idem.ErrUnknown (answer lost, attempts used up)", err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}

	j, err = filejournal.Open(path, filejournal.Options{}) // the restarted process
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	resp, err := client(t, http.DefaultTransport, j, 4).Do("pay-"+o.ID, post(t, s.url+"/orders/"+o.ID+"/pay", `{}`))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusCreated || resp.Header.Get(idemserver.HeaderReplayed) != "true" {
		t.Fatalf("status %d, replayed %q; want 201 replayed", resp.StatusCode, resp.Header.Get(idemserver.HeaderReplayed))
	}
	paid := decode(t, resp)
	calls, captures := s.gw.counts()
	if all, npaid := s.orders(t); all != 1 || npaid != 1 || calls != 1 || captures != 1 || paid.Capture != "cap_1" {
		t.Fatalf("%d orders, %d paid, gateway called %d times, %d captures, answer %+v; want 1, 1, 1, 1, cap_1",
			all, npaid, calls, captures, paid)
	}
}

// The capture succeeds and the request fails before its final commit; the
// retry resumes from the recovery point: the gateway is not called again,
// and the order is paid once.
func TestPaymentResumesFromRecoveryPoint(t *testing.T) {
	s := start(t)
	var failed atomic.Bool
	s.svc.afterCapture = func() error {
		if failed.CompareAndSwap(false, true) {
			return errors.New("the process stopped after the capture (injected)")
		}
		return nil
	}
	c := client(t, http.DefaultTransport, nil, 4)
	o := decode(t, must(t)(c.Do("order-1", post(t, s.url+"/orders", `{"item":"pen","amount":300}`))))
	var attempts int
	c2, err := idem.New(idem.Config{
		MaxAttempts: 4, InitialWait: time.Millisecond, MaxWait: 10 * time.Millisecond, Jitter: -1,
		OnAttempt: func(idem.Attempt) { attempts++ },
	})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c2.Do("pay-1", post(t, s.url+"/orders/"+o.ID+"/pay", `{}`))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusCreated || resp.Header.Get(idemserver.HeaderReplayed) != "" {
		t.Fatalf("status %d, replayed %q; want 201, first answer", resp.StatusCode, resp.Header.Get(idemserver.HeaderReplayed))
	}
	paid := decode(t, resp)
	calls, captures := s.gw.counts()
	if _, npaid := s.orders(t); npaid != 1 || calls != 1 || captures != 1 || attempts != 2 || paid.Capture != "cap_1" {
		t.Fatalf("%d paid, gateway called %d times, %d captures, %d attempts, answer %+v; want 1, 1, 1, 2, cap_1",
			npaid, calls, captures, attempts, paid)
	}
	if st := s.svc.keys.Stats(); st.Resumed != 1 || st.StepsKept != 1 || st.StepsRun != 1 {
		t.Fatalf("stats %+v, want one resume answered from its recovery point", st)
	}
}

// A failing gateway is retried under the same downstream key until it
// captures: one capture.
func TestGatewayFailureRetriesUnderOneKey(t *testing.T) {
	s := start(t)
	c := client(t, http.DefaultTransport, nil, 4)
	o := decode(t, must(t)(c.Do("order-1", post(t, s.url+"/orders", `{"item":"cup","amount":800}`))))
	s.gw.mu.Lock()
	s.gw.fail = 2
	s.gw.mu.Unlock()
	resp, err := c.Do("pay-1", post(t, s.url+"/orders/"+o.ID+"/pay", `{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	calls, captures := s.gw.counts()
	if _, npaid := s.orders(t); resp.StatusCode != http.StatusCreated || npaid != 1 || calls != 3 || captures != 1 {
		t.Fatalf("status %d, %d paid, gateway called %d times, %d captures; want 201, 1, 3, 1", resp.StatusCode, npaid, calls, captures)
	}
}

// must fails the test if Do failed: must(t)(c.Do(...)).
func must(t *testing.T) func(*http.Response, error) *http.Response {
	return func(resp *http.Response, err error) *http.Response {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
}

// A malformed order is refused before its key is looked up: the client's
// corrected request, under the same key, is served, not refused as another
// request (Route.Check).
func TestAMalformedOrderLeavesItsKeyFree(t *testing.T) {
	s := start(t)
	send := func(body string) *http.Response {
		req := post(t, s.url+"/orders", body)
		req.Header.Set("Idempotency-Key", "k-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	bad := send(`{"item":"book"}`)
	bad.Body.Close()
	good := send(`{"item":"book","amount":1200}`)
	o := decode(t, good)
	if bad.StatusCode != http.StatusBadRequest || good.StatusCode != http.StatusCreated || o.Amount != 1200 {
		t.Fatalf("bad %d, good %d %+v; want 400, then 201 with the order", bad.StatusCode, good.StatusCode, o)
	}
}
