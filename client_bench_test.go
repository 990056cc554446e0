package idem

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-retryablehttp"
	"github.com/idemkit/idem/journal"
)

// stubTransport answers every request with 201 and a small JSON body,
// without a network: what a benchmark through it measures is the client's
// own cost.
type stubTransport struct{}

var stubAnswer = []byte(`{"id":"rsv_2f1c8e4a-8a5b-4c3d-9e7f-0a1b2c3d4e5f","item_id":"sku-1","quantity":1,"created_at":"2026-01-02T03:04:05Z"}`)

func (stubTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	return &http.Response{
		Status: "201 Created", StatusCode: http.StatusCreated,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"application/json"}, "Content-Length": {strconv.Itoa(len(stubAnswer))}},
		Body:          io.NopCloser(bytes.NewReader(stubAnswer)),
		ContentLength: int64(len(stubAnswer)),
		Request:       req,
	}, nil
}

var stubBody = []byte(`{"item_id":"sku-1","quantity":1}`)

func newStubRequest(b *testing.B) *http.Request {
	req, err := http.NewRequest(http.MethodPost, "http://api.example.test/reservations", bytes.NewReader(stubBody))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return req
}

// readAnswer reads an answer whole and checks it is the stub's.
func readAnswer(resp *http.Response, err error) error {
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// BenchmarkClientOverhead measures the cost of one request through each
// client over a transport that answers at once, so that nothing but the
// client is measured: net/http and go-retryablehttp send a new key per
// request, as a careful caller does by hand; idem makes each request a new
// operation, with keys in memory or journaled to a file (one fsync each:
// the disk's latency, not the client's).
//
//	go test -run '^$' -bench ClientOverhead -benchmem .
func BenchmarkClientOverhead(b *testing.B) {
	hc := &http.Client{Transport: stubTransport{}}
	b.Run("client=net-http", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			req := newStubRequest(b)
			req.Header.Set(defaultKeyHeader, uuid.NewString())
			if err := readAnswer(hc.Do(req)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("client=retryablehttp", func(b *testing.B) {
		rc := retryablehttp.NewClient()
		rc.HTTPClient, rc.Logger = hc, nil
		b.ReportAllocs()
		for b.Loop() {
			req, err := retryablehttp.NewRequest(http.MethodPost, "http://api.example.test/reservations", stubBody)
			if err != nil {
				b.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(defaultKeyHeader, uuid.NewString())
			if err := readAnswer(rc.Do(req)); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, journal := range []bool{false, true} {
		name := "client=idem"
		if journal {
			name += "+journal"
		}
		b.Run(name, func(b *testing.B) {
			cfg := Config{HTTPClient: hc}
			if journal {
				j, err := OpenFileJournal(filepath.Join(b.TempDir(), "ops.journal"))
				if err != nil {
					b.Fatal(err)
				}
				defer j.(io.Closer).Close()
				cfg.Journal = j
			}
			c, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			ids := benchIDs("op-", b.N) // the caller's IDs are not the client's cost
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if err := readAnswer(c.Do(ids[i], newStubRequest(b))); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkClientLoopback is BenchmarkClientOverhead over a real loopback
// connection to an in-process server, one request at a time: the whole
// cost of a request, the server's share included, so the difference
// between the two is what a caller pays for idem on a real connection.
//
//	go test -run '^$' -bench ClientLoopback -benchmem .
func BenchmarkClientLoopback(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write(stubAnswer)
	}))
	defer srv.Close()
	newRequest := func() *http.Request {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/reservations", bytes.NewReader(stubBody))
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		return req
	}
	b.Run("client=net-http", func(b *testing.B) {
		hc := &http.Client{Transport: &http.Transport{}}
		defer hc.CloseIdleConnections()
		b.ReportAllocs()
		for b.Loop() {
			req := newRequest()
			req.Header.Set(defaultKeyHeader, uuid.NewString())
			if err := readAnswer(hc.Do(req)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("client=idem", func(b *testing.B) {
		hc := &http.Client{Transport: &http.Transport{}}
		defer hc.CloseIdleConnections()
		c, err := New(Config{HTTPClient: hc})
		if err != nil {
			b.Fatal(err)
		}
		ids := benchIDs("op-", b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if err := readAnswer(c.Do(ids[i], newRequest())); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// benchIDs returns n distinct operation IDs, made before the timer runs so
// that the allocations measured are the client's own.
func benchIDs(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = prefix + strconv.Itoa(i)
	}
	return ids
}

// BenchmarkDoRules isolates what each rule Do applies costs per request,
// over the same request as BenchmarkClientOverhead, so that the sum of
// the parts can be weighed against what idem adds to go-retryablehttp:
//
//   - key: minting the operation's key (C1);
//
//   - fingerprint: capturing the body through GetBody and hashing method,
//     URL and body (C5);
//
//   - journal: claiming a new ID in the memory journal, beginning it and
//     completing it with the stub's answer (C2, C3, C4; a file journal adds
//     its fsync);
//
//   - request: the attempts' shallow copy of the request, with a header
//     map of its own (the caller's request is never changed);
//
//   - deadline: the attempt deadline's context and timer (AttemptTimeout).
//
//     go test -run '^$' -bench DoRules -benchmem .
func BenchmarkDoRules(b *testing.B) {
	b.Run("rule=key", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := newKey(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("rule=fingerprint", func(b *testing.B) {
		reqs := make([]*http.Request, 0, 1024)
		b.ReportAllocs()
		for b.Loop() {
			if len(reqs) == 0 { // the caller's requests are not the rule's cost
				b.StopTimer()
				for range cap(reqs) {
					reqs = append(reqs, newStubRequest(b))
				}
				b.StartTimer()
			}
			req := reqs[len(reqs)-1]
			reqs = reqs[:len(reqs)-1]
			if _, err := captureBody(req, DefaultMaxBufferedBody); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("rule=journal", func(b *testing.B) {
		j := newMemoryJournalFor(DefaultKeyTTL, nil, defaultMaxOperations)
		ctx := context.Background()
		resp, err := stubTransport{}.RoundTrip(newStubRequest(b))
		if err != nil {
			b.Fatal(err)
		}
		ids := benchIDs("op-", b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			claim, err := j.Claim(ctx, ids[i])
			if err != nil {
				b.Fatal(err)
			}
			op := journal.Operation{ID: ids[i], Key: "5f0c2a8e-3b1d-4e6f-9a7b-1c2d3e4f5a6b", Method: http.MethodPost,
				URL: "http://api.example.test/reservations", Created: time.Now(), KeyTTL: 24 * time.Hour, State: journal.StatePending}
			if err := claim.Begin(ctx, op); err != nil {
				b.Fatal(err)
			}
			op.State, op.Completed, op.Status, op.Header, op.Body = journal.StateDone, time.Now(), resp.StatusCode, resp.Header, stubAnswer
			if err := claim.Complete(context.WithoutCancel(ctx), op); err != nil {
				b.Fatal(err)
			}
			claim.Release()
		}
	})
	b.Run("rule=request", func(b *testing.B) {
		req := newStubRequest(b)
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			out := req.WithContext(ctx)
			out.Header = make(http.Header, len(req.Header)+1)
			maps.Copy(out.Header, req.Header)
			out.Header[defaultKeyHeader] = []string{"5f0c2a8e-3b1d-4e6f-9a7b-1c2d3e4f5a6b"}
			sinkRequest = out
		}
	})
	b.Run("rule=deadline", func(b *testing.B) {
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			dctx, cancel := context.WithDeadline(ctx, time.Now().Add(DefaultAttemptTimeout))
			sinkDone = dctx.Done() // made when first asked for, as net/http's transport does
			cancel()
		}
	})
}

var (
	sinkRequest *http.Request
	sinkDone    <-chan struct{}
)

// BenchmarkMemoryJournalHolds measures what a Client without a journal
// keeps for each completed operation until its key expires (C15): the heap
// bytes, the objects, and the time a full collection takes per operation
// remembered. Past its outcome budget, an operation is remembered as a
// digest, in tables the collector does not walk.
//
//	go test -run '^$' -bench MemoryJournalHolds -benchtime 100000x .
func BenchmarkMemoryJournalHolds(b *testing.B) {
	c, err := New(Config{HTTPClient: &http.Client{Transport: stubTransport{}}})
	if err != nil {
		b.Fatal(err)
	}
	ids := benchIDs("op-", b.N)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for i := range b.N {
		if err := readAnswer(c.Do(ids[i], newStubRequest(b))); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	runtime.GC()
	start := time.Now()
	runtime.GC()
	gc := time.Since(start)
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(ids) // counted before and after: what is left is the journal's
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(b.N), "heap-B/op")
	b.ReportMetric(float64(int64(after.HeapObjects)-int64(before.HeapObjects))/float64(b.N), "objects/op")
	b.ReportMetric(float64(gc.Nanoseconds())/float64(b.N), "gc-ns/op")
	if _, ok, _ := c.journal.Lookup(context.Background(), ids[b.N-1]); !ok {
		b.Fatal("the last operation is not kept whole")
	}
}
