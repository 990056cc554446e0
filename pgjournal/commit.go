package pgjournal

// The statements of the groups (F10, group.go): each carries every row of
// its batch, unnested from arrays into one INSERT or UPDATE (or, for a
// batch of one, its row's values), so a batch is one round trip and one
// commit, and each row keeps its own lease and fence. The rows are sent
// in the order of their IDs' bytes, so that two journals whose batches
// hold the same rows lock them in the same order; a statement the
// database still aborts as a deadlock or a serialization failure
// committed nothing and is sent again.

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem/journal"
	"github.com/jackc/pgx/v5"
)

// A shared statement takes its rows from u, a subquery with a column for
// each field of a row, one for the namespace and one for the pending
// state: unnest over arrays for a batch of several rows, the values
// themselves for a batch of one (a lone caller's statement, which the
// database plans and runs faster, and what a journal without group commit
// would send). Each row is then found by the primary key, from u's own
// columns. u's rows are those of a transaction whose commit waits for
// the synchronous standbys (durableSQL, F12). Were the namespace or the
// pending state a constant in the
// statement (OFFSET 0 keeps the planner from folding u's columns back
// into constants), a planner whose statistics do not yet know the
// namespace, or its pending rows, would read the table by the namespace
// alone, through idem_operations_by_state, and so scan every row of the
// namespace (or every pending one) for every statement.
type statement struct{ batch, one string }

// shared returns the statement for the template sql, whose %s is u, with
// u's columns cols (each "name type", numbered from $2 on; $1 is the
// namespace).
func shared(sql string, cols ...string) statement {
	var names, arrays, values []string
	for i, c := range cols {
		name, typ, _ := strings.Cut(c, " ")
		n := "$" + strconv.Itoa(i+2)
		names = append(names, name)
		arrays = append(arrays, n+"::"+typ+"[]")
		values = append(values, n+"::"+typ+" AS "+name)
	}
	return statement{
		batch: fmt.Sprintf(sql, "(SELECT $1::text AS namespace, 1::smallint AS pending, u.* FROM unnest("+strings.Join(arrays, ", ")+
			") AS u("+strings.Join(names, ", ")+") WHERE "+durableSQL+" OFFSET 0)"),
		one: fmt.Sprintf(sql, "(SELECT $1::text AS namespace, 1::smallint AS pending, "+strings.Join(values, ", ")+
			" WHERE "+durableSQL+" OFFSET 0)"),
	}
}

// sql returns the form of the statement for a batch of n rows, and args
// as that form takes them: for one row, each array's only element.
func (s statement) sql(n int, args []any) (string, []any) {
	if n > 1 {
		return s.batch, args
	}
	one := make([]any, len(args))
	for i, a := range args {
		switch a := a.(type) {
		case []string:
			one[i] = a[0]
		case [][]byte:
			one[i] = a[0]
		case []int64:
			one[i] = a[0]
		case []int32:
			one[i] = a[0]
		case []int16:
			one[i] = a[0]
		default:
			one[i] = a
		}
	}
	return s.one, one
}

// intentStatement inserts each row of u that names an ID with no row,
// with the intent and this Journal's lease (fence 1), and returns each
// row it inserted, pending, and each completed row it found in the way,
// as readSQL's columns start: the fence, the database's clock, the
// operation. A completed row is returned by rewriting it unchanged, as
// nothing but an update returns the row an insert conflicts with. What
// that costs falls on replays and races, not on new operations: a
// statement that found completed rows writes a row version of each and
// commits (one more WAL flush when it inserted nothing), and every
// conflicting row, pending ones too, stays locked until the statement
// commits, so another machine's write to a row this statement lost to
// waits for it (a statement's time; the rows are locked in ID order, as
// every shared statement locks them). Reporting the row by a join of u
// to the table in the same statement instead cost every statement, new
// operations' too, about twice the database's work. A row of u not
// returned lost to a pending row: the claim reads it again.
var intentStatement = shared(`INSERT INTO idem_operations
		(namespace, op_id, op_key, fingerprint, method, url, created_ns, key_ttl_ns, state, lease_owner, lease_until,
			fence, lease_life, lease_life_fence)
	SELECT namespace, op_id, op_key, fingerprint, method, url, created_ns, key_ttl_ns,
		pending, $10, clock_timestamp() + $11 * interval '1 microsecond', 1, life, 1
	FROM %s AS u
	ON CONFLICT (namespace, op_id) DO UPDATE SET fence = idem_operations.fence WHERE idem_operations.state > 1
	RETURNING fence, clock_timestamp(), `+operationColumns,
	"op_id text", "op_key text", "fingerprint bytea", "method text", "url text", "created_ns bigint", "key_ttl_ns bigint",
	"life text")

// outcomeStatement records each outcome of u on its row, and gives the
// lease back, where the row still holds the writer's fence and is
// pending, under the same key if one is given; it returns the IDs it
// updated.
var outcomeStatement = shared(`UPDATE idem_operations AS o
	SET state = u.state, completed_ns = u.completed_ns, status = u.status, flags = u.flags,
		header = u.header, body = u.body, lease_owner = NULL, lease_until = NULL
	FROM %s AS u
	WHERE o.namespace = u.namespace AND o.op_id = u.op_id AND o.fence = u.fence AND o.state = u.pending
		AND (u.op_key = '' OR o.op_key = u.op_key)
	RETURNING o.op_id`,
	"op_id text", "fence bigint", "state smallint", "completed_ns bigint", "status integer", "flags smallint",
	"header bytea", "body bytea", "op_key text")

// releaseStatement gives back each lease of u whose row still holds the
// releaser's fence.
var releaseStatement = shared(`UPDATE idem_operations AS o SET lease_owner = NULL, lease_until = NULL
	FROM %s AS u
	WHERE o.namespace = u.namespace AND o.op_id = u.op_id AND o.fence = u.fence`,
	"op_id text", "fence bigint")

// intentIn is a row of an intent batch; intentOut what its statement
// reported: whether it inserted the row, and when the statement that took
// the lease with it was sent (the lease's local deadline counts from it);
// or the completed row it found instead, and the database's clock then.
type (
	intentIn struct {
		id   string
		op   journal.Operation
		life *life // the Journal's life the lease is taken under
	}
	intentOut struct {
		won  bool
		sent time.Time
		done *opRow
		now  time.Time
	}
)

// outcomeIn is a row of an outcome batch; its out is whether the row
// took it.
type outcomeIn struct {
	id     string
	fence  int64
	op     journal.Operation
	header []byte
	flags  int16
}

// releaseIn is a row of a release batch.
type releaseIn struct {
	id    string
	fence int64
}

// byID orders a batch by its rows' IDs.
func byID[In, Out any](batch []*member[In, Out], id func(In) string) {
	slices.SortFunc(batch, func(a, b *member[In, Out]) int { return strings.Compare(id(a.in), id(b.in)) })
}

// commitIntents is the intent group's statement.
func (j *Journal) commitIntents(batch []*member[intentIn, intentOut]) error {
	byID(batch, func(in intentIn) string { return in.id })
	n := len(batch)
	var (
		ids, keys, methods, urls = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		lives                    = make([]string, n)
		fps                      = make([][]byte, n)
		created, keyTTLs         = make([]int64, n), make([]int64, n)
	)
	for i, m := range batch {
		op := &m.in.op
		ids[i], keys[i], methods[i], urls[i] = m.in.id, op.Key, op.Method, op.URL
		fps[i], created[i], keyTTLs[i], lives[i] = op.Fingerprint[:], op.Created.UnixNano(), int64(op.KeyTTL), m.in.life.id
	}
	var (
		out   map[string]intentOut
		sent  time.Time
		dbNow time.Time
		won   int
	)
	sql, args := intentStatement.sql(n, []any{j.opt.Namespace, ids, keys, fps, methods, urls, created, keyTTLs, lives,
		j.opt.Owner, j.opt.LeaseTTL.Microseconds()})
	err := j.statement(context.Background(), func(ctx context.Context) error {
		return again(func() error {
			sent = time.Now()
			rows, err := j.pool.Query(ctx, sql, args...)
			if err != nil {
				return err
			}
			out, won = make(map[string]intentOut, n), 0
			var (
				r     opRow
				fence int64
			)
			_, err = pgx.ForEachRow(rows, append([]any{&fence, &dbNow}, r.dest()...), func() error {
				if r.state == 1 { // inserted: a completed row found has state 2 or 3
					out[r.opID] = intentOut{won: true, sent: sent}
					won++
				} else {
					done := r
					out[r.opID] = intentOut{done: &done, now: dbNow}
				}
				return nil
			})
			return err
		})
	})
	if err != nil {
		return fail(batch, err)
	}
	if len(out) > 0 {
		j.clock.set(dbNow)
	}
	for _, m := range batch {
		m.out = out[m.in.id]
	}
	j.intentRows.Add(uint64(won))
	return nil
}

// commitOutcomes is the outcome group's statement.
func (j *Journal) commitOutcomes(batch []*member[outcomeIn, bool]) error {
	byID(batch, func(in outcomeIn) string { return in.id })
	n := len(batch)
	var (
		ids, keys         = make([]string, n), make([]string, n)
		fences, completed = make([]int64, n), make([]int64, n)
		states, flags     = make([]int16, n), make([]int16, n)
		statuses          = make([]int32, n)
		headers, bodies   = make([][]byte, n), make([][]byte, n)
		updated           map[string]bool
	)
	for i, m := range batch {
		op := &m.in.op
		ids[i], keys[i], fences[i] = m.in.id, op.Key, m.in.fence
		states[i], completed[i], statuses[i], flags[i] = int16(op.State), op.Completed.UnixNano(), int32(op.Status), m.in.flags
		headers[i], bodies[i] = m.in.header, op.Body
	}
	sql, args := outcomeStatement.sql(n, []any{j.opt.Namespace, ids, fences, states, completed, statuses, flags,
		headers, bodies, keys})
	err := j.statement(context.Background(), func(ctx context.Context) error {
		return again(func() error {
			rows, err := j.pool.Query(ctx, sql, args...)
			if err != nil {
				return err
			}
			updated = make(map[string]bool, n)
			var id string
			_, err = pgx.ForEachRow(rows, []any{&id}, func() error {
				updated[id] = true
				return nil
			})
			return err
		})
	})
	if err != nil {
		return fail(batch, err)
	}
	for _, m := range batch {
		m.out = updated[m.in.id]
	}
	return nil
}

// commitReleases is the release group's statement.
func (j *Journal) commitReleases(batch []*member[releaseIn, struct{}]) error {
	byID(batch, func(in releaseIn) string { return in.id })
	ids, fences := make([]string, len(batch)), make([]int64, len(batch))
	for i, m := range batch {
		ids[i], fences[i] = m.in.id, m.in.fence
	}
	sql, args := releaseStatement.sql(len(batch), []any{j.opt.Namespace, ids, fences})
	err := j.statement(context.Background(), func(ctx context.Context) error {
		return again(func() error {
			_, err := j.pool.Exec(ctx, sql, args...)
			return err
		})
	})
	if err != nil {
		return fail(batch, err)
	}
	return nil
}

// again runs fn, and once more (up to three times in all) while the
// database aborts it as a deadlock (40P01) or a serialization failure
// (40001, which CockroachDB and YugabyteDB send where PostgreSQL waits):
// an aborted statement committed nothing.
func again(fn func() error) error {
	var err error
	for range 3 {
		if err = fn(); !isCode(err, "40P01", "40001") {
			return err
		}
	}
	return err
}
