package fileengine

import (
	"errors"
	"testing"
)

func TestForgetDropsOneOperationDurably(t *testing.T) {
	path := journalPath(t)
	j := openTestJournal(t, path, quietOptions())
	a, b, c := testIntent(1), testIntent(2), testIntent(3)
	mustBegin(t, j, a)
	mustBegin(t, j, b)
	mustBegin(t, j, c)
	mustComplete(t, j, testOutcome(c, 201, `{"ok":true}`))
	if err := j.Forget(b.ID); err != nil {
		t.Fatalf("Forget(%s): %v", b.ID, err)
	}
	want := []Record{recordOf(c, testOutcome(c, 201, `{"ok":true}`)), recordOf(a)}
	sameRecords(t, "after Forget", records(j), want)
	if err := j.Forget(b.ID); !errors.Is(err, ErrNoSuchOperation) {
		t.Fatalf("second Forget(%s) = %v, want ErrNoSuchOperation", b.ID, err)
	}
	// A new intent under the forgotten ID is accepted, with a new key.
	again := b
	again.Key = "00000000-0000-4000-8000-999999999999"
	mustBegin(t, j, again)
	mustClose(t, j)

	j2 := openTestJournal(t, path, quietOptions())
	sameRecords(t, "after reopening", records(j2), []Record{recordOf(c, testOutcome(c, 201, `{"ok":true}`)), recordOf(again), recordOf(a)})
}

func TestForgetRefusedOnReadOnlyAndClosed(t *testing.T) {
	path := journalPath(t)
	j := openTestJournal(t, path, quietOptions())
	mustBegin(t, j, testIntent(1))
	mustClose(t, j)
	o := quietOptions()
	o.ReadOnly = true
	ro := openTestJournal(t, path, o)
	if err := ro.Forget(testIntent(1).ID); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Forget on a read-only journal = %v, want ErrReadOnly", err)
	}
	if err := j.Forget(testIntent(1).ID); !errors.Is(err, ErrClosed) {
		t.Fatalf("Forget on a closed journal = %v, want ErrClosed", err)
	}
}
