package faultsuite

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/idemkit/idem/testserver"
)

// killAtRandom is the kill of the server at a random moment under load,
// beside its three crash points.
const killAtRandom = "random"

// serverKillPlan is where successive server kills happen, round robin:
// between the gateway's capture and the charge's commit, inside the final
// transaction before COMMIT, after COMMIT before the answer, and at a
// random moment.
var serverKillPlan = []string{
	testserver.CrashPointAfterGateway,
	testserver.CrashPointBeforeCommit,
	testserver.CrashPointAfterCommit,
	killAtRandom,
}

// crashFlags returns the server flags that make requests reach point: one
// in twenty mutating requests (charges only, for after-gateway) stops
// there, held by -crash=hang until the test kills the server.
func crashFlags(point string) []string {
	switch point {
	case testserver.CrashPointAfterGateway:
		return []string{"-fault-crash-after-gateway", "0.05"}
	case testserver.CrashPointBeforeCommit:
		return []string{"-fault-crash-before-commit", "0.05"}
	case testserver.CrashPointAfterCommit:
		return []string{"-fault-crash-after-commit", "0.05"}
	}
	return nil
}

// serverKiller kills the server at the points of serverKillPlan and
// starts it again on the same file and port, each time with the crash
// fault of the next kill.
type serverKiller struct {
	srv         *ServerProcess
	flags       []string // flags of every start
	rng         *rand.Rand
	maxOutcomes int // a random kill waits for at most this many outcomes
	kills       int
	byPoint     map[string]int
}

// startServerForKills starts the server with flags, set up for the first
// kill of the plan.
func newServerKiller(t *testing.T, seed int64, maxOutcomes int) *serverKiller {
	t.Helper()
	k := &serverKiller{
		flags: []string{"-lock-timeout", "1s", "-seed", strconv.FormatInt(seed, 10)},
		rng:   rngOf(seed, 3), maxOutcomes: maxOutcomes, byPoint: map[string]int{},
	}
	k.srv = startServer(t, k.flags...) // no fault until the inventory is stocked
	return k
}

// arm restarts the server gracefully with the crash fault of the next
// kill; the inventory must be stocked first.
func (k *serverKiller) arm(ctx context.Context) error {
	if err := k.srv.Stop(10 * time.Second); err != nil {
		return err
	}
	return k.srv.Start(ctx, append(k.flags, crashFlags(k.point(k.kills))...)...)
}

func (k *serverKiller) point(n int) string { return serverKillPlan[n%len(serverKillPlan)] }

// kill waits for the moment of the next kill (the server announcing a
// crash point, or a random number of further outcomes of prog), kills the
// server, and starts it again, with the fault of the kill after it unless
// last. It returns false, without killing, if stop is closed first.
func (k *serverKiller) kill(ctx context.Context, prog *progress, stop <-chan struct{}, last bool) (bool, error) {
	point := k.point(k.kills)
	if point == killAtRandom {
		ok, err := prog.waitFor(ctx, prog.count()+1+k.rng.IntN(max(k.maxOutcomes, 1)), stop)
		if !ok || err != nil {
			return false, err
		}
	} else {
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-stop:
				cancel()
			case <-wctx.Done():
			}
		}()
		got, err := k.srv.CrashPoint(wctx)
		select {
		case <-stop:
			return false, nil
		default:
		}
		if err != nil {
			return false, err
		}
		if got != point {
			return false, fmt.Errorf("the server stopped at crash point %q, want %q", got, point)
		}
	}
	if err := k.srv.Kill(); err != nil {
		return false, err
	}
	k.kills++
	k.byPoint[point]++
	var flags []string
	if !last {
		flags = crashFlags(k.point(k.kills))
	}
	return true, k.srv.Start(ctx, append(k.flags, flags...)...)
}

// TestServerCrash runs the workload from 16 workers of one client, with a
// journal, against the reference server's binary on a SQLite file, and
// SIGKILLs the server under load: at each of its crash points (between
// the gateway's capture and the charge's commit, before COMMIT, after
// COMMIT) and at random moments. The server is started again on the same
// file and port each time. Every operation must end done with exactly one
// effect, and the gateway must have captured once per charge.
func TestServerCrash(t *testing.T) {
	seed := seedOf(t)
	ops := sizeOf(t, EnvCrashOps, DefaultCrashOps)
	kills := sizeOf(t, EnvServerKills, DefaultServerKills)
	k := newServerKiller(t, seed, ops/(kills+2))
	w := Workload{BaseURL: k.srv.URL, ClientID: "server-crash", Ops: ops}
	prepareInventory(t, w.BaseURL, w.ClientID)
	proxy, wire := listenProxy(t, k.srv.URL, seed, 0) // no faults: a witness of what reaches the server
	w.BaseURL = proxy.URL
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	if err := k.arm(ctx); err != nil {
		t.Fatal(err)
	}

	checker := NewChecker(w.IDs())
	prog := newProgress(checker)
	c := newClient(t, openJournal(t), prog)
	finished := make(chan struct{})
	var errs []error
	go func() {
		defer close(finished)
		errs = runWorkload(ctx, c, w, 16, prog)
	}()
	for n := 1; n <= kills; n++ {
		ok, err := k.kill(ctx, prog, finished, n == kills)
		if err != nil {
			cancel()
			<-finished
			t.Fatalf("kill %d: %v", n, err)
		}
		if !ok {
			t.Fatalf("the workload ended after %d of %d kills", n-1, kills)
		}
	}
	<-finished
	requireNoErrors(t, errs)
	if n := k.srv.Kills(); n != kills {
		t.Errorf("the server was killed %d times, want %d", n, kills)
	}
	t.Logf("server kills by point: %v", k.byPoint)
	report(t, checker, "server-crash", serverView(t, k.srv.URL, k.srv.DB, w, false, wire))
}
