package testserver

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"
)

// S6.1 to S6.3: keys expire after the retention window (a key as old as the
// window is expired, as the client's KeyTTL counts it); a key used after the
// sweep is a new request.
func TestS6SweepForgetsExpiredKeys(t *testing.T) {
	clock := newFakeClock()
	// The background sweeper must not interfere: an interval of an hour.
	in := start(t, Config{Now: clock.Now, Retention: 10 * time.Second, SweepInterval: time.Hour})
	stock(t, in, "sku-1", 10)
	body := `{"item_id":"sku-1","quantity":1,"reference":"r1"}`
	first := send(t, in, req{method: "POST", path: "/reservations", key: "k", body: body})
	wantStatus(t, first, 201)

	tests := []struct {
		advance   time.Duration
		swept     int64
		wantFirst bool // the retry is a replay of the first answer
	}{
		{9 * time.Second, 0, true},        // inside the window
		{999 * time.Millisecond, 0, true}, // 9.999s: still inside
		{1 * time.Millisecond, 2, false},  // 10s: the reservation's and the stock's keys go
	}
	for _, tt := range tests {
		clock.Advance(tt.advance)
		n, err := in.Server.Sweep(context.Background())
		if err != nil || n != tt.swept {
			t.Fatalf("after %v: Sweep = %d, %v; want %d", tt.advance, n, err, tt.swept)
		}
		if !tt.wantFirst {
			break
		}
		again := send(t, in, req{method: "POST", path: "/reservations", key: "k", body: body})
		if again.header.Get(HeaderReplayed) != "true" || string(again.body) != string(first.body) {
			t.Fatalf("retry inside the window: %s, want a replay", again.body)
		}
	}
	var nullKeys int64
	if err := in.Server.db.read.QueryRow(`SELECT COUNT(*) FROM reservations WHERE idempotency_key IS NULL`).Scan(&nullKeys); err != nil || nullKeys != 1 {
		t.Fatalf("%d reservations with the key cleared (%v), want 1", nullKeys, err)
	}
	again := send(t, in, req{method: "POST", path: "/reservations", key: "k", body: body})
	wantStatus(t, again, 201)
	if again.header.Get(HeaderReplayed) != "" || string(again.body) == string(first.body) {
		t.Fatal("a key used after the sweep must be a new request")
	}
	st := stats(t, in)
	if st.Effects.Reservations != 2 || st.Keys != 1 || st.DuplicateReferences != 1 {
		t.Fatalf("stats %+v: want 2 reservations under one live key, and their shared reference counted as a duplicate", st)
	}
	checkConsistent(t, in.Server)
}

func TestS6SweepSparesLiveLocks(t *testing.T) {
	clock := newFakeClock()
	in := start(t, Config{Now: clock.Now, Retention: time.Second, LockTimeout: time.Minute, SweepInterval: time.Hour})
	gw := blockGateway(in.Server)
	first := sendAsync(t, in, req{method: "POST", path: "/charges", key: "c1", body: chargeBody})
	<-gw.started

	clock.Advance(2 * time.Second) // expired, but its request holds a live lock
	if n, err := in.Server.Sweep(context.Background()); err != nil || n != 0 {
		t.Fatalf("Sweep = %d, %v; want the in-flight key kept", n, err)
	}
	close(gw.release)
	wantStatus(t, <-first, 201)
	if n, err := in.Server.Sweep(context.Background()); err != nil || n != 1 {
		t.Fatalf("Sweep after the request finished = %d, %v; want 1", n, err)
	}
	var cleared int64
	if err := in.Server.db.read.QueryRow(`SELECT COUNT(*) FROM charges WHERE idempotency_key IS NULL`).Scan(&cleared); err != nil || cleared != 1 {
		t.Fatalf("%d charges with the key cleared (%v), want 1", cleared, err)
	}
}

func TestS6BackgroundSweeper(t *testing.T) {
	clock := newFakeClock()
	in := start(t, Config{Now: clock.Now, Retention: time.Second, SweepInterval: 5 * time.Millisecond})
	stock(t, in, "sku-1", 1)
	if st := stats(t, in); st.Keys != 1 {
		t.Fatalf("keys %d, want 1", st.Keys)
	}
	clock.Advance(time.Second)
	waitFor(t, "the sweeper to delete the expired key", func() bool { return stats(t, in).Keys == 0 })
}

func TestConfigDefaults(t *testing.T) {
	c, err := Config{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.Retention != 24*time.Hour || c.SweepInterval != time.Hour || c.LockTimeout != 10*time.Second ||
		c.MaxBodyBytes != 64<<10 || c.BusyTimeout != 5*time.Second || c.Now == nil || c.Logger == nil {
		t.Fatalf("defaults %+v", c)
	}
	c, _ = Config{Retention: 30 * time.Second}.withDefaults()
	if c.SweepInterval != 3*time.Second {
		t.Fatalf("sweep interval for 30s retention %v, want 3s", c.SweepInterval)
	}
	c, _ = Config{Retention: time.Millisecond}.withDefaults()
	if c.SweepInterval != 10*time.Millisecond {
		t.Fatalf("sweep interval for 1ms retention %v, want the 10ms floor", c.SweepInterval)
	}
	for _, bad := range []Config{
		{Retention: -1},
		{LockTimeout: -1},
		{MaxBodyBytes: -1},
		{Faults: Faults{HangUpAfterCommit: 0.6, CrashAfterCommit: 0.6}},
		{Faults: Faults{DelayRate: -0.1}},
		{Faults: Faults{Gateway: GatewayFaults{Failure: 2}}},
	} {
		if _, err := New(bad); err == nil {
			t.Fatalf("New(%+v) succeeded, want ErrInvalidConfig", bad)
		} else if !errors.Is(err, ErrInvalidConfig) {
			t.Fatalf("New: %v, want ErrInvalidConfig", err)
		}
	}
}

// S6.4 (and S5): the sweeper never deletes a key whose request has not
// finished. Deleting it would let a retry start afresh under a new
// downstream key and capture the money a second time. Such a key is kept,
// however old, and counted in Stats.Abandoned for reconciliation.
func TestS6SweepKeepsUnfinishedKeys(t *testing.T) {
	const retention, lockTimeout = time.Minute, 5 * time.Second
	t.Run("holder still running", func(t *testing.T) {
		clock := newFakeClock()
		in := start(t, Config{Now: clock.Now, Retention: retention, LockTimeout: lockTimeout, SweepInterval: time.Hour})
		gw := blockGateway(in.Server)
		first := sendAsync(t, in, req{method: "POST", path: "/charges", key: "c1", body: chargeBody})
		<-gw.started

		clock.Advance(retention) // expired, and its lock is stale
		if n, err := in.Server.Sweep(context.Background()); err != nil || n != 0 {
			t.Fatalf("Sweep = %d, %v; want the unfinished key kept", n, err)
		}
		if st := stats(t, in); st.Keys != 1 || st.Abandoned != 1 {
			t.Fatalf("stats %+v, want the key kept and counted as abandoned", st)
		}
		close(gw.release)
		holder := <-first
		wantStatus(t, holder, http.StatusCreated)
		retry := send(t, in, req{method: "POST", path: "/charges", key: "c1", body: chargeBody})
		if retry.status != http.StatusCreated || retry.header.Get(HeaderReplayed) != "true" || string(retry.body) != string(holder.body) {
			t.Fatalf("retry: %d %s (replayed %q), want the holder's answer replayed", retry.status, retry.body, retry.header.Get(HeaderReplayed))
		}
		st := stats(t, in)
		if st.GatewayCaptures != 1 || st.Effects.Charges != 1 || st.Abandoned != 0 || st.InFlight != 0 {
			t.Fatalf("stats %+v, want one capture, one charge, nothing abandoned or in flight", st)
		}
		checkConsistent(t, in.Server)
	})
	t.Run("holder crashed after the gateway", func(t *testing.T) {
		path, clock := dbPath(t), newFakeClock()
		cfg := Config{Path: path, Now: clock.Now, Retention: retention, LockTimeout: lockTimeout, SweepInterval: time.Hour}
		crashing := cfg
		crashing.Faults = Faults{CrashAfterGateway: 1}
		faulty := start(t, crashing)
		if rep, err := try(t, faulty, req{method: "POST", path: "/charges", key: "c1", body: chargeBody}); err == nil {
			t.Fatalf("got %d %s, want the connection dropped by the crash", rep.status, rep.body)
		}
		if err := faulty.Close(); err != nil {
			t.Fatal(err)
		}

		in := start(t, cfg)
		clock.Advance(retention)
		if n, err := in.Server.Sweep(context.Background()); err != nil || n != 0 {
			t.Fatalf("Sweep = %d, %v; want the stale-locked unfinished key kept", n, err)
		}
		st := stats(t, in)
		if st.Keys != 1 || st.InFlight != 1 || st.Abandoned != 1 || st.GatewayCaptures != 1 || st.Effects.Charges != 0 {
			t.Fatalf("stats %+v, want the key kept, locked and abandoned, with its capture and no charge", st)
		}
		checkConsistent(t, in.Server)
		// A late retry resumes from gateway_called: no second capture.
		wantStatus(t, send(t, in, req{method: "POST", path: "/charges", key: "c1", body: chargeBody}), http.StatusCreated)
		st = stats(t, in)
		if st.GatewayCaptures != 1 || st.Effects.Charges != 1 || st.Abandoned != 0 || st.InFlight != 0 || st.Resumed != 1 {
			t.Fatalf("stats %+v, want one capture, one charge, one resume, nothing abandoned", st)
		}
		checkConsistent(t, in.Server)
	})
}
