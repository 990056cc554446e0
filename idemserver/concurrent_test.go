package idemserver_test

import (
	"net/http"
	"sync"
	"testing"

	"github.com/idemkit/idem/idemserver"
)

// Concurrent requests under one key on an atomic route: the transaction
// is the lock. One commits; every other is answered from its row; the
// business row exists once.
func TestAtomicConcurrentDuplicatesCommitOnce(t *testing.T) {
	onBothStores(t, idemserver.Config{}, func(t *testing.T, e *env) {
		h := &insertItem{e: e}
		srv := e.keys.Handle(idemserver.Route{}, h)
		const n = 8
		answers := make([]answer, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				answers[i] = do(t, srv, "POST", "/items", "same", "a")
			}()
		}
		wg.Wait()
		fresh := 0
		for i, a := range answers {
			if a.status != http.StatusCreated || a.body != `{"id":"a"}` {
				t.Errorf("answer %d: %+v", i, a)
			}
			if a.header.Get(idemserver.HeaderReplayed) == "" {
				fresh++
			}
		}
		if fresh != 1 {
			t.Errorf("%d answers not replayed, want 1", fresh)
		}
		if got := e.count("items"); got != 1 {
			t.Errorf("%d items, want 1", got)
		}
	})
}

// Concurrent first requests under one key on a phased route: one claims
// it and calls out once; the others get 409 or, once it finished, the
// replay.
func TestPhasedConcurrentDuplicatesCallOnce(t *testing.T) {
	onBothStores(t, idemserver.Config{}, func(t *testing.T, e *env) {
		gw := &gateway{}
		srv := e.keys.Handle(idemserver.Route{Phased: true}, &charge{e: e, gw: gw})
		const n = 8
		answers := make([]answer, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				answers[i] = do(t, srv, "POST", "/charges", "same", "a")
			}()
		}
		wg.Wait()
		fresh := 0
		for i, a := range answers {
			switch {
			case a.status == http.StatusCreated && a.header.Get(idemserver.HeaderReplayed) == "":
				fresh++
			case a.status == http.StatusCreated, a.status == http.StatusConflict:
			default:
				t.Errorf("answer %d: %+v", i, a)
			}
		}
		if fresh != 1 || gw.total() != 1 || e.count("items") != 1 {
			t.Errorf("%d fresh answers, %d calls, %d items; want 1, 1, 1", fresh, gw.total(), e.count("items"))
		}
	})
}
