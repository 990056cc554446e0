package main

// The other half of the demo: the same batch with plain retries, the way
// most HTTP clients retry. go-retryablehttp retries what it deems safe to
// retry, and every attempt carries a fresh Idempotency-Key: the server
// requires a key, so a new one per attempt is what a client without
// idempotency looks like to it. An invoice whose request failed in the end
// is sent again in the next round, as a job that reruns its failed rows
// would.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-retryablehttp"
	"github.com/idemkit/idem/testserver"
)

// plainRun is how the plain batch went.
type plainRun struct {
	Rounds    int
	Succeeded int // invoices that got a 201 in the end
	Elapsed   time.Duration
}

// runPlainBatch charges the invoices through url with plain retries, in
// rounds, until each got a 201 or demoMaxRounds rounds have run.
func runPlainBatch(ctx context.Context, url string, charges []demoCharge, scr *screen) (plainRun, error) {
	start := time.Now()
	tr := newTransport()
	defer tr.CloseIdleConnections()
	c := newPlainClient(&http.Client{Transport: tr, Timeout: demoAttemptTimeout})

	var r plainRun
	scr.startBar(len(charges), "plain")
	defer scr.endBar()
	left := charges
	for len(left) > 0 && r.Rounds < demoMaxRounds {
		r.Rounds++
		var failed []demoCharge
		for res := range chargeAll(ctx, c, url, left) {
			if res.ok {
				r.Succeeded++
				scr.set(r.Succeeded)
			} else {
				failed = append(failed, res.charge)
			}
		}
		if err := ctx.Err(); err != nil {
			return r, err
		}
		msg := fmt.Sprintf("  round %d: %d/%d succeeded", r.Rounds, r.Succeeded, len(charges))
		if len(failed) > 0 {
			msg += fmt.Sprintf(", %d gave up (sent again in the next round)", len(failed))
		}
		scr.say("%s", msg)
		left = failed
	}
	r.Elapsed = time.Since(start)
	return r, nil
}

// newPlainClient returns a go-retryablehttp client with the demo's
// attempt timeout (hc's Timeout), attempts and waits, that sends every
// retry under a new key.
func newPlainClient(hc *http.Client) *retryablehttp.Client {
	c := retryablehttp.NewClient()
	c.HTTPClient = hc
	c.Logger = nil
	c.RetryMax = demoMaxAttempts - 1
	c.RetryWaitMin = demoInitialWait
	c.RetryWaitMax = demoMaxWait
	c.PrepareRetry = func(req *http.Request) error {
		// The request is a shallow copy of the last attempt's, whose
		// header map it shares: replace the map, do not write into it.
		req.Header = req.Header.Clone()
		req.Header.Set(testserver.HeaderIdempotencyKey, uuid.NewString())
		return nil
	}
	return c
}

// plainResult is how one invoice of a plain round ended.
type plainResult struct {
	charge demoCharge
	ok     bool // a 201, its body read in full
}

// chargeAll charges the invoices demoConcurrency at a time and returns
// their results as they come; the channel is closed after the last.
func chargeAll(ctx context.Context, c *retryablehttp.Client, url string, charges []demoCharge) <-chan plainResult {
	work := make(chan demoCharge)
	results := make(chan plainResult)
	var wg sync.WaitGroup
	for range min(demoConcurrency, len(charges)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ch := range work {
				results <- plainResult{ch, chargePlain(ctx, c, url, ch) == nil}
			}
		}()
	}
	go func() {
		defer close(results)
		defer wg.Wait()
		defer close(work)
		for _, ch := range charges {
			select {
			case work <- ch:
			case <-ctx.Done():
				return
			}
		}
	}()
	return results
}

// chargePlain sends one invoice's charge with plain retries. The response
// body is read inside the retry loop, so that a body cut short is retried
// like any other failed attempt.
func chargePlain(ctx context.Context, c *retryablehttp.Client, url string, ch demoCharge) error {
	req, err := retryablehttp.NewRequestWithContext(ctx, http.MethodPost, url+"/charges", ch.Body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(testserver.HeaderClientID, demoClientID)
	req.Header.Set(testserver.HeaderIdempotencyKey, uuid.NewString())
	req.SetResponseHandler(func(resp *http.Response) error {
		defer resp.Body.Close()
		_, err := io.Copy(io.Discard, resp.Body)
		return err
	})
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("%s: status %s", ch.ID, resp.Status)
	}
	return nil
}
