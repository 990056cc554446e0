package idemserver_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemkit/idem/idemserver"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/jackc/pgx/v5/stdlib"
	modernc "modernc.org/sqlite"
)

// mariaDB is a database/sql driver that answers as MariaDB does to the
// questions idemserver asks a database it does not know by its driver.
type mariaDB struct{}

func (mariaDB) Open(string) (driver.Conn, error) { return mariaConn{}, nil }

type mariaConn struct{}

func (mariaConn) Prepare(string) (driver.Stmt, error) { return nil, errors.New("not supported") }
func (mariaConn) Close() error                        { return nil }
func (mariaConn) Begin() (driver.Tx, error)           { return nil, errors.New("not supported") }

func (mariaConn) QueryContext(_ context.Context, query string, _ []driver.NamedValue) (driver.Rows, error) {
	if strings.Contains(query, "version()") && !strings.Contains(query, "sqlite") {
		return &oneValue{v: "10.11.6-MariaDB-0+deb12u1"}, nil
	}
	return nil, errors.New("Error 1305 (42000): FUNCTION sqlite_version does not exist")
}

type oneValue struct {
	v    string
	done bool
}

func (r *oneValue) Columns() []string { return []string{"version()"} }
func (r *oneValue) Close() error      { return nil }
func (r *oneValue) Next(dest []driver.Value) error {
	if r.done {
		return io.EOF
	}
	r.done, dest[0] = true, r.v
	return nil
}

func init() { sql.Register("idemserver-test-mariadb", mariaDB{}) }

// TestNewRefusesADatabaseItDoesNotSpeak proves L1.20: a driver that is
// neither pgx's nor modernc's SQLite, whose database is not PostgreSQL or
// SQLite either, is refused by New with ErrUnsupportedDatabase naming the
// driver and what the database said it is, before any table is touched.
func TestNewRefusesADatabaseItDoesNotSpeak(t *testing.T) {
	db, err := sql.Open("idemserver-test-mariadb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, err = idemserver.New(context.Background(), idemserver.Config{DB: db})
	if !errors.Is(err, idemserver.ErrUnsupportedDatabase) || !strings.Contains(err.Error(), "MariaDB") ||
		!strings.Contains(err.Error(), "idemserver_test.mariaDB") {
		t.Fatalf("New = %v; want ErrUnsupportedDatabase naming the driver and MariaDB", err)
	}
}

// wrapping is a driver that wraps another, as instrumentation does
// (otelsql, sqlhooks): idemserver cannot tell the database by its driver,
// and asks it.
type wrapping struct{ driver.Driver }

// TestNewTellsADatabaseBehindAWrappingDriver proves L1.20 for the drivers
// idemserver speaks: behind a wrapping driver, SQLite and PostgreSQL are
// told by asking, and a key is stored and replayed on each.
func TestNewTellsADatabaseBehindAWrappingDriver(t *testing.T) {
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			inner, dsn := driver.Driver(&modernc.Driver{}), "file:"+filepath.Join(t.TempDir(), "wrapped.db")+"?_pragma=busy_timeout(10000)"
			if s.dialect == "postgres" {
				inner, dsn = stdlib.GetDefaultDriver(), pgtest.NewDatabase(t)
			}
			name := "idemserver-test-wrapped-" + t.Name()
			sql.Register(name, wrapping{inner})
			db, err := sql.Open(name, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if s.dialect != "postgres" {
				db.SetMaxOpenConns(1)
			}
			if _, err := db.Exec(`CREATE TABLE items (id TEXT PRIMARY KEY, note TEXT NOT NULL)`); err != nil {
				t.Fatal(err)
			}
			keys, err := idemserver.New(context.Background(), idemserver.Config{DB: db})
			if err != nil {
				t.Fatalf("New behind a wrapping driver: %v", err)
			}
			defer keys.Close()
			e := &env{t: t, store: s, db: db, keys: keys}
			h := keys.Handle(idemserver.Route{}, &insertItem{e: e})
			first, again := do(t, h, "POST", "/items", "k", "a"), do(t, h, "POST", "/items", "k", "a")
			if first.status != 201 || again.status != 201 || again.header.Get("Idempotent-Replayed") != "true" || e.count("items") != 1 {
				t.Fatalf("first %+v, again %+v, %d items; want 201, its replay, one item", first, again, e.count("items"))
			}
		})
	}
}

// downDB is a database/sql driver whose database cannot be reached.
type downDB struct{}

func (downDB) Open(string) (driver.Conn, error) {
	return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
}

func init() { sql.Register("idemserver-test-down", downDB{}) }

// TestNewSaysADatabaseItCannotReachIsUnavailable: behind a driver it does
// not know, a database New cannot reach is ErrUnavailable, not
// ErrUnsupportedDatabase: it may well be PostgreSQL (L1.20).
func TestNewSaysADatabaseItCannotReachIsUnavailable(t *testing.T) {
	db, err := sql.Open("idemserver-test-down", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, err = idemserver.New(context.Background(), idemserver.Config{DB: db})
	if !errors.Is(err, idemserver.ErrUnavailable) || errors.Is(err, idemserver.ErrUnsupportedDatabase) {
		t.Fatalf("New = %v; want ErrUnavailable", err)
	}
}
