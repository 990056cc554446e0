package idemserver_test

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/idemkit/idem/idemserver"
)

// L1.9: Sweep deletes a finished key once it is Config.Retention old
// (24h by default) and not before, honours Route.Retention per route,
// calls Forget with the swept keys inside its transaction (an error from
// Forget undoes the sweep), and a swept key is then a new request.
func TestL1SweepForgetsFinishedKeysPastRetention(t *testing.T) {
	eachProofStore(t, func(t *testing.T, s proofStore) {
		e := newProofEnv(t, s)
		var forgot []idemserver.Swept
		var forgetErr error
		cfg := e.config()
		cfg.Forget = func(ctx context.Context, tx *sql.Tx, swept []idemserver.Swept) error {
			for _, sw := range swept {
				if _, err := forgetTx(ctx, tx).ExecContext(ctx, e.q(`UPDATE things SET forgotten = 1 WHERE principal = ? AND k = ?`), sw.Principal, sw.Key); err != nil {
					return err
				}
			}
			if forgetErr != nil {
				return forgetErr
			}
			forgot = append(forgot, swept...)
			return nil
		}
		keys := e.keys(cfg)
		h := &inserter{e: e}
		def := keys.Handle(idemserver.Route{}, h)
		short := keys.Handle(idemserver.Route{Retention: time.Hour}, h)
		long := keys.Handle(idemserver.Route{Retention: 48 * time.Hour}, h)
		d := serve(def, req("POST", "/d", "", "d"))
		serve(short, req("POST", "/s", "", "s"))
		serve(long, req("POST", "/l", "", "l"))
		if k := e.keyRows(); k != 3 {
			t.Fatalf("%d key rows, want 3", k)
		}
		sweep := func(when string, want int64, wantKeys ...string) {
			t.Helper()
			forgot = nil
			n, err := keys.Sweep(context.Background())
			if err != nil || n != want {
				t.Fatalf("sweep %s: %d, %v; want %d", when, n, err, want)
			}
			var got []string
			for _, sw := range forgot {
				if sw.Principal != "" {
					t.Errorf("sweep %s: Forget got principal %q, want the default's, \"\"", when, sw.Principal)
				}
				got = append(got, sw.Key)
			}
			if len(got) != len(wantKeys) || (len(got) > 0 && !reflect.DeepEqual(got, wantKeys)) {
				t.Errorf("sweep %s: Forget got %q, want %q", when, got, wantKeys)
			}
		}
		e.clock.Add(time.Hour - time.Second)
		sweep("a second before an hour", 0)
		e.clock.Add(2 * time.Second)
		sweep("a second after an hour", 1, "s")
		if n := e.count("things", "k = ? AND forgotten = 1", "s"); n != 1 {
			t.Errorf("Forget's update of the swept key's row: %d rows, want 1 (committed with the sweep)", n)
		}
		e.clock.Add(23*time.Hour - 2*time.Second)
		sweep("a second before the default 24h", 0)
		e.clock.Add(2 * time.Second)
		sweep("a second after 24h", 1, "d")
		e.clock.Add(24 * time.Hour)
		sweep("past the route's 48h", 1, "l")

		serve(def, req("POST", "/f", "", "f"))
		e.clock.Add(idemserver.DefaultRetention + time.Second)
		forgetErr = errors.New("business table locked")
		if n, err := keys.Sweep(context.Background()); err == nil {
			t.Errorf("Sweep with a failing Forget: %d, nil; want the error", n)
		}
		if k, f := e.keyRows(), e.count("things", "k = ? AND forgotten = 1", "f"); k != 1 || f != 0 {
			t.Errorf("after a failed Forget: %d key rows, %d rows forgotten; want 1, 0 (the sweep undone)", k, f)
		}
		forgetErr = nil
		sweep("after Forget recovers", 1, "f")

		again := serve(def, req("POST", "/d", "", "d"))
		wantStatus(t, "a swept key used again", again, http.StatusCreated)
		if again.Header().Get(idemserver.HeaderReplayed) != "" || again.Body.String() == d.Body.String() {
			t.Errorf("a swept key was replayed: %q", again.Body.String())
		}
		if n := h.runs.Load(); n != 5 {
			t.Errorf("handler ran %d times, want 5", n)
		}
	})
}

// L1.10: Sweep never deletes an unfinished key, whether its claim is
// live, lapsed, or released after a 5xx, however old.
func TestL1SweepNeverDeletesAnUnfinishedKey(t *testing.T) {
	eachProofStore(t, func(t *testing.T, s proofStore) {
		e := newProofEnv(t, s)
		keys := e.keys(e.config())
		entered, release, open := gate(t)
		c := &charger{e: e, gw: newProofGateway()}
		c.inCharge = func(ctx context.Context, dk string) {
			if c.charges.Load() == 1 {
				close(entered)
				<-release
			}
		}
		route := keys.Handle(idemserver.Route{Phased: true, Retention: time.Second}, c)
		done := make(chan *httptestRecorder, 1)
		go func() { done <- serve(route, req("POST", "/charges", "x", "held")) }()
		waitEntered(t, entered, done)
		released := keys.Handle(idemserver.Route{Phased: true, Retention: time.Second}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			idemserver.Step(r.Context(), "reserve", func(ctx context.Context, dk string) ([]byte, error) { return []byte("r"), nil })
			http.Error(w, "down", http.StatusServiceUnavailable)
		}))
		wantStatus(t, "released", serve(released, req("POST", "/r", "", "released")), http.StatusServiceUnavailable)
		for _, d := range []time.Duration{2 * time.Second, idemserver.DefaultLockTimeout, 72 * time.Hour} {
			e.clock.Add(d)
			if n, err := keys.Sweep(context.Background()); err != nil || n != 0 {
				t.Errorf("sweep %v later: %d, %v; want 0, nil", d, n, err)
			}
			if k := e.keyRows(); k != 2 {
				t.Errorf("sweep %v later: %d key rows, want 2", d, k)
			}
		}
		open()
		<-done
	})
}
