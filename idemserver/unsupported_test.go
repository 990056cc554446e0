package idemserver_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/idemkit/idem/idemserver"
	"github.com/idemkit/idem/lab/testkit/mysqltest"
	"github.com/idemkit/idem/lab/testkit/pgtest"
	"github.com/jackc/pgx/v5/stdlib"
	modernc "modernc.org/sqlite"
)

// oracle is a database/sql driver that answers as Oracle does to the
// questions idemserver asks a database it does not know by its driver:
// none of them is Oracle's SQL.
type oracle struct{}

func (oracle) Open(string) (driver.Conn, error) { return oracleConn{}, nil }

type oracleConn struct{}

func (oracleConn) Prepare(string) (driver.Stmt, error) { return nil, errors.New("not supported") }
func (oracleConn) Close() error                        { return nil }
func (oracleConn) Begin() (driver.Tx, error)           { return nil, errors.New("not supported") }

func (oracleConn) QueryContext(context.Context, string, []driver.NamedValue) (driver.Rows, error) {
	return nil, errors.New("ORA-00923: FROM keyword not found where expected")
}

func init() { sql.Register("idemserver-test-oracle", oracle{}) }

// TestNewRefusesADatabaseItDoesNotSpeak proves L1.20: a driver that is
// none of the flavours' (pgx's, modernc's SQLite, go-sql-driver/mysql),
// whose database is not PostgreSQL, SQLite or MySQL either, is refused by
// New with ErrUnsupportedDatabase naming the driver, the databases the
// program speaks and what the database said, before any table is
// touched.
func TestNewRefusesADatabaseItDoesNotSpeak(t *testing.T) {
	db, err := sql.Open("idemserver-test-oracle", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, err = idemserver.New(context.Background(), idemserver.Config{DB: db})
	if !errors.Is(err, idemserver.ErrUnsupportedDatabase) || !strings.Contains(err.Error(), "ORA-00923") ||
		!strings.Contains(err.Error(), "idemserver_test.oracle") {
		t.Fatalf("New = %v; want ErrUnsupportedDatabase naming the driver and what Oracle said", err)
	}
	for _, name := range []string{"SQLite", "PostgreSQL", "MySQL (github.com/idemkit/idem/idemserver/mysql)"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("New = %v; want it to name %s among the databases spoken", err, name)
		}
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
			switch s.dialect {
			case "postgres":
				inner, dsn = stdlib.GetDefaultDriver(), pgtest.NewDatabase(t)
			case "mysql":
				inner, dsn = &mysql.MySQLDriver{}, mysqltest.NewDatabase(t)
			}
			name := "idemserver-test-wrapped-" + t.Name()
			sql.Register(name, wrapping{inner})
			db, err := sql.Open(name, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if s.dialect == "sqlite" {
				db.SetMaxOpenConns(1)
			}
			e := &env{t: t, store: s, db: db}
			if _, err := db.Exec(e.ddl(`CREATE TABLE items (id TEXT PRIMARY KEY, note TEXT NOT NULL)`)); err != nil {
				t.Fatal(err)
			}
			keys, err := idemserver.New(context.Background(), idemserver.Config{DB: db})
			if err != nil {
				t.Fatalf("New behind a wrapping driver: %v", err)
			}
			defer keys.Close()
			e.keys = keys
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
