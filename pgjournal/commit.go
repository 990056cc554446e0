package pgjournal

// The statements of the groups (F10, group.go): each carries every row of
// its batch in arrays, unnested into one INSERT or UPDATE, so a batch is
// one round trip and one commit, and each row keeps its own lease and
// fence. The rows are sent in the order of their IDs' bytes, so that two
// journals whose batches hold the same rows lock them in the same order;
// a statement the database still aborts as a deadlock or a serialization
// failure committed nothing and is sent again.

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/jackc/pgx/v5"
)

// intentSQL inserts each row of the arrays that names an ID with no row,
// with the intent and this Journal's lease (fence 1), and returns the IDs
// it inserted: the rows not returned lost to a row already there.
const intentSQL = `INSERT INTO idem_operations
	(namespace, op_id, op_key, fingerprint, method, url, created_ns, state, lease_owner, lease_until, fence)
	SELECT $1, t.op_id, t.op_key, t.fingerprint, t.method, t.url, t.created_ns,
		1, $8, clock_timestamp() + $9 * interval '1 microsecond', 1
	FROM unnest($2::text[], $3::text[], $4::bytea[], $5::text[], $6::text[], $7::bigint[])
		AS t(op_id, op_key, fingerprint, method, url, created_ns)
	ON CONFLICT (namespace, op_id) DO NOTHING
	RETURNING op_id, clock_timestamp()`

// outcomeSQL records each outcome of the arrays on its row, and gives the
// lease back, where the row still holds the writer's fence (F5) and is
// pending, under the same key if one is given; it returns the IDs it
// updated.
const outcomeSQL = `UPDATE idem_operations AS o
	SET state = u.state, completed_ns = u.completed_ns, status = u.status, flags = u.flags,
		header = u.header, body = u.body, lease_owner = NULL, lease_until = NULL
	FROM unnest($2::text[], $3::bigint[], $4::smallint[], $5::bigint[], $6::integer[], $7::smallint[],
		$8::bytea[], $9::bytea[], $10::text[])
		AS u(op_id, fence, state, completed_ns, status, flags, header, body, op_key)
	WHERE o.namespace = $1 AND o.op_id = u.op_id AND o.fence = u.fence AND o.state = 1
		AND (u.op_key = '' OR o.op_key = u.op_key)
	RETURNING o.op_id`

// releaseSQL gives back each lease of the arrays whose row still holds
// the releaser's fence.
const releaseSQL = `UPDATE idem_operations AS o SET lease_owner = NULL, lease_until = NULL
	FROM unnest($2::text[], $3::bigint[]) AS u(op_id, fence)
	WHERE o.namespace = $1 AND o.op_id = u.op_id AND o.fence = u.fence`

// intentIn is a row of an intent batch; intentOut what its statement
// reported: whether it inserted the row, and when the statement that took
// the lease with it was sent (the lease's local deadline counts from it).
type (
	intentIn struct {
		id string
		op idem.Operation
	}
	intentOut struct {
		won  bool
		sent time.Time
	}
)

// outcomeIn is a row of an outcome batch; its out is whether the row
// took it.
type outcomeIn struct {
	id     string
	fence  int64
	op     idem.Operation
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
		fps                      = make([][]byte, n)
		created                  = make([]int64, n)
	)
	for i, m := range batch {
		op := &m.in.op
		ids[i], keys[i], methods[i], urls[i] = m.in.id, op.Key, op.Method, op.URL
		fps[i], created[i] = op.Fingerprint[:], op.Created.UnixNano()
	}
	var (
		won   map[string]bool
		sent  time.Time
		dbNow time.Time
	)
	err := j.statement(context.Background(), func(ctx context.Context) error {
		return again(func() error {
			sent = time.Now()
			rows, err := j.pool.Query(ctx, intentSQL, j.opt.Namespace, ids, keys, fps, methods, urls, created,
				j.opt.Owner, j.opt.LeaseTTL.Microseconds())
			if err != nil {
				return err
			}
			won = make(map[string]bool, n)
			var id string
			_, err = pgx.ForEachRow(rows, []any{&id, &dbNow}, func() error {
				won[id] = true
				return nil
			})
			return err
		})
	})
	if err != nil {
		return fail(batch, err)
	}
	if len(won) > 0 {
		j.clock.set(dbNow)
	}
	for _, m := range batch {
		m.out = intentOut{won: won[m.in.id], sent: sent}
	}
	j.intentRows.Add(uint64(len(won)))
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
	err := j.statement(context.Background(), func(ctx context.Context) error {
		return again(func() error {
			rows, err := j.pool.Query(ctx, outcomeSQL, j.opt.Namespace, ids, fences, states, completed, statuses, flags,
				headers, bodies, keys)
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
	err := j.statement(context.Background(), func(ctx context.Context) error {
		return again(func() error {
			_, err := j.pool.Exec(ctx, releaseSQL, j.opt.Namespace, ids, fences)
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
