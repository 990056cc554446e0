package idem_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
)

// A charge that the network fails twice is applied once: every attempt
// carries the same key, and the server's answer to the last one is
// returned.
func ExampleClient_Do() {
	var mu sync.Mutex
	charges := map[string]int{} // key → times applied
	failures := 2
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		charges[r.Header.Get("Idempotency-Key")]++ // applied...
		if failures > 0 {
			failures--
			w.WriteHeader(http.StatusBadGateway) // ...but the answer is lost
			return
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "charged")
	}))
	defer srv.Close()

	c, err := idem.New(idem.Config{})
	if err != nil {
		panic(err)
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charges", strings.NewReader(`{"amount":1200}`))
	resp, err := c.Do("invoice-42", req)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(body))
	fmt.Println("distinct keys:", len(charges))
	// Output:
	// 201 charged
	// distinct keys: 1
}

// A batch job that dies halfway resumes from its journal: completed
// operations are answered from the journal without a network call, and the
// one left pending is resent under the key it was first sent with.
func Example_resumeBatch() {
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "batch.journal")

	var mu sync.Mutex
	seen := map[string][]string{} // invoice → keys received
	down := true                  // the server fails invoice-3 during the first run
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		invoice := strings.TrimPrefix(r.URL.Path, "/charges/")
		seen[invoice] = append(seen[invoice], r.Header.Get("Idempotency-Key"))
		if invoice == "invoice-3" && down {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()

	run := func() {
		j, err := filejournal.Open(path, filejournal.Options{})
		if err != nil {
			panic(err)
		}
		defer j.Close()
		c, err := idem.New(idem.Config{Journal: j, MaxAttempts: 2})
		if err != nil {
			panic(err)
		}
		for i := 1; i <= 4; i++ {
			id := fmt.Sprintf("invoice-%d", i)
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, srv.URL+"/charges/"+id, nil)
			resp, err := c.Do(id, req)
			switch {
			case errors.Is(err, idem.ErrUnknown):
				fmt.Println(id, "unknown: left pending")
			case err != nil:
				fmt.Println(id, err)
			default:
				resp.Body.Close()
				fmt.Println(id, resp.StatusCode, "recorded:", idem.Recorded(resp))
			}
		}
	}

	fmt.Println("first run:")
	run()
	mu.Lock()
	down = false
	mu.Unlock()
	fmt.Println("after a restart:")
	run()
	k := seen["invoice-3"]
	fmt.Println("invoice-3 attempts:", len(k), "same key:", k[0] == k[1] && k[1] == k[2])
	// Output:
	// first run:
	// invoice-1 201 recorded: false
	// invoice-2 201 recorded: false
	// invoice-3 unknown: left pending
	// invoice-4 201 recorded: false
	// after a restart:
	// invoice-1 201 recorded: true
	// invoice-2 201 recorded: true
	// invoice-3 201 recorded: false
	// invoice-4 201 recorded: true
	// invoice-3 attempts: 3 same key: true
}

// RunBatch runs a batch job that can be killed and rerun: what completed is
// not sent again, what was pending resumes first under its original key.
func ExampleClient_RunBatch() {
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()

	var ops []idem.BatchOp
	for i := 1; i <= 100; i++ {
		id := fmt.Sprintf("invoice-%03d", i)
		ops = append(ops, idem.BatchOp{ID: id, Request: func(ctx context.Context) (*http.Request, error) {
			body := fmt.Sprintf(`{"invoice":%q,"amount":1200}`, id)
			return http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/charges", strings.NewReader(body))
		}})
	}
	for run := 1; run <= 2; run++ {
		j, err := filejournal.Open(filepath.Join(dir, "batch.journal"), filejournal.Options{})
		if err != nil {
			panic(err)
		}
		c, _ := idem.New(idem.Config{Journal: j})
		sum, err := c.RunBatch(context.Background(), ops, idem.BatchOptions{Concurrency: 16})
		j.Close()
		fmt.Printf("run %d: done %d (from the journal %d), unknown %d, err %v\n", run, sum.Done, sum.Recorded, sum.Unknown, err)
	}
	// Output:
	// run 1: done 100 (from the journal 0), unknown 0, err <nil>
	// run 2: done 100 (from the journal 100), unknown 0, err <nil>
}

// Code that only takes an *http.Client gets one from StandardClient; the
// operation of each request is named in its context. A retry of the same
// operation, even through another request value, carries the same key.
func ExampleClient_StandardClient() {
	var mu sync.Mutex
	keys := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys[r.Header.Get("Idempotency-Key")] = true
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()

	c, err := idem.New(idem.Config{})
	if err != nil {
		panic(err)
	}
	hc := c.StandardClient() // hand this to a generated API client
	for range 2 {
		ctx := idem.WithOperation(context.Background(), "refund-7781")
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/refunds", strings.NewReader(`{"charge":"ch_1"}`))
		resp, err := hc.Do(req)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode, "answered from the journal:", idem.Recorded(resp))
	}
	fmt.Println("keys the server saw:", len(keys))
	// Output:
	// 201 answered from the journal: false
	// 201 answered from the journal: true
	// keys the server saw: 1
}

// A call that must give up sooner than the Client's others says so in its
// context; Config.OnOperation hears how every call ended.
func ExampleWithCallOptions() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()

	c, err := idem.New(idem.Config{
		InitialWait: time.Millisecond,
		OnOperation: func(e idem.OperationEnd) {
			fmt.Printf("%s: %v after %d attempts, last status %d\n", e.ID, e.Outcome, e.Attempts, e.Status)
		},
	})
	if err != nil {
		panic(err)
	}
	ctx := idem.WithCallOptions(context.Background(), idem.CallOptions{MaxAttempts: 2})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/charges", strings.NewReader(`{"amount":1200}`))
	_, err = c.Do("invoice-43", req)
	fmt.Println(errors.Is(err, idem.ErrUnknown))
	// Output:
	// invoice-43: unknown after 2 attempts, last status 503
	// true
}

// An API of one's own: the key goes in the "request_id" field of the JSON
// body, it is kept for two hours, "processing" means the first request is
// still running, and "duplicate" means it was applied before, without a
// replay of its answer.
func ExampleDialect() {
	ledger := idem.Dialect{
		Name:         "ledger",
		KeyField:     "request_id",
		MaxKeyLength: 64,
		Retention:    2 * time.Hour,
		Signals: []idem.Signal{
			{Status: http.StatusConflict, Field: "error.code", Value: "processing", Answer: idem.AnswerInFlight},
			{Status: http.StatusConflict, Field: "error.code", Value: "duplicate", Answer: idem.AnswerApplied},
			{Status: http.StatusUnprocessableEntity, Field: "error.code", Value: "request_id_reused", Answer: idem.AnswerKeyReused},
		},
	}
	var mu sync.Mutex
	seen := map[string]int{} // request_id → requests
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			RequestID string `json:"request_id"`
		}
		json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		seen[body.RequestID]++
		n := seen[body.RequestID]
		mu.Unlock()
		switch n {
		case 1: // applied, but the answer is lost
			w.WriteHeader(http.StatusBadGateway)
		case 2:
			w.WriteHeader(http.StatusConflict)
			io.WriteString(w, `{"error":{"code":"processing"}}`)
		default:
			w.WriteHeader(http.StatusConflict)
			io.WriteString(w, `{"error":{"code":"duplicate","entry":"E-7"}}`)
		}
	}))
	defer srv.Close()

	c, err := idem.New(idem.Config{Dialect: ledger, InitialWait: time.Millisecond})
	if err != nil {
		panic(err)
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/entries", strings.NewReader(`{"amount":1200}`))
	resp, err := c.Do("entry-42", req)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, idem.AlreadyApplied(resp), string(body))
	fmt.Println("distinct keys:", len(seen))
	// Output:
	// 409 true {"error":{"code":"duplicate","entry":"E-7"}}
	// distinct keys: 1
}
