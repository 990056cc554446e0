package pgjournal_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/journal"
	"github.com/idemkit/idem/lab/testkit/pgtest"
	"github.com/idemkit/idem/pgjournal"
)

// tracer records the SQL of every statement a pool sends, and calls
// before, if set, with each before it is sent.
type tracer struct {
	mu     sync.Mutex
	sql    []string
	before func(sql string)
	after  func(sql string) // once the statement's answer is read, before its caller gets it
}

// tracedSQL carries a statement's text from its start to its end.
type tracedSQL struct{}

func (tr *tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	tr.mu.Lock()
	tr.sql = append(tr.sql, d.SQL)
	before := tr.before
	tr.mu.Unlock()
	if before != nil {
		before(d.SQL)
	}
	return context.WithValue(ctx, tracedSQL{}, d.SQL)
}

func (tr *tracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	tr.mu.Lock()
	after := tr.after
	tr.mu.Unlock()
	if sql, ok := ctx.Value(tracedSQL{}).(string); ok && after != nil {
		after(sql)
	}
}

// take returns the statements sent since the last take.
func (tr *tracer) take() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	s := tr.sql
	tr.sql = nil
	return s
}

// takeOps returns the statements sent since the last take, but for those
// of the journal's liveness (F11): they come on their own clock, and
// their count is the journal's, not the operations'.
func (tr *tracer) takeOps() []string {
	var ops []string
	for _, sql := range tr.take() {
		if !strings.Contains(sql, "idem_lives") || strings.Contains(sql, "idem_operations") {
			ops = append(ops, sql)
		}
	}
	return ops
}

// tracedJournal opens a journal on dsn through a pool whose statements tr
// records, in the mode Open gives its own pools.
func tracedJournal(t *testing.T, dsn string, o pgjournal.Options, tr *tracer) *pgjournal.Journal {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	cfg.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if o.Logger == nil {
		o.Logger = quiet
	}
	j, err := pgjournal.New(context.Background(), pool, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	tr.take()
	return j
}

// TestAnOperationIsOneStatementEachWay is F10.6: through Do, a new
// operation costs two statements, its intent (with the claim) and its
// outcome (with the release), each in the single-row form a lone caller
// sends; the replay of a completed one costs one, the insert that loses
// to the row and reports it; and a batch of intents carries its rows in
// arrays. The journal's first claim also starts its liveness (F11.1),
// once.
func TestAnOperationIsOneStatementEachWay(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	tr := &tracer{}
	j := tracedJournal(t, dsn, pgjournal.Options{Owner: "a"}, tr)
	s := newServer(t)
	c := client(t, j)
	ctx := context.Background()
	do := func() {
		t.Helper()
		resp, err := c.Do("op", s.post(t, ctx))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	do()
	sql := tr.take()
	if len(sql) == 0 || !strings.Contains(sql[0], "INSERT INTO idem_lives") {
		t.Fatalf("the journal's first claim sent %q first; want the start of its liveness", sql)
	}
	if sql := sql[1:]; len(sql) != 2 || !isOne(sql[0], "INSERT INTO idem_operations") || !isOne(sql[1], "UPDATE idem_operations") {
		t.Fatalf("a new operation sent %d statements %q; want its intent, then its outcome, each for one row", len(sql), sql)
	}
	do()
	if n, _ := s.requests(); n != 1 {
		t.Fatalf("the server got %d requests, want 1: the second Do answers from the record", n)
	}
	if sql := tr.takeOps(); len(sql) != 1 || !isOne(sql[0], "INSERT INTO idem_operations") {
		t.Fatalf("the replay of a completed operation sent %d statements %q; want the one insert that found it", len(sql), sql)
	}

	// A completed operation found by a batch's statement is claimed
	// from it too: its claim needs no statement of its own.
	b := tracedJournal(t, dsn, pgjournal.Options{Owner: "b"}, tr)
	g := watchGroups(b, "intent", "hold")
	held := make(chan error, 1)
	go func() {
		c, err := b.ClaimBegin(ctx, journal.Operation{ID: "hold", Key: "key-hold", KeyTTL: 24 * time.Hour, State: journal.StatePending})
		if err == nil {
			c.Release()
		}
		held <- err
	}()
	<-g.leading
	done := make(chan journal.Claim, 1)
	go func() {
		c, err := b.ClaimBegin(ctx, journal.Operation{ID: "op", Key: "key-b", KeyTTL: 24 * time.Hour, State: journal.StatePending})
		if err != nil {
			t.Error(err)
		}
		done <- c
	}()
	fresh := make(chan error, 1)
	go func() {
		c, err := b.ClaimBegin(ctx, journal.Operation{ID: "new", Key: "key-new", KeyTTL: 24 * time.Hour, State: journal.StatePending})
		if err == nil {
			c.Release()
		}
		fresh <- err
	}()
	g.waitQueued(2)
	tr.take()
	close(g.release)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	claim := <-done
	if err := <-fresh; err != nil {
		t.Fatal(err)
	}
	op, ok := claim.Operation()
	claim.Release()
	if !ok || op.State != journal.StateDone || op.Key == "key-b" || op.Status != http.StatusCreated {
		t.Errorf("ClaimBegin(op) in a batch: %+v %v; want a's outcome under a's key", op, ok)
	}
	var intents []string
	for _, sql := range tr.takeOps() {
		switch {
		case strings.Contains(sql, "INSERT INTO idem_operations"):
			intents = append(intents, sql)
		case strings.HasPrefix(strings.TrimSpace(sql), "SELECT"):
			t.Errorf("a claim in the batch read a row again: %q", sql)
		}
	}
	if len(intents) != 2 || !isOne(intents[0], "INSERT") || isOne(intents[1], "INSERT") || !strings.Contains(intents[1], "unnest(") {
		t.Errorf("intents sent %q; want the held one for one row, then one over arrays for the two queued behind it", intents)
	}
	statements, _ := g.seen()
	if want := [][]string{{"hold"}, {"new", "op"}}; fmt.Sprint(statements) != fmt.Sprint(want) {
		t.Errorf("intent statements %q, want %q", statements, want)
	}
}

// isOne reports whether sql is a statement of verb in the form for one
// row: no arrays.
func isOne(sql, verb string) bool {
	return strings.Contains(sql, verb) && !strings.Contains(sql, "unnest(")
}

// TestSharedStatementsFindRowsByTheirKey is F10.7: each shared statement
// that reads the table (the outcome and the release; the intent's insert
// finds its conflicts through the primary key without a plan of its own),
// in both its forms, finds its rows through the primary key, namespace
// and ID, even where the table's statistics do not know the namespace
// yet and it holds many pending rows: no plan reads the table by the
// namespace alone, which would scan every one of those rows for every
// statement.
func TestSharedStatementsFindRowsByTheirKey(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	openJournal(t, dsn, pgjournal.Options{})
	exec(t, dsn, `ALTER TABLE idem_operations SET (autovacuum_enabled = false)`)
	exec(t, dsn, `INSERT INTO idem_operations (namespace, op_id, op_key, fingerprint, state, created_ns)
		SELECT 'known', 'k' || g, 'key', '\x00', 2, g FROM generate_series(1, 1000) AS g`)
	exec(t, dsn, `ANALYZE idem_operations`)
	// Statistics that know only "known": the rows of "new" come after.
	exec(t, dsn, `INSERT INTO idem_operations (namespace, op_id, op_key, fingerprint, state, created_ns, fence)
		SELECT 'new', 'p' || g, 'key', '\x00', 1, g, 1 FROM generate_series(1, 20000) AS g`)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	args := map[string][2][]any{
		"outcome": {
			{"new", []string{"p1", "p2"}, []int64{1, 1}, []int16{2, 2}, []int64{5, 5}, []int32{201, 201}, []int16{0, 0},
				[][]byte{nil, nil}, [][]byte{nil, nil}, []string{"", ""}},
			{"new", "p1", int64(1), int16(2), int64(5), int32(201), int16(0), []byte(nil), []byte(nil), ""},
		},
		"release": {
			{"new", []string{"p1", "p2"}, []int64{1, 1}},
			{"new", "p1", int64(1)},
		},
	}
	for kind, forms := range pgjournal.SharedStatements() {
		for i, sql := range forms {
			name := kind + [2]string{" over arrays", " for one row"}[i]
			var plan []byte
			if err := conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+sql, args[kind][i]...).Scan(&plan); err != nil {
				t.Fatalf("%s: EXPLAIN: %v", name, err)
			}
			var doc []struct{ Plan node }
			if err := json.Unmarshal(plan, &doc); err != nil || len(doc) != 1 {
				t.Fatalf("%s: plan %s: %v", name, plan, err)
			}
			reads := 0
			doc[0].Plan.walk(func(n node) {
				if n.Relation != "idem_operations" || n.Type == "ModifyTable" {
					return
				}
				reads++
				by := []node{n}
				if n.Type == "Bitmap Heap Scan" {
					by = n.Plans // its Bitmap Index Scans
				}
				for _, b := range by {
					if b.Index != "idem_operations_pkey" || !strings.Contains(b.Cond, "op_id") {
						t.Errorf("%s reads the table by %s %s, condition %q; want the primary key by ID\n%s", name, b.Type, b.Index, b.Cond, plan)
					}
				}
			})
			if reads != 1 {
				t.Errorf("%s: %d reads of the table, want 1\n%s", name, reads, plan)
			}
		}
	}
}

// node is a node of a JSON plan.
type node struct {
	Type     string `json:"Node Type"`
	Relation string `json:"Relation Name"`
	Index    string `json:"Index Name"`
	Cond     string `json:"Index Cond"`
	Plans    []node `json:"Plans"`
}

func (n node) walk(fn func(node)) {
	fn(n)
	for _, c := range n.Plans {
		c.walk(fn)
	}
}
