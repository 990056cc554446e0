package filejournal

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/journal"
)

// The heap an open Journal holds per operation it remembers, measured
// through the public API: operations begun and completed by 64 goroutines,
// each outcome with a recorded body, then the journal reopened. The bodies
// stay in the file and are read when an outcome is looked up, so the heap
// per operation does not depend on their size.
//
// CI runs a small size with a generous bound. The sizes and the bound come
// from the environment, for measuring at scale:
//
//	IDEM_JOURNAL_HEAP_OPS        operations (default 2000)
//	IDEM_JOURNAL_HEAP_BODY       bytes of each recorded body (default 8192)
//	IDEM_JOURNAL_HEAP_MAX        bound on heap bytes per operation (default 512)
//	IDEM_JOURNAL_HEAP_FILE       journal file to use and keep; if it exists,
//	                             it is opened as it is, without writing
//
// For example, ten million operations with 1 KiB bodies (a 12 GB file):
//
//	IDEM_JOURNAL_HEAP_OPS=10000000 IDEM_JOURNAL_HEAP_BODY=1024 IDEM_JOURNAL_HEAP_MAX=150 \
//	IDEM_JOURNAL_HEAP_FILE=/var/tmp/10m.journal \
//	go test -run TestFileJournalHeapPerOperation -v -timeout 2h .
//
// Clause: J9.1.
func TestFileJournalHeapPerOperation(t *testing.T) {
	ops := envInt(t, "IDEM_JOURNAL_HEAP_OPS", 2000)
	bodySize := envInt(t, "IDEM_JOURNAL_HEAP_BODY", 8192)
	bound := envInt(t, "IDEM_JOURNAL_HEAP_MAX", 512)
	path := os.Getenv("IDEM_JOURNAL_HEAP_FILE")
	if path == "" {
		path = filepath.Join(t.TempDir(), "ops.journal")
	}
	o := Options{CompactMinSize: -1, Logger: quietOptions().Logger}
	if _, err := os.Stat(path); err != nil {
		began := time.Now()
		writeHeapJournal(t, path, o, ops, bodySize)
		t.Logf("wrote %d operations with %d-byte bodies in %v", ops, bodySize, time.Since(began).Round(time.Millisecond))
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	peak := watchHeap()
	began, cpu := time.Now(), cpuTime()
	j, err := Open(path, o)
	took, cpu := time.Since(began), cpuTime()-cpu
	peakBytes := peak()
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	runtime.GC()
	runtime.ReadMemStats(&after)
	st := j.Stats()
	if st.Operations != ops {
		t.Fatalf("reopened journal holds %d operations, want %d", st.Operations, ops)
	}
	held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	perOp := float64(held) / float64(ops)
	t.Logf("%d operations, file %d bytes: opened in %v (%v of CPU), heap held %d bytes (%.0f B/op), peak heap objects during open %d bytes",
		ops, fi.Size(), took.Round(time.Millisecond), cpu.Round(time.Millisecond), held, perOp, peakBytes)
	if perOp > float64(bound) {
		t.Errorf("an open journal holds %.0f heap bytes per operation, over the bound of %d", perOp, bound)
	}

	// Replays return the recorded bytes.
	for _, i := range []int{0, ops / 2, ops - 1} {
		op, ok, err := j.Lookup(context.Background(), heapOpID(i))
		if err != nil || !ok {
			t.Fatalf("Lookup(%s) = %v, %v", heapOpID(i), ok, err)
		}
		if want := heapBody(i, bodySize); op.State != journal.StateDone || op.Status != 201 || !bytes.Equal(op.Body, want) ||
			op.Header.Get("Content-Type") != "application/octet-stream" {
			t.Fatalf("Lookup(%s) = %s %d %q, %d-byte body; want done 201 with its %d-byte body", heapOpID(i), op.State, op.Status, op.Header, len(op.Body), len(want))
		}
	}
	runtime.KeepAlive(j)
}

// writeHeapJournal begins and completes ops operations through 64
// goroutines, each outcome with a body of bodySize bytes.
func writeHeapJournal(t *testing.T, path string, o Options, ops, bodySize int) {
	j, err := Open(path, o)
	if err != nil {
		t.Fatal(err)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= ops || t.Failed() {
					return
				}
				op := journal.Operation{ID: heapOpID(i), Key: fmt.Sprintf("00000000-0000-4000-8000-%012d", i),
					Method: http.MethodPost, URL: "https://api.example.test/charges", Created: testNow, KeyTTL: time.Hour}
				op.Fingerprint[0] = byte(i)
				if err := j.begin(op); err != nil {
					t.Error(err)
					return
				}
				op.State, op.Completed, op.Status = journal.StateDone, testNow, 201
				op.Header = http.Header{"Content-Type": {"application/octet-stream"}}
				op.Body = heapBody(i, bodySize)
				if err := j.complete(op); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if t.Failed() {
		t.FailNow()
	}
}

func heapOpID(i int) string { return "op-" + strconv.Itoa(i) }

// heapBody is operation i's recorded body: n bytes that differ from one
// operation to the next.
func heapBody(i, n int) []byte {
	b := bytes.Repeat([]byte{byte(i)}, n)
	copy(b, strconv.Itoa(i))
	return b
}

// watchHeap samples the bytes of heap objects, live or not yet collected,
// every millisecond until the returned function is called, which returns
// the largest sample.
func watchHeap() func() uint64 {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 {
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	stop := make(chan struct{})
	done := make(chan uint64)
	go func() {
		peak := read()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				peak = max(peak, read())
			case <-stop:
				done <- max(peak, read())
				return
			}
		}
	}()
	return func() uint64 {
		close(stop)
		return <-done
	}
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, s)
	}
	return n
}
