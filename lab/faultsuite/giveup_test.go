package faultsuite

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// TestChaosCallerGivesUp makes the caller the fault: every Do runs under a
// deadline drawn between 5 and 205 milliseconds, against a server that
// delays 30% of its requests by 100ms and a gateway that takes 20ms, through
// the proxy at 20%. Most Do calls end because the caller gave up, at every
// stage: waiting for a concurrent Do, in flight, between attempts. Each
// must leave the operation pending (or not yet begun), and the caller's
// next Do resumes it under the same key: every operation must end done
// with exactly one effect.
func TestChaosCallerGivesUp(t *testing.T) {
	const ops, workers = 500, 16
	seed := seedOf(t)
	srv := startServer(t, "-fault-delay-rate", "0.3", "-fault-delay", "100ms", "-gateway-delay", "20ms",
		"-seed", fmt.Sprint(seed))
	w := Workload{ClientID: "give-up", Ops: ops}
	prepareInventory(t, srv.URL, w.ClientID)
	proxy, wire := listenProxy(t, srv.URL, seed, 0.2)
	w.BaseURL = proxy.URL

	checker := NewChecker(w.IDs())
	c := newClient(t, openJournal(t), checker)
	var (
		mu              sync.Mutex
		errs            []error
		gaveUp, unknown int
		wg              sync.WaitGroup
		next            = make(chan int)
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				g, u, err := runImpatiently(c, w, i, rngOf(seed, uint64(i)).IntN, checker)
				mu.Lock()
				gaveUp, unknown = gaveUp+g, unknown+u
				if err != nil {
					errs = append(errs, err)
				}
				mu.Unlock()
			}
		}()
	}
	for i := range ops {
		next <- i
	}
	close(next)
	wg.Wait()
	requireNoErrors(t, errs)
	t.Logf("Do calls the caller gave up on: %d; other unknown outcomes: %d", gaveUp, unknown)
	if gaveUp < ops/10 {
		t.Errorf("the caller gave up on only %d Do calls: the deadlines did not bite", gaveUp)
	}
	v := serverView(t, srv.URL, srv.DB, w, true, wire)
	// These callers send an operation again the instant they gave up on it,
	// and the server's answer to the abandoned request can reach the proxy
	// before the proxy sees the connection close: the wire cannot tell that
	// from two sends at once here. Keys are still counted from the wire;
	// concurrent sends are judged where callers wait (TestChaos*).
	v.Wire.Overlaps = nil
	report(t, checker, "give-up", v)
}

// runImpatiently runs operation i with a fresh deadline drawn from intn for
// each Do, until it is done. It returns how many Do calls ended because the
// caller's deadline passed and how many ended unknown otherwise.
func runImpatiently(c *idem.Client, w Workload, i int, intn func(int) int, rec Recorder) (gaveUp, unknown int, err error) {
	id := OperationID(i)
	for range 20 * maxRuns {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(5+intn(200))*time.Millisecond)
		req, err := w.Request(ctx, i)
		if err != nil {
			cancel()
			return gaveUp, unknown, err
		}
		resp, err := c.Do(id, req)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		cancel()
		rec.Outcome(id, ResultOf(err))
		switch {
		case err == nil:
			return gaveUp, unknown, nil
		case errors.Is(err, context.DeadlineExceeded):
			// Unknown if anything was sent; a plain context error if the
			// Do gave up before journaling or while waiting for another.
			gaveUp++
		case errors.Is(err, idem.ErrUnknown):
			unknown++
		default:
			return gaveUp, unknown, err
		}
	}
	return gaveUp, unknown, fmt.Errorf("%s: not done after %d runs", id, 20*maxRuns)
}
