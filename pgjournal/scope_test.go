package pgjournal_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/journal"
	"github.com/idemkit/idem/lab/testkit/pgtest"
	"github.com/idemkit/idem/pgjournal"
)

// isForget reports whether sql is the statement that deletes a row
// Forget or ForgetCompleted claimed.
func isForget(sql string) bool { return strings.HasPrefix(sql, "DELETE FROM idem_operations") }

// postBody returns a POST of body to s.
func postBody(t testing.TB, ctx context.Context, s *server, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/charges", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// TestAForgetIsScopedByTheKey is F5.6: ForgetCompleted of operation x
// under key K1 deletes x only while it is still completed under K1. Here
// machine a reads x completed under K1 and, before a's delete reaches the
// database, machine b forgets x under K1 and runs it again to completion
// under K2: a's delete then finds no completed x under K1, keeps b's
// outcome, and says so with journal.ErrNoSuchOperation.
func TestAForgetIsScopedByTheKey(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	tr := &tracer{}
	a := tracedJournal(t, dsn, pgjournal.Options{Owner: "a"}, tr)
	b := openJournal(t, dsn, pgjournal.Options{Owner: "b"})
	s := newServer(t)
	cb := client(t, b)
	ctx := context.Background()
	do := func() journal.Operation {
		t.Helper()
		resp, err := cb.Do("x", s.post(t, ctx))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		op, ok, err := b.Lookup(ctx, "x")
		if err != nil || !ok || op.State != journal.StateDone {
			t.Fatalf("Lookup(x) after Do = %+v, %v, %v; want it done", op, ok, err)
		}
		return op
	}
	first := do()
	var (
		once   sync.Once
		second journal.Operation
	)
	tr.before = func(sql string) {
		if !isForget(sql) {
			return
		}
		once.Do(func() {
			if err := b.ForgetCompleted(ctx, "x", first.Key); err != nil {
				t.Errorf("b's ForgetCompleted(x, K1): %v", err)
			}
			second = do()
		})
	}
	err := a.ForgetCompleted(ctx, "x", first.Key)
	if !errors.Is(err, journal.ErrNoSuchOperation) {
		t.Errorf("a's ForgetCompleted(x, K1) after b ran x again under K2 = %v, want ErrNoSuchOperation", err)
	}
	if second.Key == "" || second.Key == first.Key {
		t.Fatalf("b ran x again under key %q, want a new key (the first was %q)", second.Key, first.Key)
	}
	op, ok, err := a.Lookup(ctx, "x")
	if err != nil || !ok || op.Key != second.Key || op.State != journal.StateDone || op.Status != http.StatusCreated {
		t.Fatalf("x after a's ForgetCompleted under K1 = %+v, %v, %v; want b's outcome under K2 %s, kept", op, ok, err, second.Key)
	}
	if n, _ := s.requests(); n != 2 {
		t.Fatalf("the server got %d requests, want 2 (K1, then K2)", n)
	}
}

// TestAResendIsScopedByTheKey is F5.6 through Do: machine a's Do with
// CallOptions.Resend finds x refused (400) under K1 and forgets it; before
// a's delete reaches the database, machine b resends x first and gets 201
// under K2. a's forget then keeps b's outcome, and a's Do answers with it,
// recorded, sending nothing: the server sees K1 and K2, once each.
func TestAResendIsScopedByTheKey(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	tr := &tracer{}
	a := tracedJournal(t, dsn, pgjournal.Options{Owner: "a"}, tr)
	b := openJournal(t, dsn, pgjournal.Options{Owner: "b"})
	s := newServer(t)
	var refuse sync.Once
	s.hold = func(*http.Request) int {
		status := 0
		refuse.Do(func() { status = http.StatusBadRequest })
		return status
	}
	ca, cb := client(t, a), client(t, b)
	ctx := context.Background()
	resend := idem.WithCallOptions(ctx, idem.CallOptions{Resend: func(journal.Operation) bool { return true }})
	if _, err := cb.Do("x", s.post(t, ctx)); !errors.Is(err, idem.ErrRejected) {
		t.Fatalf("the first Do of x = %v, want it rejected (400)", err)
	}
	refused, ok, err := b.Lookup(ctx, "x")
	if err != nil || !ok || refused.State != journal.StateRejected {
		t.Fatalf("Lookup(x) = %+v, %v, %v; want it rejected", refused, ok, err)
	}
	var once sync.Once
	tr.before = func(sql string) {
		if !isForget(sql) {
			return
		}
		once.Do(func() {
			resp, err := cb.Do("x", s.post(t, resend))
			if err != nil {
				t.Errorf("b's resend of x: %v", err)
				return
			}
			resp.Body.Close()
		})
	}
	resp, err := ca.Do("x", s.post(t, resend))
	if err != nil {
		t.Fatalf("a's resend of x, after b's: %v; want b's outcome", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || !idem.Recorded(resp) {
		t.Errorf("a's resend of x answered %d, recorded %v; want b's 201 from the journal", resp.StatusCode, idem.Recorded(resp))
	}
	op, ok, err := a.Lookup(ctx, "x")
	if err != nil || !ok || op.Key == refused.Key || op.State != journal.StateDone || op.Status != http.StatusCreated {
		t.Fatalf("x after both resends = %+v, %v, %v; want b's 201 under a new key", op, ok, err)
	}
	if n, keys := s.requests(); n != 2 || len(keys) != 2 {
		t.Fatalf("the server got %d requests under keys %v, want 2: K1 refused, then b's K2", n, keys)
	}
}

// TestAnotherRequestUnderAnOperationIsAMismatch is F10.8, C5 through
// ClaimBegin: a Do of an operation the journal holds, done, rejected or
// pending, with another body than the one journaled, fails with
// idem.ErrMismatch and sends nothing, on the machine that ran it and on
// another, as on the file journal: the row the one statement reports (or
// the claim reads, for a pending one) carries its own fingerprint, which
// the statement leaves as it was.
func TestAnotherRequestUnderAnOperationIsAMismatch(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	a := openJournal(t, dsn, pgjournal.Options{Owner: "a"})
	b := openJournal(t, dsn, pgjournal.Options{Owner: "b"})
	s := newServer(t)
	s.hold = func(r *http.Request) int {
		switch r.Header.Get("X-Answer") {
		case "400":
			return http.StatusBadRequest
		case "503":
			return http.StatusServiceUnavailable
		}
		return 0
	}
	ca, cb := client(t, a), client(t, b)
	ctx := context.Background()
	for _, tc := range []struct {
		id, answer string
		state      journal.State
	}{
		{"done", "", journal.StateDone},
		{"rejected", "400", journal.StateRejected},
		{"pending", "503", journal.StatePending},
	} {
		req := postBody(t, ctx, s, `{"amount":1}`)
		req.Header.Set("X-Answer", tc.answer)
		if resp, err := ca.Do(tc.id, req); err == nil {
			resp.Body.Close()
		}
		op, ok, err := a.Lookup(ctx, tc.id)
		if err != nil || !ok || op.State != tc.state {
			t.Fatalf("Lookup(%s) = %+v, %v, %v; want it %v", tc.id, op, ok, err, tc.state)
		}
		before, _ := s.requests()
		for _, m := range []struct {
			name string
			c    *idem.Client
		}{{"a", ca}, {"b", cb}} {
			resp, err := m.c.Do(tc.id, postBody(t, ctx, s, `{"amount":2}`))
			if resp != nil {
				resp.Body.Close()
			}
			if !errors.Is(err, idem.ErrMismatch) {
				t.Errorf("%s's Do of %s operation %s with another body = %v, want ErrMismatch", m.name, tc.state, tc.id, err)
			}
		}
		if after, _ := s.requests(); after != before {
			t.Errorf("%s: the server got %d requests for Dos with another body, want none", tc.id, after-before)
		}
		if got, ok, err := b.Lookup(ctx, tc.id); err != nil || !ok || got.Key != op.Key || got.State != op.State || got.Fingerprint != op.Fingerprint {
			t.Errorf("Lookup(%s) after the mismatches = %+v, %v, %v; want it unchanged, %+v", tc.id, got, ok, err, op)
		}
	}
}
