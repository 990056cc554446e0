package idem_test

// Clauses that hold in every state an operation can be in (pending, done,
// rejected), in the process that ran it and in one that reopened its
// journal, and through every form of the client (Do, StandardClient).

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/journal"
)

// C5.1, C5.2, C4.1: an operation ID presented with another method, URL or
// body is refused with ErrMismatch and nothing is sent, whether the
// operation is pending, done or rejected, before and after a restart,
// through Do and StandardClient; the same request is still answered (done
// and rejected from the journal, pending by a resend).
func TestMismatchRefusedInEveryState(t *testing.T) {
	for _, tc := range []struct {
		state  journal.State
		answer step
	}{
		{journal.StatePending, status(503, "busy")},
		{journal.StateDone, status(201, "made")},
		{journal.StateRejected, status(422, "invalid")},
	} {
		for _, restart := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v, restarted %v", tc.state, restart), func(t *testing.T) {
				s := newScript(t, tc.answer)
				path := filepath.Join(t.TempDir(), "j")
				j := openJournal(t, path)
				c := newClient(t, fast(idem.Config{Journal: j, MaxAttempts: 1}))
				resp, err := c.Do("op", post(t, context.Background(), s.srv.URL+"/a", "body"))
				if err == nil {
					resp.Body.Close()
				}
				if op, _ := lookup(j, "op"); op.State != tc.state {
					t.Fatalf("the operation is %v, want %v", op.State, tc.state)
				}
				if restart {
					j.Close()
					j = openJournal(t, path)
					c = newClient(t, fast(idem.Config{Journal: j, MaxAttempts: 1}))
				}
				defer j.Close()
				others := []func() *http.Request{
					func() *http.Request { return post(t, context.Background(), s.srv.URL+"/a", "another body") },
					func() *http.Request { return post(t, context.Background(), s.srv.URL+"/b", "body") },
					func() *http.Request {
						r := post(t, context.Background(), s.srv.URL+"/a", "body")
						r.Method = http.MethodPut
						return r
					},
				}
				for i, other := range others {
					if _, err := c.Do("op", other()); !errors.Is(err, idem.ErrMismatch) {
						t.Fatalf("Do of change %d: %v, want ErrMismatch", i, err)
					}
					req := other()
					req = req.WithContext(idem.WithOperation(req.Context(), "op"))
					if _, err := c.StandardClient().Do(req); !errors.Is(err, idem.ErrMismatch) {
						t.Fatalf("StandardClient, change %d: %v, want ErrMismatch", i, err)
					}
				}
				if n := s.count(); n != 1 {
					t.Fatalf("the server saw %d requests, want the first alone", n)
				}
				resp, err = c.Do("op", post(t, context.Background(), s.srv.URL+"/a", "body"))
				if err == nil {
					resp.Body.Close()
				}
				want := 1 // answered from the journal
				if tc.state == journal.StatePending {
					want = 2 // resent
				}
				if errors.Is(err, idem.ErrMismatch) || s.count() != want {
					t.Fatalf("the same request: %v after %d requests, want it answered after %d", err, s.count(), want)
				}
			})
		}
	}
}

// C12.2, C12.3: without an operation in its context, a GET, HEAD or
// OPTIONS request passes through StandardClient and RoundTripper once,
// without a key and without the journal, even when the server fails; a
// POST, PUT, PATCH or DELETE gets a key of its own, the same on its
// retries. With an operation, a GET is an operation like any other.
func TestSafeMethodsPassThroughWithoutAKey(t *testing.T) {
	for _, method := range []string{http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodPost,
		http.MethodPut, http.MethodPatch, http.MethodDelete} {
		safe := method == http.MethodGet || method == http.MethodHead || method == http.MethodOptions
		for _, form := range []string{"StandardClient", "RoundTripper"} {
			t.Run(method+"/"+form, func(t *testing.T) {
				s := newScript(t, status(503, ""), status(200, ""))
				j := openJournal(t, filepath.Join(t.TempDir(), "j"))
				defer j.Close()
				c := newClient(t, fast(idem.Config{Journal: j}))
				hc := c.StandardClient()
				if form == "RoundTripper" {
					hc = &http.Client{Transport: c.RoundTripper()}
				}
				req, err := http.NewRequest(method, s.srv.URL, nil)
				if err != nil {
					t.Fatal(err)
				}
				resp, err := hc.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				seen := s.attempts()
				if safe {
					if resp.StatusCode != 503 || len(seen) != 1 || seen[0].Key != "" {
						t.Fatalf("%d after %d requests, keys %v: want the 503, sent once without a key", resp.StatusCode, len(seen), seen)
					}
				} else if resp.StatusCode != 200 || len(seen) != 2 || !uuidV4.MatchString(seen[0].Key) || seen[1].Key != seen[0].Key {
					t.Fatalf("%d after %d requests, keys %v: want two attempts under one key", resp.StatusCode, len(seen), seen)
				}
				if ops := list(j, journal.ListAll); len(ops) != 0 {
					t.Fatalf("the journal holds %v, want nothing: no operation was named", ops)
				}
			})
		}
	}
	t.Run("GET with an operation", func(t *testing.T) {
		s := newScript(t, status(503, ""), status(200, "got"))
		j := openJournal(t, filepath.Join(t.TempDir(), "j"))
		defer j.Close()
		hc := newClient(t, fast(idem.Config{Journal: j})).StandardClient()
		for range 2 {
			req, _ := http.NewRequestWithContext(idem.WithOperation(context.Background(), "read"), http.MethodGet, s.srv.URL, nil)
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if got := readAll(t, resp); resp.StatusCode != 200 || got != "got" {
				t.Fatalf("%d %q, want 200 got", resp.StatusCode, got)
			}
		}
		seen := s.attempts()
		op, _ := lookup(j, "read")
		if len(seen) != 2 || seen[0].Key != op.Key || seen[1].Key != op.Key || op.State != journal.StateDone {
			t.Fatalf("keys %v, journal %v %s: want two attempts under the journaled key, then the answer from the journal", seen, op.State, op.Key)
		}
	})
}

// C14.1, C14.2: every credential or session field a response carries is
// left out of the recorded outcome, and Operation.Unrecorded names them
// (the replayed response names them nowhere), for a done and for a rejected outcome, read in the same process
// and after a restart; challenges (WWW-Authenticate) are kept.
func TestEveryCredentialHeaderUnrecorded(t *testing.T) {
	credentials := []string{"Set-Cookie", "Set-Cookie2", "Cookie", "Authorization", "Proxy-Authorization",
		"Authentication-Info", "Proxy-Authentication-Info"}
	for _, code := range []int{201, 401} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			header := []string{"WWW-Authenticate", "Bearer", "X-Request-Id", "r-1"}
			for _, name := range credentials {
				header = append(header, name, "s3cret-"+strings.ToLower(name))
			}
			s := newScript(t, status(code, "answer", header...))
			path := filepath.Join(t.TempDir(), "j")
			j := openJournal(t, path)
			c := newClient(t, fast(idem.Config{Journal: j}))
			resp, err := c.Do("op", post(t, context.Background(), s.srv.URL, "x"))
			live := statusOf(t, resp, err)
			check := func(when string, h http.Header, unrecorded []string) {
				t.Helper()
				for _, name := range credentials {
					if v := h.Values(name); v != nil {
						t.Errorf("%s: %s recorded: %q", when, name, v)
					}
				}
				sorted := slices.Sorted(slices.Values(credentials))
				if !slices.Equal(unrecorded, sorted) || h.Get("Idem-Unrecorded-Headers") != "" {
					t.Errorf("%s: unrecorded %q (header %v), want %q and no such header", when, unrecorded, h, sorted)
				}
				if h.Get("WWW-Authenticate") != "Bearer" || h.Get("X-Request-Id") != "r-1" {
					t.Errorf("%s: the other fields are not all kept: %v", when, h)
				}
			}
			op, _ := lookup(j, "op")
			check("the same process", op.Header, op.Unrecorded)
			j.Close()
			j = openJournal(t, path)
			defer j.Close()
			op, _ = lookup(j, "op")
			check("after a restart", op.Header, op.Unrecorded)
			c = newClient(t, fast(idem.Config{Journal: j}))
			resp, err = c.Do("op", post(t, context.Background(), s.srv.URL, "x"))
			var replayed http.Header
			if err == nil {
				replayed = resp.Header
				resp.Body.Close()
			} else if oe := (*idem.OutcomeError)(nil); errors.As(err, &oe) {
				replayed = oe.Header
			}
			check("the replay", replayed, slices.Sorted(slices.Values(credentials)))
			if live != code || s.count() != 1 {
				t.Fatalf("status %d after %d requests, want %d after 1", live, s.count(), code)
			}
		})
	}
}

func TestStateString(t *testing.T) {
	for s, want := range map[journal.State]string{journal.StatePending: "pending", journal.StateDone: "done", journal.StateRejected: "rejected", 0: "State(0)", 9: "State(9)"} {
		if got := s.String(); got != want {
			t.Errorf("State(%d).String() = %q, want %q", uint8(s), got, want)
		}
	}
}
