package testserver

import (
	"context"
	"database/sql"
	"testing"
)

// S3.7: on SQLite every connection of the server and of its gateway, the
// writer's and each reader's, runs in WAL mode with synchronous=FULL, read
// back from the database: a commit that COMMIT reported done survives a
// power cut, so a stored answer is as durable as the effect it names.
func TestS3SQLiteCommitsAreDurable(t *testing.T) {
	in := start(t, Config{})
	ctx := context.Background()
	pools := []struct {
		name  string
		db    *sql.DB
		conns int
	}{
		{"the server's writer", in.Server.db.write, 1},
		{"the server's readers", in.Server.db.read, serverReaders},
		{"the gateway's", in.Server.gateway.db.write, 1},
	}
	for _, p := range pools {
		var held []*sql.Conn
		for i := range p.conns { // held at once: each is a connection of its own
			c, err := p.db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, c)
			var mode string
			var sync int
			if err := c.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil {
				t.Fatal(err)
			}
			if err := c.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&sync); err != nil {
				t.Fatal(err)
			}
			if mode != "wal" || sync != 2 {
				t.Errorf("%s, connection %d: journal_mode %s, synchronous %d; want wal, 2 (FULL)", p.name, i+1, mode, sync)
			}
		}
		for _, c := range held {
			c.Close()
		}
	}
}
