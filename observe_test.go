package idem_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
)

type ctxMark struct{}

// ctxTransport records the mark each attempt's context carries.
type ctxTransport struct {
	mu    sync.Mutex
	marks []any
}

func (t *ctxTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.mu.Lock()
	t.marks = append(t.marks, req.Context().Value(ctxMark{}))
	t.mu.Unlock()
	return http.DefaultTransport.RoundTrip(req)
}

// TestObservationHooks: OnOperationStart's context reaches every attempt
// and OperationEnd; the retry budget's tokens fall with failures; the
// journal tells OnSync of each group commit and counts pending operations.
func TestObservationHooks(t *testing.T) {
	fail := 2
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if fail > 0 {
			fail--
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	var syncs []int
	j, err := filejournal.Open(filepath.Join(t.TempDir(), "j"), filejournal.Options{
		OnSync: func(took time.Duration, records int, err error) {
			if err == nil && took >= 0 {
				syncs = append(syncs, records)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	tr := &ctxTransport{}
	var ends []idem.OperationEnd
	c, err := idem.New(idem.Config{
		Journal: j, HTTPClient: &http.Client{Transport: tr}, InitialWait: time.Millisecond, Jitter: -1,
		OnOperationStart: func(ctx context.Context, id string) context.Context {
			return context.WithValue(ctx, ctxMark{}, "op:"+id)
		},
		OnOperation: func(e idem.OperationEnd) { ends = append(ends, e) },
	})
	if err != nil {
		t.Fatal(err)
	}
	full := c.RetryBudgetTokens()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("x"))
	resp, err := c.Do("charge", req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(tr.marks) != 3 || tr.marks[0] != "op:charge" || tr.marks[2] != "op:charge" {
		t.Fatalf("the attempts' contexts carried %v, want op:charge three times", tr.marks)
	}
	if len(ends) != 1 || ends[0].Context == nil || ends[0].Context.Value(ctxMark{}) != "op:charge" || ends[0].Attempts != 3 {
		t.Fatalf("OperationEnd %+v does not carry the operation's context", ends)
	}
	if got := c.RetryBudgetTokens(); got != full-2+0.1 {
		t.Fatalf("budget tokens %v after two failures and a success, want %v", got, full-2+0.1)
	}
	if len(syncs) != 1 || syncs[0] != 1 {
		t.Fatalf("OnSync saw groups %v, want one fsync of the intent", syncs)
	}
	// One operation left pending: the stats count it.
	mu.Lock()
	fail = 100
	mu.Unlock()
	req, _ = http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("y"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	c.Do("pending", req.WithContext(ctx))
	if p := j.Stats().Pending; p != 1 {
		t.Fatalf("Stats().Pending = %d, want 1", p)
	}
}
