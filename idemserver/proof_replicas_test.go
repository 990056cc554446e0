package idemserver_test

import (
	"database/sql"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/idemserver"
)

// L1.11: two Keys (replicas) on one PostgreSQL database, 200 concurrent
// requests under one key spread over both: one business row, one handler
// committed run, and every final answer is the stored one byte for byte; on an
// atomic route none is refused in flight (the transaction is the lock),
// on a phased route the others get 409 until the first finishes.
func TestL1ReplicasOneKeyOneEffect(t *testing.T) {
	for _, phased := range []bool{false, true} {
		name := "atomic"
		if phased {
			name = "phased"
		}
		t.Run(name, func(t *testing.T) {
			e := newProofEnv(t, proofStore{name: "postgres", pg: true})
			var routes []http.Handler
			var runs []func() int64
			var replicas []*idemserver.Keys
			for range 2 {
				db, err := sql.Open("pgx", e.dsn)
				if err != nil {
					t.Fatal(err)
				}
				db.SetMaxOpenConns(10)
				t.Cleanup(func() { db.Close() })
				keys := e.keys(idemserver.Config{DB: db})
				replicas = append(replicas, keys)
				if phased {
					c := &charger{e: e, gw: newProofGateway()}
					routes = append(routes, keys.Handle(idemserver.Route{Phased: true}, c))
					runs = append(runs, c.runs.Load)
				} else {
					h := &inserter{e: e}
					routes = append(routes, keys.Handle(idemserver.Route{}, h))
					runs = append(runs, h.runs.Load)
				}
			}
			const n = 200
			answers := make([]*httptestRecorder, n)
			conflicts := make([]int, n)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for {
						w := serve(routes[i%2], req("POST", "/things", `{"amount":100}`, "one-key"))
						if w.Code == http.StatusConflict || w.Code == http.StatusServiceUnavailable {
							conflicts[i]++
							time.Sleep(2 * time.Millisecond) // a client waiting to retry, not a wait for an event
							continue
						}
						answers[i] = w
						return
					}
				}()
			}
			close(start)
			wg.Wait()
			// An atomic route's transaction that PostgreSQL aborts runs
			// again, handler included, and rolls back: only reruns may
			// add runs, and only one commits.
			reruns := replicas[0].Stats().Reruns + replicas[1].Stats().Reruns
			if got := runs[0]() + runs[1](); got < 1 || got > 1+reruns || phased && got != 1 {
				t.Errorf("handlers ran %d times over both replicas with %d reruns, want 1 and at most 1+reruns", got, reruns)
			}
			if b := e.count("things"); b != 1 {
				t.Errorf("%d business rows, want 1", b)
			}
			var first *httptestRecorder
			fresh, refused := 0, 0
			for i, w := range answers {
				if w.Header().Get(idemserver.HeaderReplayed) != "true" {
					fresh++
				}
				if first == nil || first.Header().Get(idemserver.HeaderReplayed) == "true" && w.Header().Get(idemserver.HeaderReplayed) != "true" {
					first = w
				}
				if conflicts[i] > 0 {
					refused++
				}
			}
			if fresh != 1 {
				t.Errorf("%d answers not marked replayed, want 1 (the first)", fresh)
			}
			wantStatus(t, "the first answer", first, http.StatusCreated)
			for i, w := range answers {
				if w.Code != first.Code || w.Body.String() != first.Body.String() {
					t.Fatalf("answer %d: %d %q, want the stored %d %q", i, w.Code, w.Body.String(), first.Code, first.Body.String())
				}
			}
			if !phased && refused != 0 {
				t.Errorf("%d requests on the atomic route were refused in flight or for contention, want 0", refused)
			}
			t.Logf("%d of %d requests were refused at least once before their answer; %d reruns", refused, n, reruns)
		})
	}
}
