package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// idem chaos balances over its upstreams in turn, prints its URL first
// and its counts last, and stops cleanly when its context ends.
func TestChaosBalancesOverItsUpstreams(t *testing.T) {
	var ups []string
	for i := range 2 {
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, strconv.Itoa(i))
		}))
		defer up.Close()
		ups = append(ups, up.URL)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := start(t, ctx, "chaos", "-addr", "127.0.0.1:0", "-upstream", ups[0], "-upstream", ups[1])
	url := cmd.url

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	var got []string
	for range 3 {
		resp, err := hc.Post(url+"/reservations", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, resp.Status[:3]+":"+string(b))
	}
	if want := "201:0,201:1,201:0"; strings.Join(got, ",") != want {
		t.Fatalf("answers %s, want %s", strings.Join(got, ","), want)
	}
	cancel()
	if code := <-cmd.codes; code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, cmd.stderr.String())
	}
	want := "counts: requests=3 forwarded=3 upstream-errors=0 faults=0 upstreams [" +
		ups[0] + " forwarded=2 upstream-errors=0, " + ups[1] + " forwarded=1 upstream-errors=0]\n"
	if out := <-cmd.rest; out != want {
		t.Fatalf("after the URL: %q, want %q", out, want)
	}
	if cmd.stderr.Len() != 0 {
		t.Errorf("stderr %q, want nothing", cmd.stderr.String())
	}
}

// idem chaos refuses what it cannot run with exit 2 and one line.
func TestChaosRefusesBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "idem chaos: -upstream is required"},
		{[]string{"-upstream", "http://a", "x"}, `idem chaos: unexpected arguments ["x"]`},
		{[]string{"-upstream", "http://a", "-balance", "least-conn"}, `idem chaos: -balance: "least-conn" is not round-robin or random`},
		{[]string{"-upstream", "http://a,http://a"}, `idem chaos: Upstreams[1] "http://a" is listed twice`},
		{[]string{"-upstream", "ftp://a"}, `idem chaos: Upstreams[0] scheme "ftp" is not http or https`},
		{[]string{"-upstream", "http://a", "-kinds", "reset,lost"}, `idem chaos: -kinds: "lost" is no fault kind`},
		{[]string{"-upstream", "http://a", "-rate", "1.5"}, `idem chaos: Rate 1.5 is outside [0, 1]`},
		{[]string{"-upstream", "http://a", "-log-level", "loud"}, `idem chaos: -log-level: "loud" is not debug, info, warn or error`},
		{[]string{"-upstream", "http://a", "-bogus"}, `idem chaos: flag provided but not defined: -bogus`},
	} {
		var stdout, stderr bytes.Buffer
		code := runEnv(context.Background(), env{stdout: &stdout, stderr: &stderr, now: time.Now}, append([]string{"chaos"}, tc.args...))
		first, _, _ := strings.Cut(stderr.String(), "\n")
		if code != exitUsage || first != tc.want || stdout.Len() != 0 {
			t.Errorf("%q: exit %d, stderr %q, stdout %q; want exit 2 and %q", tc.args, code, stderr.String(), stdout.String(), tc.want)
		}
	}
}

// idem chaos -dialect answers its in-flight fault in the upstream's
// dialect (S4.9): Checkout.com's 429, with Retry-After.
func TestChaosAnswersInFlightInTheDialect(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusCreated)
	}))
	defer up.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := start(t, ctx, "chaos", "-addr", "127.0.0.1:0", "-upstream", up.URL, "-dialect", "checkout",
		"-rate", "1", "-kinds", "in-flight", "-retry-after", "3s")
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Post(cmd.url+"/payments", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "3" {
		t.Fatalf("got %s with Retry-After %q, want 429 with 3", resp.Status, resp.Header.Get("Retry-After"))
	}
	cancel()
	if code := <-cmd.codes; code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, cmd.stderr.String())
	}
	var stdout, stderr bytes.Buffer
	code := runEnv(context.Background(), env{stdout: &stdout, stderr: &stderr, now: time.Now}, []string{"chaos", "-upstream", "http://a", "-dialect", "klingon"})
	if first, _, _ := strings.Cut(stderr.String(), "\n"); code != exitUsage || !strings.HasPrefix(first, `idem chaos: -dialect: "klingon" is none of `) {
		t.Fatalf("-dialect klingon: exit %d, stderr %q", code, stderr.String())
	}
}
