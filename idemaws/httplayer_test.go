package idemaws_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/cloudcontrol"
	"github.com/aws/smithy-go/middleware"
	"github.com/idemkit/idem"
	"github.com/idemkit/idem/journal"
)

// attempts counts the attempts the SDK makes: a middleware next to the
// transport.
type attempts struct{ n int }

func (*attempts) ID() string { return "CountAttempts" }

func (a *attempts) HandleDeserialize(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (
	middleware.DeserializeOutput, middleware.Metadata, error,
) {
	a.n++
	return next.HandleDeserialize(ctx, in)
}

// sdkOverIdem is a Cloud Control client whose HTTP client is idem's, as a
// user tries first: the SDK's own token, and idem below the signature.
func sdkOverIdem(t *testing.T, f *fakeAWS, cfg idem.Config) (*cloudcontrol.Client, *attempts) {
	t.Helper()
	c, err := idem.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	count := &attempts{}
	awsCfg := awsConfig(f, nil, 0)
	awsCfg.HTTPClient = c.StandardClient()
	awsCfg.APIOptions = append(awsCfg.APIOptions, func(s *middleware.Stack) error { return s.Deserialize.Add(count, middleware.After) })
	return cloudcontrol.NewFromConfig(awsCfg), count
}

func TestTheBodyDialectUnderTheSDKFailsClearlyAndOnce(t *testing.T) {
	f := newFakeAWS(t)
	client, count := sdkOverIdem(t, f, idem.Config{Dialect: idem.AWSCloudControl(), HTTPClient: f.srv.Client()})
	_, err := client.CreateResource(idem.WithOperation(context.Background(), "bucket-1"), bucket("b1"))
	if !errors.Is(err, idem.ErrBodyNotObject) || !strings.Contains(err.Error(), "package idemaws") {
		t.Fatalf("err = %v, want ErrBodyNotObject naming idemaws", err)
	}
	if count.n != 1 || f.requests() != 0 {
		t.Fatalf("the SDK made %d attempts and the endpoint saw %d requests; want 1 and 0: a refusal is not retried", count.n, f.requests())
	}
}

func TestIdemsRetriesAreNotMultipliedByTheSDKs(t *testing.T) {
	f := newFakeAWS(t)
	f.fail = make([]int, 20)
	for i := range f.fail {
		f.fail[i] = 503
	}
	client, count := sdkOverIdem(t, f, idem.Config{MaxAttempts: 4, InitialWait: time.Millisecond, MaxWait: time.Millisecond, HTTPClient: f.srv.Client()})
	_, err := client.CreateResource(idem.WithOperation(context.Background(), "bucket-1"), bucket("b1"))
	var oe *idem.OutcomeError
	if !errors.As(err, &oe) || oe.Outcome != idem.OutcomeUnknown || oe.Attempts != 4 {
		t.Fatalf("err = %v, want idem's unknown outcome after its 4 attempts", err)
	}
	if count.n != 1 || f.requests() != 4 {
		t.Fatalf("the SDK made %d attempts and the endpoint saw %d requests; want 1 and 4", count.n, f.requests())
	}
}

// TestAnIdemHTTPClientBelowIdemawsDoesNotClaimTheOperationAgain: with
// idemaws installed and, against the advice, an idem StandardClient as
// the SDK's HTTP client on the same journal, the call ends instead of
// waiting for its own claim, and the journal holds the operation once.
func TestAnIdemHTTPClientBelowIdemawsDoesNotClaimTheOperationAgain(t *testing.T) {
	f := newFakeAWS(t)
	j := openJournal(t, filepath.Join(t.TempDir(), "journal"))
	c, err := idem.New(idem.Config{Journal: j, HTTPClient: f.srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	cfg := awsConfig(f, newOperations(t, j), 0)
	cfg.HTTPClient = c.StandardClient()
	ctx, cancel := context.WithTimeout(idem.WithOperation(context.Background(), "bucket-1"), time.Minute)
	defer cancel()
	if _, err := cloudcontrol.NewFromConfig(cfg).CreateResource(ctx, bucket("b1")); err != nil {
		t.Fatal(err)
	}
	ops, err := j.List(ctx, journal.ListAll)
	if err != nil || len(ops) != 1 || ops[0].ID != "bucket-1" || ops[0].State != journal.StateDone {
		t.Fatalf("journal lists %+v (%v), want bucket-1 done alone", ops, err)
	}
}
