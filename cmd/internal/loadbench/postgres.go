package loadbench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/testserver"
	"github.com/jackc/pgx/v5"
)

// startPostgresServers creates a database for cell seq on the PostgreSQL
// server at adminDSN, starts n reference servers on it, in process, and
// serves them behind one handler that hands the requests to them in turn.
// Closing the endpoint closes the servers and drops the database.
func startPostgresServers(ctx context.Context, adminDSN string, seq, n int, unkeyed bool) (*endpoint, error) {
	if adminDSN == "" {
		return nil, errors.New("loadbench: the server-pg targets need a PostgreSQL DSN")
	}
	if !isURL(adminDSN) {
		return nil, errors.New("loadbench: the server-pg targets need the PostgreSQL DSN as a postgres:// URL, the form the reference server takes")
	}
	// The random part keeps runs that share a server out of each other's
	// databases.
	var random [4]byte
	rand.Read(random[:]) // never fails
	name := "loadbench_server_" + strconv.Itoa(seq) + "_" + hex.EncodeToString(random[:])
	dsn, err := withDatabase(adminDSN, name)
	if err != nil {
		return nil, err
	}
	if err := execAdmin(ctx, adminDSN, "CREATE DATABASE "+name); err != nil {
		return nil, err
	}
	drop := func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = execAdmin(dctx, adminDSN, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	}
	servers := make([]*testserver.Server, 0, n)
	closeServers := func() {
		for _, s := range servers {
			s.Close()
		}
	}
	for range n {
		s, err := testserver.New(postgresServerConfig(dsn, unkeyed))
		if err != nil {
			closeServers()
			drop()
			return nil, fmt.Errorf("loadbench: starting the reference server on PostgreSQL: %w", err)
		}
		servers = append(servers, s)
	}
	var h http.Handler = servers[0]
	if n > 1 {
		h = &inTurn{servers: servers}
	}
	srv := httptest.NewServer(h)
	ep := &endpoint{url: srv.URL + "/reservations", keyed: !unkeyed, close: func() {
		srv.Close()
		closeServers()
		drop()
	}}
	if err := stock(ctx, srv); err != nil {
		ep.close()
		return nil, err
	}
	return ep, nil
}

// postgresServerConfig is the reference server's Config on the PostgreSQL
// database at dsn.
func postgresServerConfig(dsn string, unkeyed bool) testserver.Config {
	return testserver.Config{Path: dsn, DisableIdempotency: unkeyed}
}

// inTurn hands each request to the next of its servers: the load balancer
// of in-process replicas, without a network hop of its own.
type inTurn struct {
	servers []*testserver.Server
	next    atomic.Uint64
}

func (h *inTurn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	i := (h.next.Add(1) - 1) % uint64(len(h.servers))
	h.servers[i].ServeHTTP(w, r)
}

// execAdmin runs statements, one after the other, on a connection of its
// own to the server at dsn.
func execAdmin(ctx context.Context, dsn string, statements ...string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("loadbench: connecting to PostgreSQL: %w", err)
	}
	defer conn.Close(context.Background())
	for _, sql := range statements {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return fmt.Errorf("loadbench: %s: %w", sql, err)
		}
	}
	return nil
}

// isURL reports whether dsn is a postgres:// or postgresql:// URL rather
// than a key=value string.
func isURL(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// withDatabase returns dsn naming the database name instead of its own;
// dsn is a postgres:// URL or a key=value string.
func withDatabase(dsn, name string) (string, error) {
	if isURL(dsn) {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("loadbench: the PostgreSQL DSN is not a URL: %w", err)
		}
		u.Path = "/" + name
		u.RawPath = ""
		return u.String(), nil
	}
	return dsn + " dbname=" + name, nil
}
