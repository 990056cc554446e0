package testserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestCommandRejectsBadArguments(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		want   error
		stderr string
	}{
		{"help", []string{"-h"}, flag.ErrHelp, "-fault-crash-after-gateway"},
		{"unknown flag", []string{"-nope"}, ErrUsage, "flag provided but not defined"},
		{"bad duration", []string{"-retention", "soon"}, ErrUsage, "invalid value"},
		{"extra argument", []string{"serve"}, ErrUsage, "unexpected arguments: serve"},
		{"bad crash mode", []string{"-crash", "explode"}, ErrUsage, "-crash must be"},
		{"bad log level", []string{"-log-level", "loud"}, ErrUsage, "log-level"},
		{"rates above one", []string{"-db", ":memory:", "-addr", "127.0.0.1:0", "-fault-error", "0.7", "-fault-hang-up", "0.7"}, ErrUsage, "add up to"},
		{"negative retention", []string{"-db", ":memory:", "-addr", "127.0.0.1:0", "-retention", "-1s"}, ErrUsage, "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := Command(context.Background(), tt.args, &stdout, &stderr)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Command(%q) = %v, want %v", tt.args, err, tt.want)
			}
			if !strings.Contains(stderr.String(), tt.stderr) {
				t.Fatalf("stderr %q does not mention %q", stderr.String(), tt.stderr)
			}
			if stdout.Len() != 0 {
				t.Fatalf("stdout %q, want nothing", stdout.String())
			}
		})
	}
}

func TestCommandServesUntilItsContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	outR, outW := io.Pipe()
	var stderr lockedBuffer
	done := make(chan error, 1)
	go func() {
		done <- Command(ctx, []string{"-addr", "127.0.0.1:0", "-db", dbPath(t), "-retention", "1h"}, outW, &stderr)
		outW.Close()
	}()
	lines := bufio.NewScanner(outR)
	if !lines.Scan() {
		t.Fatalf("no output; stderr %s", stderr.String())
	}
	url, ok := strings.CutPrefix(lines.Text(), "listening on ")
	if !ok {
		t.Fatalf("first line %q", lines.Text())
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get(url + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /stats: %d", resp.StatusCode)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Command after cancel: %v", err)
	}
	io.Copy(io.Discard, outR)
	for _, want := range []string{"msg=serving", "msg=request", "path=/stats", "msg=\"shutting down\""} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, stderr.String())
		}
	}
}

// lockedBuffer is a bytes.Buffer safe for the server's and the test's
// goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// child is the server command running in a process of its own: this test
// binary, re-executed (see TestMain). -short skips the tests that start
// one.
type child struct {
	t      *testing.T
	cmd    *exec.Cmd
	url    string
	lines  chan string // stdout after the first line
	stderr *lockedBuffer
	exited chan struct{}
	err    error // from Wait, once exited is closed
}

func startChild(t *testing.T, args ...string) *child {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the server as a child process; -short skips the tests that do")
	}
	argsJSON, _ := json.Marshal(args)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(argsJSON))
	c := &child{t: t, cmd: cmd, lines: make(chan string, 16), stderr: &lockedBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = c.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	first := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for i := 0; sc.Scan(); i++ {
			if i == 0 {
				first <- sc.Text()
			} else {
				c.lines <- sc.Text()
			}
		}
		close(first)
		close(c.lines)
		c.err = cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-c.exited
	})
	select {
	case line := <-first:
		url, ok := strings.CutPrefix(line, "listening on ")
		if !ok {
			t.Fatalf("server said %q; stderr:\n%s", line, c.stderr.String())
		}
		c.url = url
	case <-time.After(30 * time.Second):
		t.Fatalf("server did not start; stderr:\n%s", c.stderr.String())
	}
	return c
}

// waitLine waits for a stdout line.
func (c *child) waitLine(want string) {
	c.t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case line, ok := <-c.lines:
			if !ok {
				c.t.Fatalf("server exited before saying %q; stderr:\n%s", want, c.stderr.String())
			}
			if line == want {
				return
			}
		case <-timeout:
			c.t.Fatalf("server did not say %q", want)
		}
	}
}

// wait waits for the process to exit and returns its exit status (-1 for
// a signal) and the signal.
func (c *child) wait() (int, syscall.Signal) {
	c.t.Helper()
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		c.t.Fatal("server did not exit")
	}
	ws := c.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return -1, ws.Signal()
	}
	return ws.ExitStatus(), 0
}

// childClient sends one request per connection, so that no retry of the
// transport hides a dropped connection.
func childClient(t *testing.T) *http.Client {
	tr := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

func postTo(t *testing.T, client *http.Client, url string, r req) (reply, error) {
	return do(client, r.build(t, url))
}

func TestCommandStopsCleanlyOnSignals(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			c := startChild(t, "-addr=127.0.0.1:0", "-db="+dbPath(t))
			rep, err := postTo(t, childClient(t), c.url, req{method: "PUT", path: "/inventory/sku-1", key: "k", body: `{"available":1}`})
			if err != nil || rep.status != 200 {
				t.Fatalf("PUT: %d %v", rep.status, err)
			}
			c.cmd.Process.Signal(sig)
			if code, s := c.wait(); code != 0 {
				t.Fatalf("exit status %d (signal %v), want 0; stderr:\n%s", code, s, c.stderr.String())
			}
			if !strings.Contains(c.stderr.String(), "shutting down") {
				t.Fatalf("stderr:\n%s", c.stderr.String())
			}
		})
	}
}

// The server process is killed between the gateway's capture and the commit
// that records the charge, restarted on the same file, and the client
// retries with the same key: exactly one capture and one charge.
func TestKilledServerChargesExactlyOnce(t *testing.T) {
	tests := []struct {
		name   string
		fault  string
		mode   string // hang: the test sends SIGKILL; exit: the server exits by itself
		point  string
		gwCall bool // whether the retry calls the gateway again (it answers from its store)
	}{
		{"SIGKILL after the gateway call", "-fault-crash-after-gateway=1", "hang", CrashPointAfterGateway, true},
		{"SIGKILL inside the final transaction", "-fault-crash-before-commit=1", "hang", CrashPointBeforeCommit, false},
		{"exit 137 after the gateway call", "-fault-crash-after-gateway=1", "exit", CrashPointAfterGateway, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "kill.db")
			client := childClient(t)
			r := req{method: "POST", path: "/charges", key: "8e03978e-40d5-43e8-bc93-6894a57f9324", client: "shop", body: chargeBody}

			// The claim's lease is the holder's -lock-timeout: short here,
			// so the retry below waits out a second, not the default ten.
			first := startChild(t, "-addr=127.0.0.1:0", "-db="+db, "-log-level=warn", "-lock-timeout=1s", tt.fault, "-crash="+tt.mode)
			lost := make(chan error, 1)
			go func() {
				_, err := postTo(t, client, first.url, r)
				lost <- err
			}()
			if tt.mode == "hang" {
				first.waitLine("crash point " + tt.point + " reached")
				if err := first.cmd.Process.Kill(); err != nil {
					t.Fatal(err)
				}
				if _, sig := first.wait(); sig != syscall.SIGKILL {
					t.Fatalf("server not killed by SIGKILL (%v)", sig)
				}
			} else if code, _ := first.wait(); code != CrashExitCode {
				t.Fatalf("exit status %d, want %d; stderr:\n%s", code, CrashExitCode, first.stderr.String())
			}
			if err := <-lost; err == nil {
				t.Fatal("the request that crashed the server got an answer")
			}

			second := startChild(t, "-addr=127.0.0.1:0", "-db="+db, "-log-level=info", "-lock-timeout=1s")
			var rep reply
			conflicts := 0
			deadline := time.Now().Add(10 * time.Second)
			for {
				var err error
				rep, err = postTo(t, client, second.url, r)
				if err != nil {
					t.Fatal(err)
				}
				if rep.status != http.StatusConflict || time.Now().After(deadline) {
					break
				}
				// The dead process's claim: wait out its one-second lease,
				// polling faster than Retry-After says.
				conflicts++
				if rep.header.Get("Retry-After") == "" {
					t.Fatal("409 without Retry-After")
				}
				time.Sleep(20 * time.Millisecond)
			}
			wantStatus(t, rep, http.StatusCreated)
			if rep.header.Get(HeaderReplayed) != "" {
				t.Fatal("the first complete answer is not a replay")
			}

			statsRep, err := postTo(t, client, second.url, req{method: "GET", path: "/stats"})
			if err != nil {
				t.Fatal(err)
			}
			st := decode[Stats](t, statsRep)
			if st.GatewayCaptures != 1 || st.Effects.Charges != 1 || st.Resumed != 1 || st.InFlight != 0 || st.Conflicts != int64(conflicts) {
				t.Fatalf("stats %+v after %d conflicts; want one capture, one charge, one resumed request", st, conflicts)
			}
			if replayed := strings.Contains(second.stderr.String(), "gateway replayed capture"); replayed != tt.gwCall {
				t.Fatalf("gateway called again: %v, want %v", replayed, tt.gwCall)
			}
			again, err := postTo(t, client, second.url, r)
			if err != nil || again.header.Get(HeaderReplayed) != "true" || string(again.body) != string(rep.body) {
				t.Fatalf("retry after success: %d %s (%v), want the replay", again.status, again.body, err)
			}
			second.cmd.Process.Signal(syscall.SIGTERM)
			if code, _ := second.wait(); code != 0 {
				t.Fatalf("exit status %d; stderr:\n%s", code, second.stderr.String())
			}
		})
	}
}

func TestCommandFlagsFillTheConfig(t *testing.T) {
	var stdout, stderr bytes.Buffer
	cfg, addr, err := parseArgs([]string{
		"-addr", "127.0.0.1:9", "-db", "x.db", "-retention", "1m", "-sweep-interval", "2s", "-lock-timeout", "3s",
		"-max-body", "100", "-read-timeout", "6s", "-write-timeout", "7s", "-idle-timeout", "8s",
		"-seed", "7", "-faults", "0.35", "-fault-delay", "5ms",
		"-gateway-failure", "0.1", "-gateway-lost-response", "0.2", "-gateway-delay", "4ms", "-crash", "abort",
	}, &stdout, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	want := UniformFaults(0.35, 7)
	want.Delay = 5 * time.Millisecond
	want.Gateway = GatewayFaults{Failure: 0.1, LostResponse: 0.2, Delay: 4 * time.Millisecond}
	if addr != "127.0.0.1:9" || cfg.Path != "x.db" || cfg.Retention != time.Minute || cfg.SweepInterval != 2*time.Second ||
		cfg.LockTimeout != 3*time.Second || cfg.MaxBodyBytes != 100 || cfg.ReadTimeout != 6*time.Second ||
		cfg.WriteTimeout != 7*time.Second || cfg.IdleTimeout != 8*time.Second || cfg.Faults != want || cfg.Crash != nil || cfg.Logger == nil {
		t.Fatalf("parsed %q %+v", addr, cfg)
	}

	cfg, _, err = parseArgs([]string{"-fault-error", "0.1", "-fault-hang-up", "0.2", "-fault-bad-gateway", "0.05",
		"-fault-crash-before-commit", "0.01", "-fault-crash-after-commit", "0.02", "-fault-crash-after-gateway", "0.03",
		"-fault-delay-rate", "0.04"}, &stdout, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	want = Faults{ErrorBeforeCommit: 0.1, HangUpAfterCommit: 0.2, BadGatewayAfterCommit: 0.05, CrashBeforeCommit: 0.01,
		CrashAfterCommit: 0.02, CrashAfterGateway: 0.03, DelayRate: 0.04, Delay: DefaultFaultDelay}
	if cfg.Faults != want || cfg.Crash == nil || cfg.Path != "idem-testserver.db" || cfg.LockTimeout != DefaultLockTimeout ||
		cfg.ReadTimeout != DefaultReadTimeout || cfg.WriteTimeout != DefaultWriteTimeout || cfg.IdleTimeout != DefaultIdleTimeout {
		t.Fatalf("parsed %+v", cfg)
	}
}
