package main

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/journal"
)

// readOp returns what the journal file at path holds for id.
func readOp(t *testing.T, path, id string) (journal.Operation, bool) {
	t.Helper()
	j, err := filejournal.Open(path, filejournal.Options{ReadOnly: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	op, ok, err := j.Lookup(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return op, ok
}

func TestJournalSettle(t *testing.T) {
	f := newFixture(t)
	r := runAt(t, at(listNow), nil, "journal", "settle", f.path, "charge-3", "--done", "201", "--note", "found ch_3 in the dashboard")
	if r.code != exitOK || !strings.Contains(r.stdout, "settled charge-3") || r.stderr != "" {
		t.Fatalf("settle --done: %+v", r)
	}
	op, _ := readOp(t, f.path, "charge-3")
	if op.State != journal.StateDone || op.Status != 201 || op.Key != f.ops["charge-3"].Key ||
		!op.Settled || op.SettledNote != "found ch_3 in the dashboard" || op.Header != nil {
		t.Fatalf("after settle --done: %+v", op)
	}

	r = runAt(t, at(listNow), nil, "journal", "settle", f.path, "charge-3", "--rejected", "409")
	if r.code != exitFailure || !strings.Contains(r.stderr, "already completed") {
		t.Fatalf("settle of a completed operation: %+v", r)
	}
	r = runAt(t, at(listNow), nil, "journal", "settle", f.path, "nosuch", "--done", "200")
	if r.code != exitFailure || !strings.Contains(r.stderr, "no operation nosuch") {
		t.Fatalf("settle of an unknown ID: %+v", r)
	}
	missing := filepath.Join(t.TempDir(), "missing.journal")
	r = runAt(t, at(listNow), nil, "journal", "settle", missing, "old", "--done", "200")
	if r.code != exitPath || !strings.Contains(r.stderr, "no journal at") {
		t.Fatalf("settle in a missing journal: %+v", r)
	}
	if exists(missing) {
		t.Fatal("settle created a missing journal")
	}

	r = runAt(t, at(listNow), nil, "journal", "settle", f.path, "old", "--forget", "--i-understand-a-new-key")
	if r.code != exitOK || !strings.Contains(r.stdout, "new key") {
		t.Fatalf("settle --forget: %+v", r)
	}
	if _, ok := readOp(t, f.path, "old"); ok {
		t.Fatal("forgotten operation still in the journal")
	}
	r = runAt(t, at(listNow), nil, "journal", "settle", f.path, "charge-1", "--forget", "--i-understand-a-new-key")
	if r.code != exitFailure || !strings.Contains(r.stderr, "already completed") {
		t.Fatalf("settle --forget of a completed operation: %+v", r)
	}
	r = runAt(t, at(listNow), nil, "journal", "settle", f.path, "charge-1", "--forget", "--i-understand-a-new-key", "--completed")
	if r.code != exitOK {
		t.Fatalf("settle --forget --completed: %+v", r)
	}
	if _, ok := readOp(t, f.path, "charge-1"); ok {
		t.Fatal("forgotten operation still in the journal")
	}
}

func TestJournalSettleUsage(t *testing.T) {
	f := newFixture(t)
	for _, args := range [][]string{
		{f.path, "charge-3"},
		{f.path},
		{f.path, "charge-3", "--done", "201", "--rejected", "400"},
		{f.path, "charge-3", "--done", "ok"},
		{f.path, "charge-3", "--done", "42"},
		{f.path, "charge-3", "--forget"},
		{f.path, "charge-3", "--forget", "--i-understand-a-new-key", "--done", "200"},
		{f.path, "charge-3", "--forget", "--i-understand-a-new-key", "--note", "x"},
		{f.path, "charge-3", "--done", "200", "--completed"},
		{f.path, "charge-3", "--done", "200", "--note", "two\nlines"},
	} {
		r := runAt(t, at(listNow), nil, append([]string{"journal", "settle"}, args...)...)
		if r.code != exitUsage {
			t.Errorf("settle %q: exit %d, want %d; stderr %s", args, r.code, exitUsage, r.stderr)
		}
	}
	if op, _ := readOp(t, f.path, "charge-3"); op.State != journal.StatePending {
		t.Fatalf("a refused settle changed the operation: %+v", op)
	}
}

// The bulk form of a resend: idem journal resend forgets the refusals that
// applied nothing (charge-2, rejected 422) and nothing else; --dry-run and
// a --status that matches none change nothing.
func TestJournalResendForgetsTheRefusalsOnly(t *testing.T) {
	f := newFixture(t)
	r := runAt(t, at(listNow), nil, "journal", "resend", f.path, "--dry-run")
	if r.code != exitOK || r.stdout != "charge-2\trejected 422\n1 refusals would be forgotten in "+f.path+"; nothing changed\n" {
		t.Fatalf("resend --dry-run: %+v", r)
	}
	r = runAt(t, at(listNow), nil, "journal", "resend", f.path, "--status", "401")
	if r.code != exitOK || !strings.HasPrefix(r.stdout, "forgot 0 refusals") {
		t.Fatalf("resend --status 401: %+v", r)
	}
	if _, ok := readOp(t, f.path, "charge-2"); !ok {
		t.Fatal("charge-2 was forgotten by a dry run or a --status that does not match it")
	}
	r = runAt(t, at(listNow), nil, "journal", "resend", f.path)
	if r.code != exitOK || !strings.HasPrefix(r.stdout, "charge-2\trejected 422\nforgot 1 refusals") {
		t.Fatalf("resend: %+v", r)
	}
	for id, want := range map[string]bool{"charge-1": true, "charge-2": false, "charge-3": true, "old": true, "blob": true} {
		if _, ok := readOp(t, f.path, id); ok != want {
			t.Errorf("after resend, %s in the journal = %v, want %v", id, ok, want)
		}
	}
	r = runAt(t, at(listNow), nil, "journal", "resend", f.path, "--status", "302")
	if r.code != exitUsage {
		t.Fatalf("resend --status 302: %+v, want a usage error", r)
	}
}
