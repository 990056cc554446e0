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
