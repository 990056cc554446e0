package pgjournal_test

// F4.6 and F4.7: each row holds its operation's key lifetime, by which
// every machine judges it; migration 3 gives the rows of earlier releases
// 24 hours.

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/journal"
	"github.com/idemkit/idem/lab/testkit/pgtest"
	"github.com/idemkit/idem/pgjournal"
)

// listIDs returns the IDs j lists under which.
func listIDs(t *testing.T, j *pgjournal.Journal, which journal.Listing) []string {
	t.Helper()
	ops, err := j.List(context.Background(), which)
	if err != nil {
		t.Fatalf("List(%s): %v", which, err)
	}
	ids := make([]string, len(ops))
	for i, op := range ops {
		ids[i] = op.ID
	}
	return ids
}

// TestMachinesWithDifferentRetentionsJudgeAKeyByItsRecord is F4.6 and
// C6.7 across a fleet: machine a, whose Dialect keeps keys an hour, leaves
// an operation pending; two hours later machine b, whose Dialect keeps
// them a day, runs it again. b must not send it under the key the server
// forgot an hour ago: it gets ErrKeyExpired, and both machines' listings
// show it expired.
func TestMachinesWithDifferentRetentionsJudgeAKeyByItsRecord(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	ja := openJournal(t, dsn, pgjournal.Options{Owner: "a"})
	jb := openJournal(t, dsn, pgjournal.Options{Owner: "b"})
	srv := newServer(t)
	srv.hold = func(*http.Request) int { return http.StatusServiceUnavailable }
	a, err := idem.New(idem.Config{Journal: ja, MaxAttempts: 1, Logger: quiet, Dialect: idem.Dialect{Retention: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := idem.New(idem.Config{Journal: jb, MaxAttempts: 1, Logger: quiet, Dialect: idem.Dialect{Retention: 24 * time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Do("charge", srv.post(t, context.Background())); !errors.Is(err, idem.ErrUnknown) {
		t.Fatalf("a's Do: %v, want an unknown outcome", err)
	}
	op, _, err := jb.Lookup(context.Background(), "charge")
	if err != nil || op.KeyTTL != time.Hour {
		t.Fatalf("the row as b reads it: KeyTTL %v (%v), want a's 1h", op.KeyTTL, err)
	}
	// Two hours pass: the key is past a's lifetime, within b's.
	exec(t, dsn, `UPDATE idem_operations SET created_ns = created_ns - $1`, int64(2*time.Hour))
	if _, err := b.Do("charge", srv.post(t, context.Background())); !errors.Is(err, idem.ErrKeyExpired) {
		t.Fatalf("b's Do two hours later: %v, want ErrKeyExpired", err)
	}
	if n, _ := srv.requests(); n != 1 {
		t.Fatalf("%d requests, want only a's first", n)
	}
	for name, j := range map[string]*pgjournal.Journal{"a": ja, "b": jb} {
		if got := listIDs(t, j, journal.ListExpired); !slices.Equal(got, []string{"charge"}) {
			t.Errorf("%s's expired listing: %q, want [charge]", name, got)
		}
		if got := listIDs(t, j, journal.ListPending); len(got) != 0 {
			t.Errorf("%s's pending listing: %q, want none", name, got)
		}
	}
}

// schemaV2 is the schema of version 2: version 1's table, and the
// liveness that migration 2 added.
const schemaV2 = schemaV1 + `;
	CREATE TABLE idem_lives (
		id          text        PRIMARY KEY,
		owner       text        NOT NULL,
		alive_until timestamptz NOT NULL,
		dead        boolean     NOT NULL DEFAULT false
	);
	ALTER TABLE idem_operations ADD COLUMN lease_life text;
	ALTER TABLE idem_operations ADD COLUMN lease_life_fence bigint;
	UPDATE idem_schema SET version = 2`

// TestAVersion2DatabaseIsUpgraded is F4.7: Open upgrades a database of
// schema version 2 in place, and its rows, written before each held its
// key lifetime, read as 24 hours, by the lookups and the listings: a
// pending key 23 hours old is pending, one 25 hours old expired.
func TestAVersion2DatabaseIsUpgraded(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	exec(t, dsn, schemaV2)
	now := time.Now()
	for id, age := range map[string]time.Duration{"fresh": 23 * time.Hour, "old": 25 * time.Hour} {
		exec(t, dsn, `INSERT INTO idem_operations (namespace, op_id, op_key, fingerprint, created_ns, state)
			VALUES ('default', $1, $1 || '-key', decode(repeat('00', 32), 'hex'), $2, 1)`, id, now.Add(-age).UnixNano())
	}
	j := openJournal(t, dsn, pgjournal.Options{})
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var v int
	if err := conn.QueryRow(context.Background(), `SELECT version FROM idem_schema`).Scan(&v); err != nil || v != 3 {
		t.Fatalf("schema version %d (%v) after Open, want 3", v, err)
	}
	for _, id := range []string{"fresh", "old"} {
		op, ok, err := j.Lookup(context.Background(), id)
		if err != nil || !ok || op.KeyTTL != idem.DefaultKeyTTL {
			t.Fatalf("row %s after the upgrade: KeyTTL %v, found %v (%v); want 24h", id, op.KeyTTL, ok, err)
		}
	}
	if got := listIDs(t, j, journal.ListPending); !slices.Equal(got, []string{"fresh"}) {
		t.Errorf("pending after the upgrade: %q, want [fresh]", got)
	}
	if got := listIDs(t, j, journal.ListExpired); !slices.Equal(got, []string{"old"}) {
		t.Errorf("expired after the upgrade: %q, want [old]", got)
	}
}
