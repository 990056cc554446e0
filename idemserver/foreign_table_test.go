package idemserver_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idemkit/idem/idemserver"
)

// TestNewRefusesAForeignKeyTable: a table of the key table's name (or of
// its recovery points' name) that lacks Keys' columns, such as the
// reference server's key table of an older layout, makes New fail with
// ErrForeignTable, and the table and its rows are left as they were.
func TestNewRefusesAForeignKeyTable(t *testing.T) {
	for _, s := range stores {
		for _, tc := range []struct{ name, create string }{
			{"keys", `CREATE TABLE idempotency_keys (client_id TEXT NOT NULL, client_key TEXT NOT NULL, recovery_point TEXT NOT NULL)`},
			{"steps", `CREATE TABLE idempotency_keys_steps (key_id BIGINT NOT NULL, step TEXT NOT NULL)`},
		} {
			t.Run(s.name+"/"+tc.name, func(t *testing.T) {
				db := s.open(t)
				table := "idempotency_keys"
				if tc.name == "steps" {
					table = "idempotency_keys_steps"
				}
				if _, err := db.Exec(tc.create); err != nil {
					t.Fatal(err)
				}
				if _, err := db.Exec(`INSERT INTO ` + table + ` VALUES ('a', 'b', 'c')`); err != nil && tc.name == "keys" {
					t.Fatal(err)
				}
				if tc.name == "steps" {
					if _, err := db.Exec(`INSERT INTO ` + table + ` VALUES (1, 'gateway')`); err != nil {
						t.Fatal(err)
					}
				}
				keys, err := idemserver.New(context.Background(), idemserver.Config{DB: db})
				if !errors.Is(err, idemserver.ErrForeignTable) {
					if keys != nil {
						keys.Close()
					}
					t.Fatalf("New on a foreign %s: %v, want ErrForeignTable", table, err)
				}
				var n int
				if err := db.QueryRow(`SELECT COUNT(*) FROM ` + table).Scan(&n); err != nil || n != 1 {
					t.Fatalf("the foreign %s after New: %d rows, %v; want its 1 row kept", table, n, err)
				}
			})
		}
	}
}
