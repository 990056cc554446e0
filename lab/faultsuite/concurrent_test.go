package faultsuite

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestChaosConcurrentDoOfOneOperation runs each operation from four
// goroutines at once, through the fault proxy at 30%, as when a caller's
// retry loop races a second worker over the same row. Concurrent Do calls
// of one operation must never both send (C11): the later ones wait and
// get the recorded answer or resume under the same key. Every operation
// must end done with exactly one effect.
func TestChaosConcurrentDoOfOneOperation(t *testing.T) {
	const ops, racers, parallel = 200, 4, 16
	seed := seedOf(t)
	srv := startServer(t)
	w := Workload{ClientID: "concurrent", Ops: ops}
	prepareInventory(t, srv.URL, w.ClientID)
	proxy, wire := listenProxy(t, srv.URL, seed, 0.3)
	w.BaseURL = proxy.URL

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	checker := NewChecker(w.IDs())
	c := newClient(t, openJournal(t), checker)
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, parallel)
	)
	for i := range ops {
		sem <- struct{}{}
		var op sync.WaitGroup
		for range racers {
			op.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer op.Done()
				if err := runOperation(ctx, c, w, i, checker); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			op.Wait()
			<-sem
		}()
	}
	wg.Wait()
	requireNoErrors(t, errs)
	t.Logf("proxy: %s", proxy.Counts())
	report(t, checker, "concurrent", serverView(t, srv.URL, srv.DB, w, true, wire))
}
