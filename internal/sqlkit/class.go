package sqlkit

import (
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"
)

// Class is what an error of a database says about the statement or
// transaction that met it.
type Class uint8

const (
	// Other is any other failure: it will not clear by itself.
	Other Class = iota
	// Unavailable: the database could not be reached, is starting or
	// stopping, refuses connections, or is busy; a later try may work.
	Unavailable
	// Serialization: a serialization failure or a deadlock; the
	// transaction did nothing and may run again from its start.
	Serialization
	// Unique: a unique violation.
	Unique
)

// sqlStater is an error carrying an SQLSTATE, as pgx's *pgconn.PgError
// does.
type sqlStater interface{ SQLState() string }

// Generic classifies err by what any driver may return: a connection the
// pool found broken, a network error, a connection closed under the
// statement, or an error carrying an SQLSTATE (see SQLState). It is
// Other for anything else.
func Generic(err error) Class {
	if err == nil {
		return Other
	}
	var st sqlStater
	if errors.As(err, &st) {
		return SQLState(st.SQLState())
	}
	var oe *net.OpError
	if errors.Is(err, driver.ErrBadConn) || errors.As(err, &oe) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return Unavailable
	}
	return Other
}

// SQLState classifies an SQLSTATE of PostgreSQL's (and the standard's):
// serialization failure 40001 and deadlock 40P01 are Serialization; unique
// violation 23505 is Unique; connection exceptions (class 08), too many
// connections (53300), a server shutting down or starting (57P01-57P03),
// a statement cancelled by statement_timeout (57014) and a server that
// takes no writes (25006, a standby) are Unavailable.
func SQLState(code string) Class {
	switch {
	case code == "40001" || code == "40P01":
		return Serialization
	case code == "23505":
		return Unique
	case strings.HasPrefix(code, "08") || code == "53300" || code == "57P01" || code == "57P02" ||
		code == "57P03" || code == "57014" || code == "25006":
		return Unavailable
	}
	return Other
}
