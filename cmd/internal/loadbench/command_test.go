package loadbench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseArgsDefaults(t *testing.T) {
	var stderr bytes.Buffer
	o, err := parseArgs(nil, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	c := o.cfg
	if c.Duration != 2*time.Second || c.Warmup != 300*time.Millisecond || c.Runs != 3 || c.FsyncSamples != 200 || c.Dir != "" {
		t.Errorf("config %+v: want 2s cells, 300ms warm-up, 3 runs, 200 fsyncs, no directory", c)
	}
	if !slices.Equal(c.Concurrency, []int{1, 16, 64}) || !slices.Equal(c.Targets, AllTargets) || !slices.Equal(c.Clients, AllClients) {
		t.Errorf("grid %v %v %v: want 1,16,64 and every target and client", c.Concurrency, c.Targets, c.Clients)
	}
	if o.json || o.save != "" || !o.progress || o.cpuProfile != "" || o.memProfile != "" || o.trace != "" {
		t.Errorf("options %+v: want a table, progress on a terminal, no profiles", o)
	}
	if stderr.Len() != 0 {
		t.Errorf("stderr %q, want nothing", stderr.String())
	}
}

func TestParseArgsEveryFlag(t *testing.T) {
	o, err := parseArgs([]string{
		"-duration", "5s", "-warmup", "1s", "-runs", "5", "-concurrency", "2, 8",
		"-targets", "trivial,server", "-clients", "net/http,idem+journal", "-dir", "/var/tmp/x",
		"-fsyncs", "50", "-json", "-save", "r.json", "-progress=false", "-cpuprofile", "cpu.out", "-memprofile", "mem.out",
		"-trace", "trace.out",
	}, new(bytes.Buffer))
	if err != nil {
		t.Fatal(err)
	}
	want := options{
		cfg: Config{Duration: 5 * time.Second, Warmup: time.Second, Runs: 5, Concurrency: []int{2, 8},
			Targets: []Target{TargetTrivial, TargetServer}, Clients: []Client{ClientNetHTTP, ClientIdemJournal},
			Dir: "/var/tmp/x", FsyncSamples: 50},
		json: true, save: "r.json", cpuProfile: "cpu.out", memProfile: "mem.out", trace: "trace.out",
	}
	if o.cfg.Duration != want.cfg.Duration || o.cfg.Warmup != want.cfg.Warmup || o.cfg.Runs != want.cfg.Runs ||
		!slices.Equal(o.cfg.Concurrency, want.cfg.Concurrency) || !slices.Equal(o.cfg.Targets, want.cfg.Targets) ||
		!slices.Equal(o.cfg.Clients, want.cfg.Clients) || o.cfg.Dir != want.cfg.Dir || o.cfg.FsyncSamples != want.cfg.FsyncSamples ||
		o.json != want.json || o.save != want.save || o.progress != want.progress || o.cpuProfile != want.cpuProfile || o.memProfile != want.memProfile || o.trace != want.trace {
		t.Errorf("parsed %+v\nwant   %+v", o, want)
	}
}

func TestParseArgsRefusesBadArguments(t *testing.T) {
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"-concurrency", "0"}, `-concurrency: "0" is not a positive integer`},
		{[]string{"-concurrency", "1,,4"}, `-concurrency: "" is not a positive integer`},
		{[]string{"-targets", "trivial,mainframe"}, `unknown target "mainframe"`},
		{[]string{"-clients", "curl"}, `unknown client "curl"`},
		{[]string{"-clients", "idem"}, "target server-unkeyed is measured with client net/http, which is not selected"},
		{[]string{"-runs", "0"}, "-runs and -fsyncs at least 1"},
		{[]string{"-duration", "0s"}, "-duration must be positive"},
		{[]string{"extra"}, `unexpected arguments ["extra"]`},
		{[]string{"-nosuchflag"}, "flag provided but not defined: -nosuchflag"},
	} {
		var stderr bytes.Buffer
		_, err := parseArgs(c.args, &stderr)
		if !errors.Is(err, ErrUsage) {
			t.Errorf("%q: error %v, want ErrUsage", c.args, err)
		}
		if !strings.Contains(stderr.String(), c.says) {
			t.Errorf("%q: stderr %q, want it to say %q", c.args, stderr.String(), c.says)
		}
	}
}

func TestParseArgsHelp(t *testing.T) {
	var stderr bytes.Buffer
	_, err := parseArgs([]string{"-h"}, &stderr)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("error %v, want flag.ErrHelp", err)
	}
	for _, s := range []string{"Usage: idem-bench [flags]", "-duration duration", "-concurrency string", "-json"} {
		if !strings.Contains(stderr.String(), s) {
			t.Errorf("help does not mention %q:\n%s", s, stderr.String())
		}
	}
}

// A run through Command: a report as JSON on stdout and in the -save file,
// an execution trace in the -trace file, and no progress bar on a stderr
// that is not a terminal.
func TestCommandPrintsJSONWithoutProgressOffTerminal(t *testing.T) {
	var stdout, stderr bytes.Buffer
	saved := filepath.Join(t.TempDir(), "report.json")
	traced := filepath.Join(t.TempDir(), "trace.out")
	err := Command(context.Background(), []string{"-json", "-save", saved, "-trace", traced, "-duration", "20ms", "-warmup", "5ms", "-runs", "1",
		"-concurrency", "2", "-targets", "trivial", "-clients", "net/http,idem", "-fsyncs", "3", "-dir", t.TempDir()}, &stdout, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if stderr.Len() != 0 {
		t.Errorf("stderr %q, want nothing", stderr.String())
	}
	if b, err := os.ReadFile(saved); err != nil || !bytes.Equal(b, stdout.Bytes()) {
		t.Errorf("-save wrote %d bytes (%v), want the %d bytes printed", len(b), err, stdout.Len())
	}
	if b, err := os.ReadFile(traced); err != nil || !bytes.HasPrefix(b, []byte("go 1.")) {
		t.Errorf("-trace wrote %.16q (%v), want an execution trace", b, err)
	}
	var r Report
	dec := json.NewDecoder(&stdout)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatal(err)
	}
	if len(r.Rows) != 2 || r.Rows[0].Client != ClientNetHTTP || r.Rows[1].Client != ClientIdem || r.Rows[0].Ratio != 1 {
		t.Fatalf("rows %+v: want net/http (ratio 1) then idem", r.Rows)
	}
	if r.Machine.Fsync.Samples != 3 || r.Settings.Runs != 1 {
		t.Errorf("machine %+v settings %+v: want 3 fsync samples and 1 run", r.Machine, r.Settings)
	}
}
