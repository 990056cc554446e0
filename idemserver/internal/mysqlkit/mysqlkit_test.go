package mysqlkit_test

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/idemkit/idem/idemserver/internal/mysqlkit"
	"github.com/idemkit/idem/internal/sqlkit"
)

// Every error number the protocol acts on is classified, wrapped or not;
// a failure that will not clear by itself (a syntax error, a wrong
// password, a value too long) is Other.
func TestClass(t *testing.T) {
	for _, c := range []struct {
		err  error
		want sqlkit.Class
	}{
		{&mysql.MySQLError{Number: 1213}, sqlkit.Serialization},
		{fmt.Errorf("committing: %w", &mysql.MySQLError{Number: 1205}), sqlkit.Serialization},
		{&mysql.MySQLError{Number: 1020}, sqlkit.Serialization},
		{&mysql.MySQLError{Number: 1062}, sqlkit.Unique},
		{&mysql.MySQLError{Number: 1040}, sqlkit.Unavailable},
		{&mysql.MySQLError{Number: 1053}, sqlkit.Unavailable},
		{&mysql.MySQLError{Number: 1290}, sqlkit.Unavailable},
		{&mysql.MySQLError{Number: 1792}, sqlkit.Unavailable},
		{&mysql.MySQLError{Number: 1836}, sqlkit.Unavailable},
		{&mysql.MySQLError{Number: 1927}, sqlkit.Unavailable},
		{&mysql.MySQLError{Number: 1317}, sqlkit.Unavailable},
		{&mysql.MySQLError{Number: 1969}, sqlkit.Unavailable},
		{&mysql.MySQLError{Number: 3024}, sqlkit.Unavailable},
		{fmt.Errorf("x: %w", mysql.ErrInvalidConn), sqlkit.Unavailable},
		{driver.ErrBadConn, sqlkit.Unavailable},
		{&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, sqlkit.Unavailable},
		{&mysql.MySQLError{Number: 1064}, sqlkit.Other}, // syntax
		{&mysql.MySQLError{Number: 1045}, sqlkit.Other}, // access denied
		{&mysql.MySQLError{Number: 1406}, sqlkit.Other}, // data too long
		{&mysql.MySQLError{Number: 1452}, sqlkit.Other}, // foreign key
		{errors.New("Error 1213"), sqlkit.Other},
	} {
		if got := mysqlkit.Flavor.Class(c.err); got != c.want {
			t.Errorf("Class(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	if !mysqlkit.Unavailable(mysql.ErrInvalidConn) || mysqlkit.Unavailable(&mysql.MySQLError{Number: 1213}) {
		t.Error("Unavailable disagrees with Class")
	}
}

// The flavour's statements: ? placeholders, ?N expanded with its
// argument repeated, binary key columns, InnoDB tables in utf8mb4.
func TestStatements(t *testing.T) {
	s := sqlkit.NewStmts(mysqlkit.Flavor, map[string]string{"{{t}}": "keys"})
	q, args := s.Bind(`SELECT id FROM {{t}} WHERE a = ?1 OR b = ?1 OR c = ?2{{lock_key}}`, []any{"x", 2})
	if q != `SELECT id FROM keys WHERE a = ? OR b = ? OR c = ? FOR UPDATE` || fmt.Sprint(args) != "[x x 2]" {
		t.Fatalf("Bind: %q %v", q, args)
	}
	if got := s.Text(`CREATE TABLE {{t}} (k {{text}} NOT NULL{{indexes}}){{table_options}}`); got !=
		"CREATE TABLE keys (k VARBINARY(768) NOT NULL,\n\t\tKEY expires (finished, expires_at)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin" {
		t.Fatalf("Text: %q", got)
	}
	if !mysqlkit.Flavor.Driver(&mysql.MySQLDriver{}) || mysqlkit.Flavor.Driver(nil) {
		t.Fatal("Driver does not tell go-sql-driver/mysql's driver")
	}
}
