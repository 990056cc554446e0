package idem_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/internal/journalhelp"
	"github.com/idemkit/idem/journal"
)

// pendingJournal returns a file journal holding a pending operation "op-1"
// and a done one "op-2".
func pendingJournal(t *testing.T) *filejournal.Journal {
	t.Helper()
	j, err := filejournal.Open(filepath.Join(t.TempDir(), "ops.journal"), filejournal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	for _, id := range []string{"op-1", "op-2"} {
		if err := journalhelp.Begin(j, journal.Operation{ID: id, Key: "key-" + id, Method: "POST", URL: "https://api.example.test/x",
			Fingerprint: sha256.Sum256([]byte("POST\x00https://api.example.test/x\x00"))}); err != nil {
			t.Fatal(err)
		}
	}
	if err := journalhelp.Complete(j, journal.Operation{ID: "op-2", Key: "key-op-2", State: journal.StateDone, Status: 201}); err != nil {
		t.Fatal(err)
	}
	return j
}

func TestSettleDoneRecordsStatusAndNote(t *testing.T) {
	j := pendingJournal(t)
	ctx := context.Background()
	err := idem.Settle(ctx, j, "op-1", idem.Settlement{State: journal.StateDone, Status: 201, Note: "ticket 42: charge ch_1 exists"})
	if err != nil {
		t.Fatal(err)
	}
	op, ok := lookup(j, "op-1")
	if !ok || op.State != journal.StateDone || op.Status != 201 || op.Key != "key-op-1" {
		t.Fatalf("after Settle: %+v", op)
	}
	if !op.Settled || op.Header != nil {
		t.Fatalf("Settled = %v, header %v; want settled and no header", op.Settled, op.Header)
	}
	if got := op.SettledNote; got != "ticket 42: charge ch_1 exists" {
		t.Fatalf("SettledNote = %q", got)
	}
	// A Do of the settled ID is answered from the journal, not sent.
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	c, err := idem.New(idem.Config{Journal: j})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", "https://api.example.test/x", nil)
	resp, err := c.Do("op-1", req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 201 || hits.Load() != 0 {
		t.Fatalf("Do after Settle: status %d, %d requests sent", resp.StatusCode, hits.Load())
	}
}

func TestSettleRejected(t *testing.T) {
	j := pendingJournal(t)
	if err := idem.Settle(context.Background(), j, "op-1", idem.Settlement{State: journal.StateRejected, Status: 409}); err != nil {
		t.Fatal(err)
	}
	op, _ := lookup(j, "op-1")
	if op.State != journal.StateRejected || op.Status != 409 || op.SettledNote != "" || !op.Settled {
		t.Fatalf("after Settle: %+v", op)
	}
}

func TestSettleRefusals(t *testing.T) {
	j := pendingJournal(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		id   string
		s    idem.Settlement
		want error
	}{
		{"unknown ID", "nope", idem.Settlement{State: journal.StateDone, Status: 200}, journal.ErrNoSuchOperation},
		{"completed", "op-2", idem.Settlement{State: journal.StateDone, Status: 200}, journal.ErrAlreadyCompleted},
		{"forget completed", "op-2", idem.Settlement{Forget: true}, journal.ErrAlreadyCompleted},
		{"forget unknown", "nope", idem.Settlement{Forget: true}, journal.ErrNoSuchOperation},
		{"pending state", "op-1", idem.Settlement{State: journal.StatePending}, journal.ErrInvalidOperation},
		{"no state", "op-1", idem.Settlement{}, journal.ErrInvalidOperation},
		{"bad status", "op-1", idem.Settlement{State: journal.StateDone, Status: 1000}, journal.ErrInvalidOperation},
		{"note with newline", "op-1", idem.Settlement{State: journal.StateDone, Note: "a\r\nX: y"}, journal.ErrInvalidOperation},
		{"forget with outcome", "op-1", idem.Settlement{Forget: true, State: journal.StateDone}, journal.ErrInvalidOperation},
		{"forget completed alone", "op-1", idem.Settlement{ForgetCompleted: true}, journal.ErrInvalidOperation},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := idem.Settle(ctx, j, tc.id, tc.s); !errors.Is(err, tc.want) {
				t.Fatalf("Settle = %v, want %v", err, tc.want)
			}
		})
	}
	if op, _ := lookup(j, "op-1"); op.State != journal.StatePending {
		t.Fatalf("a refused Settle changed op-1: %+v", op)
	}
}

func TestSettleForgetMintsANewKey(t *testing.T) {
	j := pendingJournal(t)
	ctx := context.Background()
	if err := idem.Settle(ctx, j, "op-1", idem.Settlement{Forget: true}); err != nil {
		t.Fatal(err)
	}
	if _, ok := lookup(j, "op-1"); ok {
		t.Fatal("op-1 still in the journal")
	}
	if err := idem.Settle(ctx, j, "op-2", idem.Settlement{Forget: true, ForgetCompleted: true}); err != nil {
		t.Fatal(err)
	}
	var keys []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		keys = append(keys, r.Header.Get("Idempotency-Key"))
	}))
	defer srv.Close()
	c, err := idem.New(idem.Config{Journal: j})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", srv.URL+"/x", strings.NewReader("{}"))
	resp, err := c.Do("op-1", req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(keys) != 1 || keys[0] == "key-op-1" || keys[0] == "" {
		t.Fatalf("keys sent after Forget = %q, want one new key", keys)
	}
}

func TestSettleWaitsForARunningDo(t *testing.T) {
	j := pendingJournal(t)
	claim, err := j.Claim(context.Background(), "op-1")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := idem.Settle(ctx, j, "op-1", idem.Settlement{State: journal.StateDone}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Settle while claimed = %v, want context.Canceled", err)
	}
	if err := idem.Settle(ctx, j, "op-1", idem.Settlement{Forget: true}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Settle Forget while claimed = %v, want context.Canceled", err)
	}
	claim.Release()
	if err := idem.Settle(context.Background(), j, "op-1", idem.Settlement{State: journal.StateDone}); err != nil {
		t.Fatal(err)
	}
}

func TestSettleJournalThatCannotForget(t *testing.T) {
	j := noForget{pendingJournal(t)}
	err := idem.Settle(context.Background(), j, "op-1", idem.Settlement{Forget: true})
	if !errors.Is(err, journal.ErrInvalidOperation) {
		t.Fatalf("Settle = %v, want ErrInvalidOperation", err)
	}
}

type noForget struct{ j *filejournal.Journal }

func (n noForget) Claim(ctx context.Context, id string) (journal.Claim, error) {
	return n.j.Claim(ctx, id)
}
func (n noForget) TryClaim(ctx context.Context, id string) (journal.Claim, error) {
	return n.j.TryClaim(ctx, id)
}
func (n noForget) Lookup(ctx context.Context, id string) (journal.Operation, bool, error) {
	return n.j.Lookup(ctx, id)
}
func (n noForget) List(ctx context.Context, w journal.Listing) ([]journal.Operation, error) {
	return n.j.List(ctx, w)
}
func (n noForget) Now() time.Time { return n.j.Now() }

// Forget drops a pending operation only; ForgetCompleted a completed one,
// and only under the key it was seen with, so that an operation forgotten
// and sent again meanwhile under a new key is never dropped.
func TestForgetAndForgetCompletedEachDropTheirOwn(t *testing.T) {
	j := pendingJournal(t)
	ctx := context.Background()
	if err := j.Forget(ctx, "op-2"); !errors.Is(err, journal.ErrAlreadyCompleted) {
		t.Fatalf("Forget of a done operation = %v, want ErrAlreadyCompleted", err)
	}
	if err := j.ForgetCompleted(ctx, "op-1", "key-op-1"); !errors.Is(err, journal.ErrNoSuchOperation) {
		t.Fatalf("ForgetCompleted of a pending operation = %v, want ErrNoSuchOperation", err)
	}
	if err := j.ForgetCompleted(ctx, "op-2", "key-op-1"); !errors.Is(err, journal.ErrNoSuchOperation) {
		t.Fatalf("ForgetCompleted under another key = %v, want ErrNoSuchOperation", err)
	}
	if err := j.ForgetCompleted(ctx, "op-2", "key-op-2"); err != nil {
		t.Fatal(err)
	}
	if err := j.Forget(ctx, "op-1"); err != nil {
		t.Fatal(err)
	}
	if ops := list(j, journal.ListAll); len(ops) != 0 {
		t.Fatalf("journal after both forgets holds %d operations, want 0", len(ops))
	}
}
