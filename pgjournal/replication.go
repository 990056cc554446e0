package pgjournal

// What a failover does to a commit.
//
// An intent is committed before the first byte is sent. On a primary
// that streams to standbys asynchronously, a commit returns before any
// standby has it: a failover to a standby that was behind loses the
// intents it had not received, and the new primary, asked for those
// operations again, mints new keys for requests already sent. The API
// then applies them twice.
//
// Open therefore asks the server, before it writes anything, whether it
// is a primary that streams to physical standbys and, if it does, whether
// synchronous_standby_names names any of them; none named is refused,
// unless Options.AllowAsyncReplication accepts the risk, and then a
// warning says what can happen. The check reads what an ordinary role
// may: the count of pg_stat_replication's rows (a role without pg_monitor
// sees the rows but not their details), less the walsenders of logical
// slots (change data capture is no standby), and the setting.
//
// A commit waits for the synchronous standbys only as far as its
// session's synchronous_commit says: off and local not at all,
// remote_write until a standby has written it (lost if the standby's
// operating system fails with the primary), on until a standby has
// flushed it, which a promoted standby replays whole. Every statement of
// the journal that writes a row sets on for its own transaction
// (durableSQL), so no role's, database's or DSN's default can weaken the
// journal's commits; remote_apply would also wait for the standby to
// replay it, for readers of the standby, which the journal never is.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
)

// ErrAsyncReplication is matched by the error of Open (a *ReplicationError)
// when the database is a primary whose commits do not wait for any of its
// standbys, so that a failover can lose intents already sent.
var ErrAsyncReplication = errors.New("pgjournal: the primary's standbys are asynchronous: a failover can lose intents already sent")

// ReplicationError is the error of Open on a primary that streams to
// standbys none of which is synchronous, or whose replication could not
// be read. It matches ErrAsyncReplication. Its message names the fix.
type ReplicationError struct {
	// Standbys is the number of physical standbys the primary streams to.
	Standbys int
	// Err is why the replication could not be read, or nil.
	Err error
}

// Error says what can happen and what to change.
func (e *ReplicationError) Error() string {
	const fix = "make a standby synchronous (synchronous_standby_names on the primary; " +
		"with Patroni, synchronous_mode: true, and synchronous_mode_strict: true so that commits wait while no standby can have them), " +
		"or set pgjournal.Options.AllowAsyncReplication to accept the risk"
	if e.Err != nil {
		return fmt.Sprintf("%v: reading the database's replication: %v; %s", ErrAsyncReplication, e.Err, fix)
	}
	return fmt.Sprintf("%v (the primary streams to %d standbys and synchronous_standby_names is empty): "+
		"operations whose intents a failover loses are sent again under new keys; %s", ErrAsyncReplication, e.Standbys, fix)
}

// Is reports whether target is ErrAsyncReplication.
func (e *ReplicationError) Is(target error) bool { return target == ErrAsyncReplication }

// Unwrap returns Err.
func (e *ReplicationError) Unwrap() error { return e.Err }

// durableSQL, a condition of every statement that writes an operation, a
// lease or a life, sets synchronous_commit to on for the statement's
// transaction, as SET LOCAL would, and holds. Its subquery is evaluated
// once, before the first row the condition lets through (PostgreSQL
// makes a condition without the row's columns a one-time filter), so
// the commit of any row written waits for the synchronous standbys
// whatever the session's default. It is part of the statement, not a
// statement of its own, so it costs no round trip, and it ends with the
// transaction, so it works behind a transaction pooler.
const durableSQL = `(SELECT set_config('synchronous_commit', 'on', true)) = 'on'`

// replicationSQL reads the server's synchronous_standby_names, and the
// number of physical standbys streaming from it: pg_stat_replication's
// rows, which every role sees, less the walsenders of logical slots.
const replicationSQL = `SELECT current_setting('synchronous_standby_names'),
	(SELECT count(*) FROM pg_stat_replication AS r WHERE NOT EXISTS
		(SELECT 1 FROM pg_replication_slots AS s WHERE s.active_pid = r.pid AND s.slot_type = 'logical'))`

// checkReplication returns a *ReplicationError when the server streams
// to standbys and names none synchronous, or when that cannot be read,
// unless Options.AllowAsyncReplication; then it logs a warning instead. A
// server with no standby has none to lose a commit to. Errors of a
// database that does not answer are returned as they are, for the caller
// to classify.
func (j *Journal) checkReplication(ctx context.Context) error {
	var (
		names    string
		standbys int
	)
	err := waitRefused(ctx, j.pool, func(ctx context.Context) error {
		return j.pool.QueryRow(ctx, replicationSQL).Scan(&names, &standbys)
	})
	var refusal *ReplicationError
	switch {
	case err != nil && unreachable(err):
		return err
	case err != nil:
		refusal = &ReplicationError{Err: err}
	case standbys > 0 && names == "":
		refusal = &ReplicationError{Standbys: standbys}
	default:
		return nil
	}
	if !j.opt.AllowAsyncReplication {
		return refusal
	}
	attrs := []any{slog.Int("standbys", refusal.Standbys)}
	if refusal.Err != nil {
		attrs = append(attrs, slog.Any("err", refusal.Err))
	}
	j.log.Warn("pgjournal: the database's commits may not be synchronous to its standbys (Options.AllowAsyncReplication): "+
		"a failover can lose intents already sent, and their operations are then sent again under new keys", attrs...)
	return nil
}
