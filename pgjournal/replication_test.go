package pgjournal_test

// F12: no commit a failover can lose, against real streaming replicas.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/journal"
	"github.com/idemkit/idem/lab/testkit/pgtest"
	"github.com/idemkit/idem/pgjournal"
)

// warnAsync is the warning Open logs on a primary whose standbys are all
// asynchronous, when Options.AllowAsyncReplication accepts it.
const warnAsync = "pgjournal: the database's commits may not be synchronous to its standbys (Options.AllowAsyncReplication): " +
	"a failover can lose intents already sent, and their operations are then sent again under new keys"

// asRole returns dsn, a pgserver URL of the superuser postgres, for the
// role role instead.
func asRole(dsn, role string) string { return strings.Replace(dsn, "postgres@", role+"@", 1) }

// addRole creates role, an ordinary role that may log in and create the
// journal's tables, and runs then, if any, on it.
func addRole(t *testing.T, dsn, role, then string) string {
	t.Helper()
	exec(t, dsn, fmt.Sprintf(`CREATE ROLE %s LOGIN; GRANT CREATE ON SCHEMA public TO %s; %s`, role, role, then))
	return asRole(dsn, role)
}

// TestF12APrimaryWithAnAsyncStandbyIsRefusedAtOpen is F12.1 and F12.2: a
// primary that streams to a standby with synchronous_standby_names empty
// is refused at Open, by default, with a *ReplicationError that matches
// ErrAsyncReplication, counts the standby and names each fix, for the
// superuser and for an ordinary role, which sees the standby without its
// details; nothing is written. With AllowAsyncReplication it opens, and
// logs the warning once.
func TestF12APrimaryWithAnAsyncStandbyIsRefusedAtOpen(t *testing.T) {
	primary := pgtest.Own(t)
	pgtest.OwnAsyncStandby(t, primary)
	ctx := context.Background()
	app := addRole(t, primary.DSN(), "app", "")
	for _, dsn := range []string{primary.DSN(), app} {
		log := &logMessages{}
		j, err := pgjournal.Open(ctx, dsn, pgjournal.Options{Logger: slog.New(log)})
		if err == nil {
			j.Close()
		}
		var re *pgjournal.ReplicationError
		if !errors.Is(err, pgjournal.ErrAsyncReplication) || !errors.As(err, &re) || re.Standbys != 1 || re.Err != nil {
			t.Fatalf("Open as %s on a primary with an async standby: %v (%#v), want a *ReplicationError of 1 standby",
				strings.Split(dsn, "@")[0], err, re)
		}
		for _, fix := range []string{"synchronous_standby_names", "synchronous_mode", "AllowAsyncReplication"} {
			if !strings.Contains(err.Error(), fix) {
				t.Errorf("the refusal does not name %s: %v", fix, err)
			}
		}
		if msgs := log.all(); len(msgs) != 0 {
			t.Errorf("a refused Open logged %q", msgs)
		}
	}
	var tables int
	queryRow(t, primary.DSN(), `SELECT count(*) FROM pg_tables WHERE tablename LIKE 'idem%'`, &tables)
	if tables != 0 {
		t.Fatalf("a refused Open created %d tables", tables)
	}

	log := &logMessages{}
	j, err := pgjournal.Open(ctx, app, pgjournal.Options{AllowAsyncReplication: true, Logger: slog.New(log)})
	if err != nil {
		t.Fatalf("Open with AllowAsyncReplication: %v", err)
	}
	j.Close()
	if msgs := log.all(); !slices.Equal(msgs, []string{warnAsync}) {
		t.Fatalf("Open with AllowAsyncReplication logged %q, want the warning once", msgs)
	}
}

// TestF12ASynchronousStandbyOrNoneIsAccepted is F12.3: a primary whose
// standby is synchronous opens without a word, and so does a server with
// no standby, AllowAsyncReplication set or not.
func TestF12ASynchronousStandbyOrNoneIsAccepted(t *testing.T) {
	ctx := context.Background()
	primary := pgtest.Own(t)
	single := pgtest.NewDatabase(t)
	for _, allow := range []bool{false, true} {
		log := &logMessages{}
		j, err := pgjournal.Open(ctx, single, pgjournal.Options{AllowAsyncReplication: allow, Logger: slog.New(log)})
		if err != nil {
			t.Fatalf("Open on a server with no standby, AllowAsyncReplication %v: %v", allow, err)
		}
		j.Close()
		if msgs := log.all(); len(msgs) != 0 {
			t.Fatalf("Open on a server with no standby logged %q", msgs)
		}
	}
	pgtest.OwnStandby(t, primary)
	app := addRole(t, primary.DSN(), "app", "")
	for _, dsn := range []string{app, primary.DSN()} { // app's tables, which the superuser may use
		log := &logMessages{}
		j, err := pgjournal.Open(ctx, dsn, pgjournal.Options{Logger: slog.New(log)})
		if err != nil {
			t.Fatalf("Open on a primary with a synchronous standby: %v", err)
		}
		j.Close()
		if msgs := log.all(); len(msgs) != 0 {
			t.Fatalf("Open on a primary with a synchronous standby logged %q", msgs)
		}
	}
}

// TestF12ALogicalSlotIsNoStandby is F12.4: the walsender of a logical
// replication slot (change data capture, here pg_recvlogical) streams
// from the primary but is no standby to fail over to: Open accepts a
// primary that has only it.
func TestF12ALogicalSlotIsNoStandby(t *testing.T) {
	ctx := context.Background()
	primary := pgtest.Own(t)
	exec(t, primary.DSN(), `ALTER SYSTEM SET wal_level = logical`)
	if err := primary.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := primary.Start(ctx); err != nil {
		t.Fatal(err)
	}
	exec(t, primary.DSN(), `SELECT pg_create_logical_replication_slot('cdc', 'test_decoding')`)
	stop := receiveLogical(t, primary.Port(), "cdc")
	defer stop()
	var senders int
	for deadline := time.Now().Add(30 * time.Second); senders == 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		queryRow(t, primary.DSN(), `SELECT count(*) FROM pg_stat_replication`, &senders)
	}
	if senders != 1 {
		t.Fatalf("pg_stat_replication has %d rows, want the logical walsender's", senders)
	}
	j, err := pgjournal.Open(ctx, addRole(t, primary.DSN(), "app", ""), pgjournal.Options{Logger: quiet})
	if err != nil {
		t.Fatalf("Open on a primary whose only walsender is a logical slot's: %v", err)
	}
	j.Close()
}

// receiveLogical runs pg_recvlogical on the logical slot slot of the
// server at port, as the superuser postgres, until the function it
// returns stops it.
func receiveLogical(t *testing.T, port int, slot string) (stop func()) {
	t.Helper()
	bin := os.Getenv("IDEM_PG_BIN")
	if bin == "" {
		bin = "/usr/lib/postgresql/15/bin"
	}
	cmd := osexec.Command(filepath.Join(bin, "pg_recvlogical"), "-h", "127.0.0.1", "-p", strconv.Itoa(port), "-U", "postgres",
		"-d", "postgres", "-S", slot, "--start", "-f", os.DevNull)
	if err := cmd.Start(); err != nil {
		t.Fatalf("pg_recvlogical: %v", err)
	}
	return func() {
		cmd.Process.Kill()
		cmd.Wait()
	}
}

// lazySessions returns two DSNs of dsn's server whose sessions have
// synchronous_commit off by default: one says so in its options, the
// other is a role altered to it.
func lazySessions(t *testing.T, dsn string) []string {
	t.Helper()
	return []string{
		dsn + "&options=-c%20synchronous_commit%3Doff",
		addRole(t, dsn, "lazy", `ALTER ROLE lazy SET synchronous_commit = off`),
	}
}

// showSetting returns the value of the setting name in a new session of
// dsn.
func showSetting(t *testing.T, dsn, name string) string {
	t.Helper()
	var v string
	queryRow(t, dsn, "SHOW "+name, &v)
	return v
}

// TestF12TheJournalsCommitsWaitWhateverTheSessionSays is F12.5: with the
// sessions' synchronous_commit off, by the DSN's options or by the role,
// a commit of the session does not wait for the synchronous standby, but
// each statement of the journal that writes does: with the standby down,
// the intent, the outcome, the lease taken, its renewal and release, the
// liveness started and renewed, and the forget of a completed operation
// each wait until Options.Timeout and fail as a database that does not
// answer.
func TestF12TheJournalsCommitsWaitWhateverTheSessionSays(t *testing.T) {
	ctx := context.Background()
	primary := pgtest.Own(t)
	standby := pgtest.OwnStandby(t, primary)
	openJournal(t, primary.DSN(), pgjournal.Options{}) // the tables
	exec(t, primary.DSN(), `CREATE TABLE plain (n int)`)
	exec(t, primary.DSN(), `GRANT ALL ON ALL TABLES IN SCHEMA public TO PUBLIC`)
	type machine struct {
		dsn               string
		j, fresh, beating *pgjournal.Journal
		log, beatLog      *logMessages
		held, renewing    journal.Claim // leased: to complete, to watch renew
		releasing         journal.Claim // leased: to release
		doneKey           string
	}
	op := func(id string) journal.Operation {
		return journal.Operation{ID: id, Key: "key-" + id, Method: "POST", URL: "http://x/", KeyTTL: 24 * time.Hour, State: journal.StatePending}
	}
	var ms []*machine
	for i, dsn := range lazySessions(t, primary.DSN()) {
		if v := showSetting(t, dsn, "synchronous_commit"); v != "off" {
			t.Fatalf("a lazy session's synchronous_commit is %s", v)
		}
		ns := fmt.Sprint("lazy-", i)
		m := &machine{dsn: dsn, log: &logMessages{}, beatLog: &logMessages{}}
		m.j = openJournal(t, dsn, pgjournal.Options{Namespace: ns, Timeout: 300 * time.Millisecond,
			LeaseTTL: 600 * time.Millisecond, Liveness: time.Minute, Logger: slog.New(m.log)})
		m.fresh = openJournal(t, dsn, pgjournal.Options{Namespace: ns, Timeout: 300 * time.Millisecond, Logger: quiet})
		m.beating = openJournal(t, dsn, pgjournal.Options{Namespace: ns + "-beat", Timeout: 300 * time.Millisecond,
			Liveness: 1500 * time.Millisecond, Logger: slog.New(m.beatLog)})
		begin := func(j *pgjournal.Journal, id string) journal.Claim {
			c, err := j.ClaimBegin(ctx, op(id))
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		m.held, m.renewing, m.releasing = begin(m.j, "held"), begin(m.j, "renewing"), begin(m.j, "releasing")
		begin(m.j, "pending").Release()
		done := begin(m.j, "done")
		d := op("done")
		d.State, d.Status = journal.StateDone, 201
		if err := done.Complete(ctx, d); err != nil {
			t.Fatal(err)
		}
		done.Release()
		m.doneKey = d.Key
		b := begin(m.beating, "beat")
		b.Release()
		ms = append(ms, m)
	}

	if err := standby.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	for i, m := range ms {
		// A commit of the session's own does not wait.
		conn, err := pgx.Connect(ctx, m.dsn)
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = conn.Exec(wctx, `INSERT INTO plain VALUES (1)`)
		cancel()
		conn.Close(ctx)
		if err != nil {
			t.Fatalf("machine %d: a plain commit with synchronous_commit off: %v", i, err)
		}

		unavailable := func(what string, err error) {
			t.Helper()
			if !errors.Is(err, journal.ErrUnavailable) {
				t.Errorf("machine %d, the standby down: %s: %v, want journal.ErrUnavailable", i, what, err)
			}
		}
		d := op("held")
		d.State, d.Status = journal.StateDone, 201
		unavailable("the outcome", m.held.Complete(ctx, d))
		_, err = m.j.Claim(ctx, "pending")
		unavailable("the lease taken", err)
		unavailable("the forget", m.j.ForgetCompleted(ctx, "done", m.doneKey))
		_, err = m.j.ClaimBegin(ctx, op("new"))
		unavailable("the intent", err)
		_, err = m.fresh.ClaimBegin(ctx, op("fresh"))
		unavailable("the liveness started", err)
		if err != nil && !strings.Contains(err.Error(), "starting this journal's liveness") {
			t.Errorf("machine %d: a journal's first claim failed, but not as it started its liveness: %v", i, err)
		}
		before := m.j.Stats().ReleaseCommits
		m.releasing.Release()
		if after := m.j.Stats().ReleaseCommits; after != before || !m.log.has(logReleaseFailed) {
			t.Errorf("machine %d: the release, the standby down: %d release commits (from %d), logged %q",
				i, after, before, m.log.all())
		}
	}
	// The renewals, in the background: the lease lapses (LeaseTTL 600ms),
	// and so does a liveness of 1.5s, for want of a commit.
	for i, m := range ms {
		for !m.log.has(logLapsed) || !m.beatLog.has(logLifeLapsed) {
			if time.Since(stopped) > 10*time.Second {
				t.Fatalf("machine %d, the standby down 10s: the journal logged %q and %q, want the lease and the liveness lapsed",
					i, m.log.all(), m.beatLog.all())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// logReleaseFailed is the message of a failed release.
const logReleaseFailed = "pgjournal: releasing a lease failed; this Journal takes it back at its next claim, others when it lapses"

// TestF12NoSentIntentIsLostInAFailover is F12.6: sessions with
// synchronous_commit off run operations while the synchronous standby
// falls behind, as far as a standby can (it is down); the primary dies
// and the standby, started again, is promoted. Every key sent is on the
// new primary: an intent the standby did not have was never sent, its
// Do failing with journal.ErrUnavailable.
func TestF12NoSentIntentIsLostInAFailover(t *testing.T) {
	ctx := context.Background()
	primary := pgtest.Own(t)
	standby := pgtest.OwnStandby(t, primary)
	dsn := lazySessions(t, primary.DSN())[0]
	o := pgjournal.Options{Namespace: "failover", Timeout: 300 * time.Millisecond}
	c := client(t, openJournal(t, dsn, o))
	l := newLedger(t, 0)
	before, after := opIDs("before", 20), opIDs("after", 20)
	if errs := runAll(ctx, c, l, before, 4); len(errs) > 0 {
		t.Fatalf("with the standby up, %d operations failed, the first: %v", len(errs), errs[0])
	}
	if err := standby.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	for _, err := range runAll(ctx, c, l, after, 4) {
		if !errors.Is(err, journal.ErrUnavailable) {
			t.Fatalf("with the standby down: %v, want journal.ErrUnavailable", err)
		}
	}
	if err := primary.KillPostmaster(ctx); err != nil {
		t.Fatal(err)
	}
	if err := standby.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	sent := map[string]string{}
	for id, keys := range l.keys {
		for k := range keys {
			sent[id] = k
		}
	}
	l.mu.Unlock()
	conn, err := pgx.Connect(ctx, standby.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT op_id, op_key FROM idem_operations WHERE namespace = 'failover'`)
	if err != nil {
		t.Fatal(err)
	}
	kept := map[string]string{}
	var id, key string
	if _, err := pgx.ForEachRow(rows, []any{&id, &key}, func() error { kept[id] = key; return nil }); err != nil {
		t.Fatal(err)
	}
	if len(sent) != len(before) {
		t.Errorf("%d operations sent, want the %d run with the standby up", len(sent), len(before))
	}
	for id, key := range sent {
		if kept[id] != key {
			t.Errorf("operation %s was sent under %s; the promoted standby holds %q", id, key, kept[id])
		}
	}
}

// TestF12AReplicationThatCannotBeReadIsRefused is F12.7: a role that may
// not read pg_stat_replication (a managed database can revoke it) cannot
// tell whether the primary's standbys are synchronous: Open refuses it
// with a *ReplicationError that says why, matching ErrAsyncReplication,
// and with AllowAsyncReplication opens and logs the warning.
func TestF12AReplicationThatCannotBeReadIsRefused(t *testing.T) {
	ctx := context.Background()
	primary := pgtest.Own(t)
	app := addRole(t, primary.DSN(), "app", `REVOKE SELECT ON pg_catalog.pg_stat_replication FROM PUBLIC`)
	_, err := pgjournal.Open(ctx, app, pgjournal.Options{Logger: quiet})
	var re *pgjournal.ReplicationError
	if !errors.Is(err, pgjournal.ErrAsyncReplication) || !errors.As(err, &re) || re.Err == nil || re.Standbys != 0 ||
		!strings.Contains(err.Error(), "reading the database's replication") || !strings.Contains(err.Error(), "42501") {
		t.Fatalf("Open by a role that may not read pg_stat_replication: %v (%#v), want a *ReplicationError saying why", err, re)
	}
	log := &logMessages{}
	j, err := pgjournal.Open(ctx, app, pgjournal.Options{AllowAsyncReplication: true, Logger: slog.New(log)})
	if err != nil {
		t.Fatalf("Open with AllowAsyncReplication: %v", err)
	}
	j.Close()
	if msgs := log.all(); !slices.Equal(msgs, []string{warnAsync}) {
		t.Fatalf("Open with AllowAsyncReplication logged %q, want the warning once", msgs)
	}
}
