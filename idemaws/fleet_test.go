package idemaws_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudcontrol"
	"github.com/idemkit/idem"
	"github.com/idemkit/idem/journal"
	"github.com/idemkit/idem/lab/testkit/pgtest"
	"github.com/idemkit/idem/pgjournal"
)

// TestAFleetSendsOneTokenPerOperation: three machines share a PostgreSQL
// journal, and each runs every operation of a batch at once, four callers
// each, against an endpoint whose first answer is a 500. Each operation
// is created once, under one token, and every caller gets its result.
func TestAFleetSendsOneTokenPerOperation(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	f := newFakeAWS(t)
	f.fail = []int{500}
	const machines, callers, operations = 3, 4, 10
	var clients []*cloudcontrol.Client
	var journals []*pgjournal.Journal
	for range machines {
		j, err := pgjournal.Open(t.Context(), dsn, pgjournal.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { j.Close() })
		journals = append(journals, j)
		clients = append(clients, cloudcontrol.NewFromConfig(awsConfig(f, newOperations(t, j), 0)))
	}
	got := make(map[string]map[string]bool) // operation → identifiers its callers got
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, client := range clients {
		for range callers {
			wg.Go(func() {
				for i := range operations {
					id := fmt.Sprintf("bucket-%d", i)
					out, err := client.CreateResource(idem.WithOperation(context.Background(), id), bucket(id))
					if err != nil {
						t.Errorf("%s: %v", id, err)
						continue
					}
					mu.Lock()
					if got[id] == nil {
						got[id] = map[string]bool{}
					}
					got[id][aws.ToString(out.ProgressEvent.Identifier)] = true
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	if f.creations() != operations {
		t.Fatalf("%d creations, want %d", f.creations(), operations)
	}
	tokens := map[string]bool{}
	for _, w := range f.wire() {
		tokens[w] = true
	}
	if len(tokens) != operations {
		t.Fatalf("%d tokens on the wire, want one per operation, %d", len(tokens), operations)
	}
	for i := range operations {
		id := fmt.Sprintf("bucket-%d", i)
		op := lookup(t, journals[0], id)
		if len(got[id]) != 1 || op.State != journal.StateDone || !tokens[op.Key] {
			t.Errorf("%s: callers got %v; journal holds %s under %s", id, got[id], op.State, op.Key)
		}
	}
}
