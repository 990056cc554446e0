package faultsuite

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/testserver"
)

// Tests of bugs this suite found in the client and its journal, fixed
// since: each failed before its fix, and guards against its return.

// C2.2: the intent is durable before the first byte is sent. When the fsync
// of an intent failed, Begin returned the error but left the operation in
// the journal's index as pending, so the next Do of the same operation,
// in the same process, found it and sent it, although its intent never
// reached the disk (and, the journal having latched, Do reported done
// without recording it). When the machine then lost the unsynced page, as
// a kernel that failed an fsync may, the next process minted another key:
// the operation took effect twice.
func TestDiskFsyncFailureNeverSendsTheUnsyncedIntent(t *testing.T) {
	r := newDiskRig(t)
	r.faults.FailNextSyncAndLose(errDisk)
	if err := r.do(0); !errors.Is(err, errDisk) {
		t.Fatalf("Do = %v, want the disk failure", err)
	}
	r.requireSent(0, 0)
	err := r.do(0)
	st := r.stats()
	r.j.Close()
	r.open(nil) // the next process, on what the disk kept
	if err2 := r.do(0); err2 != nil {
		t.Fatal(err2)
	}
	if n := r.stats().Effects.Charges; n != 1 || !errors.Is(err, errDisk) {
		t.Fatalf("the Do after the failed fsync returned %v after %d requests; after a restart the operation has %d effects, want 1",
			err, st.Requests-1, n)
	}
}

// C4.2: a completed operation is not sent again, also after a restart. The
// journal's compaction used to drop operations completed more than KeyTTL
// ago, so a batch resumed (or run again) the next day, after a compaction
// (which also runs on its own once the file passes 4 MiB), sent its
// completed operations again under new keys: each took effect twice.
func TestCompletedOperationIsNotResentAfterCompaction(t *testing.T) {
	clock := newFakeClock()
	srv := testserver.Start(t, testserver.Config{Now: clock.Now})
	w := Workload{BaseURL: srv.URL, ClientID: "compaction", Ops: 4}
	prepareInventory(t, srv.URL, w.ClientID)
	j, err := filejournal.Open(filepath.Join(t.TempDir(), "client.journal"),
		filejournal.Options{Now: clock.Now, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	tr := NewTransport()
	defer tr.CloseIdleConnections()
	cfg := clientConfig(j, &http.Client{Transport: tr})
	c, err := idem.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ops := make([]idem.BatchOp, w.Ops)
	for i := range ops {
		ops[i] = idem.BatchOp{ID: OperationID(i), Request: func(ctx context.Context) (*http.Request, error) {
			return w.Request(ctx, i)
		}}
	}
	if sum, err := c.RunBatch(context.Background(), ops[:2], idem.BatchOptions{}); err != nil || sum.Done != 2 {
		t.Fatalf("first run: %+v, %v", sum, err)
	}
	clock.Advance(idem.DefaultKeyTTL + time.Hour) // the job is resumed the next day
	if err := j.Compact(); err != nil {
		t.Fatal(err)
	}
	sum, err := c.RunBatch(context.Background(), ops, idem.BatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := srv.Server.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.DuplicateReferences != 0 || sum.Recorded != 2 {
		t.Fatalf("the resumed batch answered %d operations from the journal (want 2) and the server holds %d operations applied twice",
			sum.Recorded, st.DuplicateReferences)
	}
}

// C6.3: a pending operation whose key is older than KeyTTL is refused and
// nothing is sent. The client checked the key's age once, when Do
// started, and not before each retry: a Do that started just before
// KeyTTL kept retrying after it, when the server had forgotten the key,
// and a retry that reached the server then was applied as a new request.
// RunBatch runs pending operations first, which are the ones closest to
// KeyTTL.
//
// The same holds for an attempt sent a moment before KeyTTL that is still
// on its way (in a queue, in a proxy, waiting for the server's write lock)
// when the key turns KeyTTL old and the server sweeps it: the server would
// apply it as a new request. An attempt needs a margin of its own timeout,
// so the client sends none within AttemptTimeout of KeyTTL.
//
// The first attempt is applied and its answer lost. The resume retries
// failed attempts while the clock, which moves by what each attempt and
// each wait takes, runs up to that margin. Each case says when its
// attempts go, as time left before KeyTTL; the next one would start within
// the margin, or after KeyTTL, and must not be sent. Sent anyway, it
// reaches the server after the sweep and takes effect a second time.
func TestRetriesStopAtKeyTTL(t *testing.T) {
	const (
		ttl     = time.Hour
		timeout = 2 * time.Second       // AttemptTimeout
		wait    = 10 * time.Millisecond // every wait between attempts
	)
	for _, tc := range []struct {
		name  string
		start time.Duration // the key's age when the resume starts
		// attempt answers an attempt sent in time, and moves the clock by
		// the time the attempt takes.
		attempt func(clock *fakeClock, req *http.Request) (*http.Response, error)
		sent    []time.Duration // when the attempts go, as time left before KeyTTL
	}{
		{
			// 503s in 490ms: the fifth attempt would start 1.75s before
			// KeyTTL, within the margin.
			name:  "next attempt within AttemptTimeout of KeyTTL",
			start: ttl - 3750*time.Millisecond,
			attempt: func(clock *fakeClock, req *http.Request) (*http.Response, error) {
				clock.Advance(490 * time.Millisecond)
				return unavailable(req), nil
			},
			sent: []time.Duration{3750 * time.Millisecond, 3250 * time.Millisecond, 2750 * time.Millisecond, 2250 * time.Millisecond},
		},
		{
			// Attempts that time out: the third ends 5ms before KeyTTL,
			// and the fourth would start 5ms after it.
			name:  "next attempt after KeyTTL",
			start: ttl - 6025*time.Millisecond,
			attempt: func(clock *fakeClock, req *http.Request) (*http.Response, error) {
				clock.Advance(timeout)
				return nil, fmt.Errorf("%s %s: %w", req.Method, req.URL, context.DeadlineExceeded)
			},
			sent: []time.Duration{6025 * time.Millisecond, 4015 * time.Millisecond, 2005 * time.Millisecond},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			srv := testserver.Start(t, testserver.Config{Now: clock.Now, Retention: ttl})
			w := Workload{BaseURL: srv.URL, ClientID: "ttl", Ops: 1}
			id := OperationID(0)
			j, err := filejournal.Open(filepath.Join(t.TempDir(), "client.journal"),
				filejournal.Options{Now: clock.Now, Logger: quietLog})
			if err != nil {
				t.Fatal(err)
			}
			defer j.Close()
			tr := NewTransport()
			defer tr.CloseIdleConnections()
			do := func(cfg idem.Config) error {
				c, err := idem.New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				req, err := w.Request(context.Background(), 0)
				if err != nil {
					t.Fatal(err)
				}
				resp, err := c.Do(id, req)
				if err == nil {
					resp.Body.Close()
				}
				return err
			}

			lost := roundTripFunc(func(req *http.Request) (*http.Response, error) {
				if resp, err := tr.RoundTrip(req); err == nil {
					resp.Body.Close()
				}
				return nil, fmt.Errorf("read: %w", syscall.ECONNRESET)
			})
			cfg := clientConfig(j, &http.Client{Transport: lost})
			cfg.Dialect.Retention, cfg.AttemptTimeout, cfg.MaxAttempts = ttl, timeout, 1
			if err := do(cfg); !errors.Is(err, idem.ErrUnknown) {
				t.Fatalf("first Do = %v, want unknown", err)
			}
			op, ok := lookup(j, id)
			if !ok {
				t.Fatalf("the journal lost %s", id)
			}
			clock.Advance(tc.start - clock.Now().Sub(op.Created))

			var sent []time.Duration
			cfg.HTTPClient = &http.Client{Transport: roundTripFunc(func(req *http.Request) (*http.Response, error) {
				left := ttl - clock.Now().Sub(op.Created)
				sent = append(sent, left)
				if left > timeout {
					return tc.attempt(clock, req)
				}
				// Sent too late: the key turns KeyTTL old and is swept
				// while the attempt is on its way.
				clock.Advance(max(left, 0))
				if _, err := srv.Server.Sweep(context.Background()); err != nil {
					t.Error(err)
				}
				return tr.RoundTrip(req)
			})}
			cfg.MaxAttempts, cfg.InitialWait, cfg.MaxWait, cfg.Jitter = 10, wait, wait, -1
			cfg.OnAttempt = func(a idem.Attempt) {
				if a.Retry {
					clock.Advance(a.Wait)
				}
			}
			err = do(cfg)
			st, serr := srv.Server.Stats(context.Background())
			if serr != nil {
				t.Fatal(serr)
			}
			var oe *idem.OutcomeError
			if !slices.Equal(sent, tc.sent) || !errors.Is(err, idem.ErrUnknown) || !errors.Is(err, idem.ErrKeyExpired) ||
				!errors.As(err, &oe) || oe.Attempts != len(tc.sent) || st.Effects.Charges != 1 {
				t.Fatalf("the resume sent attempts %v before KeyTTL, want %v (none within the attempt timeout %s of it), and returned %v, want unknown with ErrKeyExpired after %d attempts; the server holds %d charges, want 1",
					sent, tc.sent, timeout, err, len(tc.sent), st.Effects.Charges)
			}
			left := ttl - clock.Now().Sub(op.Created)
			if err := do(cfg); !errors.Is(err, idem.ErrKeyExpired) || len(sent) != len(tc.sent) {
				t.Fatalf("a resume %s before KeyTTL returned %v and sent %d attempts, want ErrKeyExpired and none",
					left, err, len(sent)-len(tc.sent))
			}
		})
	}
}

// unavailable is a 503 answer to req from a front end whose servers are
// all busy.
func unavailable(req *http.Request) *http.Response {
	return &http.Response{
		Status: "503 Service Unavailable", StatusCode: http.StatusServiceUnavailable,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{}, Body: http.NoBody, Request: req,
	}
}

// C9.3: the error of an unknown outcome says the last status or error. When
// retrying stopped (attempts or retry budget exhausted) after a transport
// error, the OutcomeError carried only why retrying stopped: the
// connection error was gone from the message and from errors.Is.
func TestUnknownOutcomeNamesTheLastError(t *testing.T) {
	reset := roundTripFunc(func(*http.Request) (*http.Response, error) {
		return nil, fmt.Errorf("read tcp: %w", syscall.ECONNRESET)
	})
	cfg := clientConfig(nil, &http.Client{Transport: reset})
	cfg.MaxAttempts = 2
	c, err := idem.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w := Workload{BaseURL: "http://127.0.0.1:9", ClientID: "c9", Ops: 1}
	req, err := w.Request(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Do(OperationID(0), req)
	if !errors.Is(err, idem.ErrUnknown) || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("Do = %v; want unknown, naming the connection reset", err)
	}
}

// roundTripFunc is an http.RoundTripper from a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
