package idemserver_test

import (
	"fmt"
	"net/http"
	"strconv"
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

// Concurrent requests under different keys that read one row and write
// what they read: at READ COMMITTED (PostgreSQL's and MySQL's default
// here) the handler locks the row it reads (FOR UPDATE), and no update is
// lost; on a Serializable route it reads it plainly, and the transactions
// that fail to serialize (PostgreSQL) or deadlock (MySQL) run again (the
// handler reports the failure with Fail): no update is lost either.
// SQLite's transactions run one at a time.
func TestAtomicConflictsRerun(t *testing.T) {
	for _, serializable := range []bool{false, true} {
		t.Run(fmt.Sprint("serializable=", serializable), func(t *testing.T) {
			onBothStores(t, idemserver.Config{}, func(t *testing.T, e *env) {
				read := `SELECT n FROM counter WHERE id = 1`
				if e.store.dialect != "sqlite" && !serializable {
					read += ` FOR UPDATE`
				}
				if _, err := e.db.Exec(`CREATE TABLE counter (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)`); err != nil {
					t.Fatal(err)
				}
				e.db.Exec(`INSERT INTO counter (id, n) VALUES (1, 0)`)
				srv := e.keys.Handle(idemserver.Route{Serializable: serializable}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					ctx := r.Context()
					tx := idemserver.Tx(ctx)
					var n int
					if err := tx.QueryRowContext(ctx, read).Scan(&n); err != nil {
						idemserver.Fail(ctx, err)
						return
					}
					if _, err := tx.ExecContext(ctx, e.q(`UPDATE counter SET n = ? WHERE id = 1`), n+1); err != nil {
						idemserver.Fail(ctx, err)
						return
					}
					w.WriteHeader(http.StatusCreated)
				}))
				const n = 8
				var wg sync.WaitGroup
				for i := range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						if got := do(t, srv, "POST", "/count", "k"+strconv.Itoa(i), ""); got.status != http.StatusCreated {
							t.Errorf("request %d: %+v", i, got)
						}
					}()
				}
				wg.Wait()
				var total int
				e.db.QueryRow(`SELECT n FROM counter WHERE id = 1`).Scan(&total)
				if total != n {
					t.Fatalf("counter %d, want %d", total, n)
				}
				t.Logf("reruns: %d", e.keys.Stats().Reruns)
			})
		})
	}
}
