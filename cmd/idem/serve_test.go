package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/lab/testkit/pgtest"
	"github.com/idemkit/idem/testserver"
)

// idem serve listens where -addr says, prints its URL, serves a charge
// and the stats, and stops cleanly when its context ends.
// It does so on a SQLite file and on a PostgreSQL database alike.
func TestServeServesAndStopsOnCancel(t *testing.T) {
	for _, store := range []struct {
		name  string
		newDB func(testing.TB) string
	}{
		{"sqlite", func(t testing.TB) string { return filepath.Join(t.TempDir(), "serve.db") }},
		{"postgres", pgtest.NewDatabase},
	} {
		t.Run(store.name, func(t *testing.T) {
			db := store.newDB(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cmd := start(t, ctx, "serve", "-addr", "127.0.0.1:0", "-db", db)
			url, stderr := cmd.url, cmd.stderr

			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			req, err := http.NewRequest(http.MethodPost, url+"/charges", strings.NewReader(`{"customer":"c1","amount":1200,"currency":"usd","reference":"invoice-42"}`))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(testserver.HeaderIdempotencyKey, "5b0b6f0e-4f7e-4b8e-9a51-0f7f1c1c2a42")
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var charge testserver.Charge
			err = json.NewDecoder(resp.Body).Decode(&charge)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusCreated || charge.Reference != "invoice-42" || charge.Amount != 1200 {
				t.Fatalf("POST /charges: status %d, charge %+v (%v); want 201 and the charge", resp.StatusCode, charge, err)
			}
			resp, err = hc.Get(url + "/stats")
			if err != nil {
				t.Fatal(err)
			}
			var st testserver.Stats
			err = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
			if err != nil || st.Requests != 1 || st.Effects.Charges != 1 || st.GatewayCaptures != 1 {
				t.Fatalf("GET /stats: %+v (%v); want 1 request, 1 charge, 1 capture", st, err)
			}

			cancel()
			select {
			case code := <-cmd.codes:
				if code != exitOK {
					t.Errorf("exit code %d after cancel, want 0; stderr:\n%s", code, stderr.String())
				}
			case <-time.After(time.Minute):
				t.Fatal("idem serve did not stop within a minute of its context ending")
			}
			if r := <-cmd.rest; r != "" {
				t.Errorf("stdout after the first line: %q, want nothing", r)
			}
			for _, w := range []string{`msg=serving url=` + url, `msg="shutting down"`} {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr.String())
				}
			}
		})
	}
}

func TestServeHelpAndUsage(t *testing.T) {
	r := runCLI(t, "serve", "-h")
	if r.code != exitOK || r.stderr != "" || !strings.HasPrefix(r.stdout, "Usage: idem serve [flags]\n") {
		t.Errorf("serve -h: exit code %d, stderr %q, stdout:\n%s\nwant 0, nothing, and the usage", r.code, r.stderr, r.stdout)
	}
	// The flags are idem-testserver's, every one of them.
	for _, f := range []string{"-addr", "-db", "-retention", "-sweep-interval", "-lock-timeout", "-max-body", "-read-timeout", "-write-timeout", "-idle-timeout", "-faults", "-seed", "-fault-error", "-crash", "-log-level", "-gateway-failure"} {
		if !strings.Contains(r.stdout, "  "+f+" ") {
			t.Errorf("serve -h lacks the flag %s:\n%s", f, r.stdout)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-bogus"}, "flag provided but not defined: -bogus\nUsage: idem serve [flags]\n"},
		{[]string{"-faults", "2", "-addr", "127.0.0.1:0", "-db", ":memory:"}, "testserver: invalid config"},
		{[]string{"-crash", "maybe"}, "-crash must be exit, abort or hang, not \"maybe\"\n"},
		{[]string{"extra"}, "unexpected arguments: extra\n"},
	} {
		r := runCLI(t, append([]string{"serve"}, tc.args...)...)
		if r.code != exitUsage || r.stdout != "" || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("serve %q: exit code %d, stdout %q, stderr:\n%s\nwant %d, nothing, and %q", tc.args, r.code, r.stdout, r.stderr, exitUsage, tc.want)
		}
	}
}

// A PostgreSQL that cannot be reached is an error that says so, not a
// usage error.
func TestServeDatabaseUnavailable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	r := runCLI(t, "serve", "-addr", "127.0.0.1:0", "-db", "postgres://idem@"+addr+"/idem?sslmode=disable&connect_timeout=5")
	if r.code != exitFailure || r.stdout != "" || !strings.HasPrefix(r.stderr, "idem serve: testserver: PostgreSQL at postgres://idem@"+addr+"/idem") ||
		!strings.Contains(r.stderr, "database unavailable") {
		t.Errorf("exit code %d, stdout %q, stderr %q; want %d and the database named unavailable", r.code, r.stdout, r.stderr, exitFailure)
	}
}

// A server that cannot listen is an error, not a usage error.
func TestServeCannotListen(t *testing.T) {
	r := runCLI(t, "serve", "-addr", "256.0.0.1:0", "-db", ":memory:")
	if r.code != exitFailure || r.stdout != "" || !strings.HasPrefix(r.stderr, "idem serve: testserver: listening on 256.0.0.1:0: ") {
		t.Errorf("exit code %d, stdout %q, stderr %q; want %d and the listen error", r.code, r.stdout, r.stderr, exitFailure)
	}
}
