package idemotel_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/idemotel"
	"github.com/idemkit/idem/internal/journalhelp"
	"github.com/idemkit/idem/journal"
	"github.com/idemkit/idem/lab/testkit/pgtest"
	"github.com/idemkit/idem/pgjournal"
)

// counting is a Journal that counts its pending operations itself. Its
// embedded Journal is nil: a List would panic.
type counting struct {
	journal.Journal
	n   int
	err error
}

func (c counting) Pending(context.Context) (int, error) { return c.n, c.err }

// TestObserveAsksAPendingCounter: idem.journal.pending of a journal that
// counts its pending operations is its count, its List never called; a
// failed count is the collection's error, and the gauge has no value.
func TestObserveAsksAPendingCounter(t *testing.T) {
	tel := newTelemetry()
	unregister, err := idemotel.Observe(nil, counting{n: 7}, tel.opts)
	if err != nil {
		t.Fatal(err)
	}
	if got := gauge[int64](t, tel.metrics(t)["idem.journal.pending"], "pending"); got != 7 {
		t.Errorf("idem.journal.pending %d, want the journal's count, 7", got)
	}
	if err := unregister(); err != nil {
		t.Fatal(err)
	}

	failing := newTelemetry()
	cause := errors.New("the database is away")
	unregister, err = idemotel.Observe(nil, counting{err: cause}, failing.opts)
	if err != nil {
		t.Fatal(err)
	}
	defer unregister()
	var rm metricdata.ResourceMetrics
	if err := failing.reader.Collect(context.Background(), &rm); !errors.Is(err, cause) {
		t.Errorf("Collect: %v, want the count's error", err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if g, ok := m.Data.(metricdata.Gauge[int64]); ok && m.Name == "idem.journal.pending" && len(g.DataPoints) > 0 {
				t.Errorf("idem.journal.pending has %d points after a failed count, want none", len(g.DataPoints))
			}
		}
	}
}

// TestObservePgjournalPending: a *pgjournal.Journal's idem.journal.pending
// is its own count: the namespace's pending operations whose key has not
// expired by its own recorded lifetime, as many as its List of pending operations, not those done,
// expired or of another namespace.
func TestObservePgjournalPending(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	ctx := context.Background()
	j, err := pgjournal.Open(ctx, dsn, pgjournal.Options{Namespace: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	var _ idemotel.PendingCounter = j

	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// Each key is judged by the lifetime recorded with it: an hour-old key
	// of half an hour has expired, a 30-hour-old key of 48 hours has not.
	day := 24 * time.Hour
	at := func(age time.Duration) int64 { return j.Now().Add(-age).UnixNano() }
	for _, row := range []struct {
		namespace, id string
		created       int64
		ttl           time.Duration
		state         journal.State
	}{
		{"billing", "pending-1", at(0), day, journal.StatePending},
		{"billing", "pending-2", at(0), day, journal.StatePending},
		{"billing", "pending-long", at(30 * time.Hour), 2 * day, journal.StatePending},
		{"billing", "expired", at(day + time.Minute), day, journal.StatePending},
		{"billing", "expired-short", at(time.Hour), 30 * time.Minute, journal.StatePending},
		{"billing", "done", at(0), day, journal.StateDone},
		{"billing", "rejected", at(0), day, journal.StateRejected},
		{"other", "pending-elsewhere", at(0), day, journal.StatePending},
	} {
		if _, err := conn.Exec(ctx, `INSERT INTO idem_operations (namespace, op_id, op_key, fingerprint, created_ns, key_ttl_ns, state)
			VALUES ($1, $2, $2, $3, $4, $5, $6)`, row.namespace, row.id, make([]byte, len(journal.Fingerprint{})), row.created, int64(row.ttl), int16(row.state)); err != nil {
			t.Fatal(err)
		}
	}
	listed, err := j.List(ctx, journal.ListPending)
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) != 3 {
		t.Fatalf("List of pending operations: %d, want 3", len(listed))
	}

	tel := newTelemetry()
	unregister, err := idemotel.Observe(nil, j, tel.opts)
	if err != nil {
		t.Fatal(err)
	}
	defer unregister()
	if got := gauge[int64](t, tel.metrics(t)["idem.journal.pending"], "pending"); got != int64(len(listed)) {
		t.Errorf("idem.journal.pending %d, want %d, as List", got, len(listed))
	}
}

// listless is a file journal whose List fails: a count that reaches it
// did not go through PendingCounter.
type listless struct{ *filejournal.Journal }

func (listless) List(context.Context, journal.Listing) ([]journal.Operation, error) {
	return nil, errors.New("listed")
}

// TestObserveFilejournalPending: a *filejournal.Journal's
// idem.journal.pending is its Pending, asked through PendingCounter: as
// many as its List of pending operations, each judged by its own key
// lifetime, and never its List. A nil journal pointer, of any journal, has
// no gauge value and fails no collection.
func TestObserveFilejournalPending(t *testing.T) {
	var _ idemotel.PendingCounter = (*filejournal.Journal)(nil)
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	j, err := filejournal.Open(filepath.Join(t.TempDir(), "j"), filejournal.Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	for i, op := range []struct {
		age, ttl time.Duration
	}{
		{0, 24 * time.Hour},
		{time.Minute, 24 * time.Hour},
		{time.Hour, 30 * time.Minute}, // expired by its own lifetime
		{25 * time.Hour, 24 * time.Hour},
	} {
		if err := journalhelp.Begin(j, journal.Operation{
			ID: fmt.Sprintf("op-%d", i), Key: fmt.Sprintf("key-%d", i), Method: "POST", URL: "https://api.example.test/charges",
			Created: now.Add(-op.age), KeyTTL: op.ttl, State: journal.StatePending,
		}); err != nil {
			t.Fatal(err)
		}
	}
	listed := journalhelp.MustList(j, journal.ListPending)
	if len(listed) != 2 {
		t.Fatalf("List of pending operations: %d, want 2", len(listed))
	}
	for _, observed := range []journal.Journal{j, listless{j}} {
		tel := newTelemetry()
		unregister, err := idemotel.Observe(nil, observed, tel.opts)
		if err != nil {
			t.Fatal(err)
		}
		if got := gauge[int64](t, tel.metrics(t)["idem.journal.pending"], "pending"); got != int64(len(listed)) {
			t.Errorf("%T: idem.journal.pending %d, want %d, as List", observed, got, len(listed))
		}
		if err := unregister(); err != nil {
			t.Fatal(err)
		}
	}

	for _, none := range []journal.Journal{(*filejournal.Journal)(nil), (*pgjournal.Journal)(nil)} {
		tel := newTelemetry()
		unregister, err := idemotel.Observe(nil, none, tel.opts)
		if err != nil {
			t.Fatal(err)
		}
		var rm metricdata.ResourceMetrics
		if err := tel.reader.Collect(context.Background(), &rm); err != nil {
			t.Errorf("%T(nil): Collect: %v", none, err)
		}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if g, ok := m.Data.(metricdata.Gauge[int64]); ok && m.Name == "idem.journal.pending" && len(g.DataPoints) > 0 {
					t.Errorf("%T(nil): idem.journal.pending has %d points, want none", none, len(g.DataPoints))
				}
			}
		}
		unregister()
	}
}
