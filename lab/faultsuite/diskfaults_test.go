package faultsuite

import (
	"context"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/internal/fileengine"
	"github.com/idemkit/idem/internal/filefaults"
	"github.com/idemkit/idem/journal"
	"github.com/idemkit/idem/testserver"
)

// errDisk is the injected disk failure.
var errDisk = errors.New("injected disk failure (EIO)")

// diskRig is a client whose journal's files fail on command, in front of
// an in-memory reference server whose request counter says whether
// anything was sent.
type diskRig struct {
	t      *testing.T
	path   string
	faults *DiskFaults
	j      *filejournal.Journal
	c      *idem.Client
	srv    *testserver.Instance
	w      Workload
}

func newDiskRig(t *testing.T) *diskRig {
	t.Helper()
	srv := testserver.Start(t, testserver.Config{})
	r := &diskRig{t: t, path: filepath.Join(t.TempDir(), "client.journal"), faults: new(DiskFaults), srv: srv,
		w: Workload{BaseURL: srv.URL, ClientID: "disk", Ops: 4}}
	prepareInventory(t, srv.URL, r.w.ClientID)
	r.open(r.faults.Wrap)
	t.Cleanup(func() { r.j.Close() })
	return r
}

// open opens the journal (closing the previous one) with wrap as its
// WrapFile, and a client on it.
func (r *diskRig) open(wrap func(fileengine.File) fileengine.File) {
	r.t.Helper()
	if r.j != nil {
		r.j.Close()
	}
	j, err := filejournal.Open(r.path, filefaults.WrapFiles(filejournal.Options{Logger: quietLog}, wrap))
	if err != nil {
		r.t.Fatal(err)
	}
	tr := NewTransport()
	r.t.Cleanup(tr.CloseIdleConnections)
	cfg := clientConfig(j, &http.Client{Transport: tr})
	c, err := idem.New(cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	r.j, r.c = j, c
}

// do runs operation i once.
func (r *diskRig) do(i int) error {
	r.t.Helper()
	req, err := r.w.Request(context.Background(), i)
	if err != nil {
		r.t.Fatal(err)
	}
	resp, err := r.c.Do(OperationID(i), req)
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return err
}

// stats reads the server's counters.
func (r *diskRig) stats() testserver.Stats {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := r.srv.Server.Stats(ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	return st
}

// requireSent checks the mutating requests the server received so far
// (the inventory's PUT included) and the effects it holds.
func (r *diskRig) requireSent(requests, effects int64) {
	r.t.Helper()
	st := r.stats()
	if st.Requests != requests+1 || st.Effects.Charges+st.Effects.Reservations != effects {
		r.t.Fatalf("the server received %d operation requests and holds %d effects; want %d and %d",
			st.Requests-1, st.Effects.Charges+st.Effects.Reservations, requests, effects)
	}
	if st.DuplicateReferences != 0 {
		r.t.Fatalf("the server holds %d references with more than one effect", st.DuplicateReferences)
	}
}

// A write of the intent that fails means nothing is sent and the caller
// gets the failure; the journal refuses every later append with it, and
// opens again without the operation.
func TestDiskWriteFailureBeforeSending(t *testing.T) {
	r := newDiskRig(t)
	r.faults.FailNextWrite(RecordIntent, false, errDisk)
	if err := r.do(0); !errors.Is(err, errDisk) {
		t.Fatalf("Do = %v, want the disk failure", err)
	}
	r.requireSent(0, 0)
	if err := r.do(1); !errors.Is(err, errDisk) {
		t.Fatalf("Do after the failure = %v, want the latched disk failure", err)
	}
	r.requireSent(0, 0)
	if err := r.j.Close(); !errors.Is(err, errDisk) {
		t.Errorf("Close = %v, want the latched disk failure", err)
	}

	r.open(nil)
	if _, ok := lookup(r.j, OperationID(0)); ok {
		t.Error("the journal holds the operation whose intent failed to be written")
	}
	if err := r.do(0); err != nil {
		t.Fatal(err)
	}
	r.requireSent(1, 1)
}

// A write that fails halfway through the intent leaves a torn tail: nothing
// is sent, and the next open truncates the half record. Records appended
// after the cut open cleanly again: had the half record stayed in the
// file, the next open would have taken it, and everything after it, for a
// torn tail, and the operations appended there would be sent again under
// new keys.
func TestDiskShortWriteLeavesATornTail(t *testing.T) {
	r := newDiskRig(t)
	if err := r.do(0); err != nil {
		t.Fatal(err)
	}
	r.faults.FailNextWrite(RecordIntent, true, errDisk)
	if err := r.do(1); !errors.Is(err, errDisk) {
		t.Fatalf("Do = %v, want the disk failure", err)
	}
	r.requireSent(1, 1)
	r.j.Close()

	r.open(nil)
	if st := r.j.Stats(); st.Truncated == 0 {
		t.Errorf("the journal opened without truncating the half record: %+v", st)
	}
	if op, ok := lookup(r.j, OperationID(0)); !ok || op.State != journal.StateDone {
		t.Errorf("operation 0 is %v (found %v) after the torn tail was cut, want done", op.State, ok)
	}
	if err := r.do(1); err != nil {
		t.Fatal(err)
	}
	if err := r.do(0); err != nil {
		t.Fatal(err)
	}
	r.requireSent(2, 2)
	keys := make([]string, 2)
	for i := range keys {
		op, _ := lookup(r.j, OperationID(i))
		keys[i] = op.Key
	}
	r.j.Close()

	r.open(nil)
	if st := r.j.Stats(); st.Truncated != 0 {
		t.Errorf("the journal cut %d bytes when reopened after appends that followed the cut", st.Truncated)
	}
	for i, key := range keys {
		if op, ok := lookup(r.j, OperationID(i)); !ok || op.State != journal.StateDone || op.Key != key {
			t.Errorf("reopened, operation %d is %v with key %q (found %v), want done with key %q", i, op.State, op.Key, ok, key)
		}
	}
	for i := range keys {
		if err := r.do(i); err != nil {
			t.Fatal(err)
		}
	}
	r.requireSent(2, 2)
}

// An fsync of the intent that fails means nothing is sent and the caller
// gets the failure; the failure latches: later operations are refused with
// it, nothing more is written, and the fsync is never tried again on that
// file.
func TestDiskFsyncFailureLatches(t *testing.T) {
	r := newDiskRig(t)
	r.faults.FailNextSync(errDisk)
	if err := r.do(0); !errors.Is(err, errDisk) {
		t.Fatalf("Do = %v, want the disk failure", err)
	}
	r.requireSent(0, 0)
	syncs, writes := r.faults.Syncs(), r.faults.Writes()
	if err := r.do(1); !errors.Is(err, errDisk) {
		t.Fatalf("Do after the failure = %v, want the latched disk failure", err)
	}
	r.requireSent(0, 0)
	if err := r.j.Sync(); !errors.Is(err, errDisk) {
		t.Errorf("Sync after the failure = %v, want the latched disk failure", err)
	}
	if err := r.j.Close(); !errors.Is(err, errDisk) {
		t.Errorf("Close = %v, want the latched disk failure", err)
	}
	if n := r.faults.Syncs(); n != syncs {
		t.Errorf("the journal called fsync %d more times after it failed", n-syncs)
	}
	if n := r.faults.Writes(); n != writes {
		t.Errorf("the journal wrote %d more times after its fsync failed", n-writes)
	}

	// A new process: the intent may or may not have reached the disk. If
	// it did, the operation resumes under its key; it was never sent, so
	// either way it takes effect once.
	r.open(nil)
	if err := r.do(0); err != nil {
		t.Fatal(err)
	}
	r.requireSent(1, 1)
}

// A completion record that fails to be written does not undo the effect,
// and the operation is answered again by the server's replay, never
// applied twice: in this process (the journal still holds it as pending)
// and after a restart.
func TestDiskCompletionFailureReplays(t *testing.T) {
	r := newDiskRig(t)
	r.faults.FailNextWrite(RecordCompletion, false, errDisk)
	if err := r.do(0); err != nil {
		t.Fatalf("Do = %v; the effect happened, the completion is only a record of it", err)
	}
	r.requireSent(1, 1)
	if err := r.do(0); err != nil {
		t.Fatal(err)
	}
	r.requireSent(2, 1)
	if st := r.stats(); st.Replays != 1 {
		t.Errorf("the server replayed %d answers, want 1", st.Replays)
	}
	if err := r.do(1); !errors.Is(err, errDisk) {
		t.Fatalf("Do of a new operation = %v, want the latched disk failure", err)
	}
	r.requireSent(2, 1)

	r.open(nil)
	if err := r.do(0); err != nil {
		t.Fatal(err)
	}
	if err := r.do(1); err != nil {
		t.Fatal(err)
	}
	r.requireSent(4, 2)
}

// A compaction whose new file fails to be synced leaves the journal as it
// was, still usable: the old file is intact and keeps every operation, the
// half-written compaction file is gone, and appends go on.
func TestDiskCompactionFailureLeavesTheJournalUsable(t *testing.T) {
	r := newDiskRig(t)
	for i := range 3 {
		if err := r.do(i); err != nil {
			t.Fatal(err)
		}
	}
	r.faults.FailNextSync(errDisk)
	if err := r.j.Compact(); !errors.Is(err, errDisk) {
		t.Fatalf("Compact = %v, want the disk failure", err)
	}
	if err := r.do(3); err != nil {
		t.Fatalf("Do after a failed compaction = %v", err)
	}
	r.requireSent(4, 4)
	r.j.Close()
	if matches, _ := filepath.Glob(r.path + ".compact"); len(matches) != 0 {
		t.Errorf("the failed compaction left %v behind", matches)
	}
	r.open(nil)
	for i := range 4 {
		if op, ok := lookup(r.j, OperationID(i)); !ok || op.State != journal.StateDone {
			t.Errorf("after reopening, operation %d is %v (found %v), want done", i, op.State, ok)
		}
	}
	for i := range 4 {
		if err := r.do(i); err != nil {
			t.Fatal(err)
		}
	}
	r.requireSent(4, 4)
}
