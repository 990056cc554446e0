package idemaws_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudcontrol"
	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemaws"
	"github.com/idemkit/idem/journal"
)

// Many goroutines of one process call one operation at once: one token,
// one creation (A1.1).
func TestConcurrentCallsInOneProcessSendOneToken(t *testing.T) {
	f := newFakeAWS(t)
	f.fail = []int{500, 503}
	j := openJournal(t, filepath.Join(t.TempDir(), "journal"))
	client := cloudcontrol.NewFromConfig(awsConfig(f, newOperations(t, j), 0))
	var wg sync.WaitGroup
	ids := sync.Map{}
	for range 16 {
		wg.Go(func() {
			out, err := client.CreateResource(idem.WithOperation(context.Background(), "bucket-1"), bucket("b1"))
			if err != nil {
				t.Error(err)
				return
			}
			ids.Store(aws.ToString(out.ProgressEvent.Identifier), true)
		})
	}
	wg.Wait()
	tokens := map[string]bool{}
	for _, w := range f.wire() {
		tokens[w] = true
	}
	if len(tokens) != 1 || f.creations() != 1 {
		t.Fatalf("tokens %v, %d creations", tokens, f.creations())
	}
}

type failingJournal struct {
	journal.Journal
	begin, complete error
}

func (fj failingJournal) Claim(ctx context.Context, id string) (journal.Claim, error) {
	c, err := fj.Journal.Claim(ctx, id)
	if err != nil {
		return nil, err
	}
	return failingClaim{c, fj.begin, fj.complete}, nil
}

type failingClaim struct {
	journal.Claim
	begin, complete error
}

func (c failingClaim) Begin(ctx context.Context, op journal.Operation) error {
	if c.begin != nil {
		return c.begin
	}
	return c.Claim.Begin(ctx, op)
}
func (c failingClaim) Complete(ctx context.Context, op journal.Operation) error {
	if c.complete != nil {
		return c.complete
	}
	return c.Claim.Complete(ctx, op)
}

// A Begin that fails sends nothing; a Complete that fails leaves the
// operation pending, and the next call resends under the same token (A1.1).
func TestBeginAndCompleteErrors(t *testing.T) {
	f := newFakeAWS(t)
	j := openJournal(t, filepath.Join(t.TempDir(), "journal"))
	boom := errors.New("boom")
	c1 := cloudcontrol.NewFromConfig(awsConfig(f, newOperations(t, failingJournal{j, boom, nil}), 0))
	if _, err := c1.CreateResource(idem.WithOperation(context.Background(), "b"), bucket("b1")); !errors.Is(err, boom) || f.requests() != 0 {
		t.Fatalf("begin failing: %v, %d requests", err, f.requests())
	}
	c2 := cloudcontrol.NewFromConfig(awsConfig(f, newOperations(t, failingJournal{j, nil, boom}), 0))
	if _, err := c2.CreateResource(idem.WithOperation(context.Background(), "b"), bucket("b1")); err != nil {
		t.Fatal(err)
	}
	if op := lookup(t, j, "b"); op.State != journal.StatePending {
		t.Fatalf("state %s", op.State)
	}
	c3 := cloudcontrol.NewFromConfig(awsConfig(f, newOperations(t, j), 0))
	if _, err := c3.CreateResource(idem.WithOperation(context.Background(), "b"), bucket("b1")); err != nil {
		t.Fatal(err)
	}
	w := f.wire()
	if len(w) != 2 || w[0] != w[1] || f.creations() != 1 {
		t.Fatalf("wire %q, %d creations", w, f.creations())
	}
}

// The recorded header keeps none of what Do's secrets rule never records
// (A2.1).
func TestSecretHeadersAreNotRecorded(t *testing.T) {
	f := newFakeAWS(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Set-Cookie", "AWSALB=session-secret; Path=/")
		f.serve(w, r)
	}))
	t.Cleanup(srv.Close)
	f.srv = srv
	j := openJournal(t, filepath.Join(t.TempDir(), "journal"))
	if _, err := cloudcontrol.NewFromConfig(awsConfig(f, newOperations(t, j), 0)).CreateResource(idem.WithOperation(context.Background(), "b"), bucket("b1")); err != nil {
		t.Fatal(err)
	}
	if c := lookup(t, j, "b").Header.Get("Set-Cookie"); c != "" {
		t.Errorf("the journal holds Set-Cookie %q; Do records outcomes without it (DefaultUnrecordedHeaders)", c)
	}
}

// A hostile answer's header cannot grow the journal without bound: it is
// recorded within Config.MaxRecordedHeader, as Do records one within
// idem.Config.MaxRecordedHeader, and the operation is still answered from
// the journal (A2.1).
func TestAHugeResponseHeaderIsRecordedWithinItsBound(t *testing.T) {
	f := newFakeAWS(t)
	pad := strings.Repeat("p", 1000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := range 64 {
			w.Header().Set(fmt.Sprintf("X-Pad-%02d", i), pad)
		}
		w.Header().Set("Set-Cookie", "AWSALB=session-secret; Path=/")
		f.serve(w, r)
	}))
	t.Cleanup(srv.Close)
	f.srv = srv
	j := openJournal(t, filepath.Join(t.TempDir(), "journal"))
	ops, err := idemaws.New(idemaws.Config{Journal: j, MaxRecordedHeader: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	client := cloudcontrol.NewFromConfig(awsConfig(f, ops, 0))
	ctx := idem.WithOperation(context.Background(), "b")
	if _, err := client.CreateResource(ctx, bucket("b1")); err != nil {
		t.Fatal(err)
	}
	op := lookup(t, j, "b")
	size := 0
	for name, values := range op.Header {
		for _, v := range values {
			size += len(name) + len(v)
		}
	}
	switch {
	case !op.HeaderTruncated:
		t.Fatalf("HeaderTruncated = false for a %d-field header of 64 KiB", len(op.Header))
	case size > 4<<10:
		t.Fatalf("the journal holds %d bytes of header, want at most 4096", size)
	case op.Header.Get("Content-Type") == "":
		t.Fatalf("the recorded header lost its Content-Type: %v", op.Header)
	case op.Header.Get("Set-Cookie") != "":
		t.Fatalf("the recorded header holds Set-Cookie")
	}
	if _, err := client.CreateResource(ctx, bucket("b1")); err != nil {
		t.Fatalf("answered from the journal: %v", err)
	}
	if f.requests() != 1 {
		t.Fatalf("%d requests reached the endpoint, want 1", f.requests())
	}
}
