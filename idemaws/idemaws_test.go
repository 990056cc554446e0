package idemaws_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/cloudcontrol"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/idemaws"
	"github.com/idemkit/idem/journal"
)

// noWait is a retry backoff that does not wait, so that tests do not
// sleep.
type noWait struct{}

func (noWait) BackoffDelay(int, error) (time.Duration, error) { return 0, nil }

// awsConfig is the configuration a program gives the SDK: static
// credentials, the fake endpoint, the standard retryer (without its
// waits), and idemaws installed for every client made from it.
func awsConfig(f *fakeAWS, ops *idemaws.Operations, maxAttempts int) aws.Config {
	cfg := aws.Config{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""),
		BaseEndpoint: aws.String(f.srv.URL),
		HTTPClient:   f.srv.Client(),
		Retryer: func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.Backoff, o.RateLimiter = noWait{}, ratelimit.None
			})
		},
		RetryMaxAttempts: maxAttempts,
	}
	if ops != nil {
		cfg.APIOptions = append(cfg.APIOptions, ops.Install)
	}
	return cfg
}

func openJournal(t *testing.T, path string) *filejournal.Journal {
	t.Helper()
	return openJournalWith(t, path, filejournal.Options{})
}

func openJournalWith(t *testing.T, path string, o filejournal.Options) *filejournal.Journal {
	t.Helper()
	j, err := filejournal.Open(path, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

// testClock is a journal's clock that moves only when the test moves it,
// so that a token's age at each attempt is the test's doing rather than
// the machine's speed.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func newTestClock() *testClock { return &testClock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newOperations(t *testing.T, j journal.Journal) *idemaws.Operations {
	t.Helper()
	ops, err := idemaws.New(idemaws.Config{Journal: j})
	if err != nil {
		t.Fatal(err)
	}
	return ops
}

func bucket(name string) *cloudcontrol.CreateResourceInput {
	return &cloudcontrol.CreateResourceInput{
		TypeName:     aws.String("AWS::S3::Bucket"),
		DesiredState: aws.String(`{"BucketName":"` + name + `"}`),
	}
}

func lookup(t *testing.T, j journal.Journal, id string) journal.Operation {
	t.Helper()
	op, ok, err := j.Lookup(context.Background(), id)
	if err != nil || !ok {
		t.Fatalf("Lookup(%q) = %v, %v", id, ok, err)
	}
	return op
}

func TestA500ThenSuccessSendsOneToken(t *testing.T) {
	f := newFakeAWS(t)
	f.fail = []int{500}
	j := openJournal(t, filepath.Join(t.TempDir(), "journal"))
	client := cloudcontrol.NewFromConfig(awsConfig(f, newOperations(t, j), 0))

	// The intent is journaled, with the token on the wire, before the
	// first byte is sent.
	f.seen = func(token string) {
		op, ok, err := j.Lookup(context.Background(), "bucket-1")
		if err != nil || !ok || op.Key != token || op.State != journal.StatePending {
			t.Errorf("when the endpoint saw token %q, the journal held %+v, %v, %v", token, op, ok, err)
		}
	}
	out, err := client.CreateResource(idem.WithOperation(context.Background(), "bucket-1"), bucket("b1"))
	if err != nil {
		t.Fatal(err)
	}
	wire := f.wire()
	if len(wire) != 2 || wire[0] != wire[1] || wire[0] == "" {
		t.Fatalf("tokens on the wire = %q, want one token, twice", wire)
	}
	if got := aws.ToString(out.ProgressEvent.Identifier); got != "res-1" || f.creations() != 1 {
		t.Fatalf("created %q, %d creations; want res-1, 1", got, f.creations())
	}
	op := lookup(t, j, "bucket-1")
	if op.State != journal.StateDone || op.Key != wire[0] || op.Status != 200 || !bytes.Contains(op.Body, []byte(`"Identifier":"res-1"`)) {
		t.Fatalf("journal holds %s key %s status %d body %s; want done under %s, 200, res-1", op.State, op.Key, op.Status, op.Body, wire[0])
	}
	if op.Method != "AWS" || op.URL != "CloudControl.CreateResource in us-east-1" {
		t.Errorf("journaled %s %s, want AWS CloudControl.CreateResource in us-east-1", op.Method, op.URL)
	}
}

func TestACompletedOperationIsAnsweredFromTheJournal(t *testing.T) {
	f := newFakeAWS(t)
	j := openJournal(t, filepath.Join(t.TempDir(), "journal"))
	client := cloudcontrol.NewFromConfig(awsConfig(f, newOperations(t, j), 0))
	ctx := idem.WithOperation(context.Background(), "bucket-1")
	first, err := client.CreateResource(ctx, bucket("b1"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := client.CreateResource(ctx, bucket("b1"))
	if err != nil {
		t.Fatal(err)
	}
	if f.requests() != 1 {
		t.Fatalf("%d requests reached the endpoint, want 1: the second call is answered from the journal", f.requests())
	}
	if a, b := *first.ProgressEvent, *again.ProgressEvent; aws.ToString(a.Identifier) != aws.ToString(b.Identifier) ||
		aws.ToString(a.RequestToken) != aws.ToString(b.RequestToken) || a.OperationStatus != b.OperationStatus {
		t.Fatalf("the replay answered %+v, the first call %+v", b, a)
	}
	if got, want := awsRequestID(again.ResultMetadata), "req-1"; got != want {
		t.Errorf("the replay's request ID = %q, want the recorded %q", got, want)
	}
}

func TestARejectionIsRecordedAndAnsweredFromTheJournal(t *testing.T) {
	f := newFakeAWS(t)
	f.reject = "InvalidRequestException"
	j := openJournal(t, filepath.Join(t.TempDir(), "journal"))
	client := cloudcontrol.NewFromConfig(awsConfig(f, newOperations(t, j), 0))
	ctx := idem.WithOperation(context.Background(), "bucket-1")
	for i, wantRecorded := range []bool{false, true} {
		_, err := client.CreateResource(ctx, bucket("b1"))
		var oe *idem.OutcomeError
		var api smithy.APIError
		if !errors.Is(err, idem.ErrRejected) || !errors.As(err, &oe) || !errors.As(err, &api) {
			t.Fatalf("call %d: err = %v, want a rejection wrapping the API's error", i, err)
		}
		if api.ErrorCode() != "InvalidRequestException" || oe.Status != 400 || oe.Recorded != wantRecorded {
			t.Fatalf("call %d: code %s, status %d, recorded %v; want InvalidRequestException, 400, %v", i, api.ErrorCode(), oe.Status, oe.Recorded, wantRecorded)
		}
	}
	if f.requests() != 1 {
		t.Fatalf("%d requests reached the endpoint, want 1: a 400 is not retried, and the rejection is recorded", f.requests())
	}
	if op := lookup(t, j, "bucket-1"); op.State != journal.StateRejected || op.Status != 400 {
		t.Fatalf("journal holds %s %d, want rejected 400", op.State, op.Status)
	}
}

func TestAttemptsPerCallAreTheRetryersMaxAttempts(t *testing.T) {
	for _, tc := range []struct{ maxAttempts, want int }{{0, 3}, {1, 1}, {5, 5}} {
		f := newFakeAWS(t)
		f.fail = slices.Repeat([]int{503}, 20)
		j := openJournal(t, filepath.Join(t.TempDir(), "journal"))
		client := cloudcontrol.NewFromConfig(awsConfig(f, newOperations(t, j), tc.maxAttempts))
		ctx := idem.WithOperation(context.Background(), "bucket-1")
		_, err := client.CreateResource(ctx, bucket("b1"))
		var oe *idem.OutcomeError
		if !errors.Is(err, idem.ErrUnknown) || !errors.As(err, &oe) || oe.Attempts != tc.want || oe.Status != 503 {
			t.Fatalf("MaxAttempts %d: err = %v, want unknown after %d attempts", tc.maxAttempts, err, tc.want)
		}
		if f.requests() != tc.want {
			t.Fatalf("MaxAttempts %d: %d requests reached the endpoint, want %d", tc.maxAttempts, f.requests(), tc.want)
		}
		op := lookup(t, j, "bucket-1")
		if op.State != journal.StatePending {
			t.Fatalf("journal holds %s, want pending", op.State)
		}
		// The next call resumes under the same token.
		f.mu.Lock()
		f.fail = nil
		f.mu.Unlock()
		if _, err := client.CreateResource(ctx, bucket("b1")); err != nil {
			t.Fatal(err)
		}
		wire := f.wire()
		if len(wire) != tc.want+1 || slices.ContainsFunc(wire, func(w string) bool { return w != op.Key }) {
			t.Fatalf("MaxAttempts %d: tokens on the wire %q, want %d times %s", tc.maxAttempts, wire, tc.want+1, op.Key)
		}
	}
}

// V2.4: a token the API holds for another request is a final answer: the
// call gets a *TokenReusedError (ErrKeyReused, neither rejected nor
// unknown), the journal records it, a later call is answered from the
// journal without sending, and the record is never a refusal to resend
// under a new token.
func TestATokenHeldForAnotherRequestIsFinal(t *testing.T) {
	f := newFakeAWS(t)
	j := openJournal(t, filepath.Join(t.TempDir(), "journal"))
	client := cloudcontrol.NewFromConfig(awsConfig(f, newOperations(t, j), 0))
	ctx := idem.WithOperation(context.Background(), "bucket-1")
	f.fail = []int{500, 500, 500}
	if _, err := client.CreateResource(ctx, bucket("b1")); !errors.Is(err, idem.ErrUnknown) {
		t.Fatalf("err = %v, want unknown", err)
	}
	// The API meanwhile holds the token for other parameters.
	key := lookup(t, j, "bucket-1").Key
	f.mu.Lock()
	f.byToken[key] = run{params: `{"other":true}`, id: "res-9"}
	f.mu.Unlock()

	for i, recorded := range []bool{false, true} {
		sent := f.requests()
		_, err := client.CreateResource(ctx, bucket("b1"))
		var tr *idemaws.TokenReusedError
		if !errors.As(err, &tr) || !errors.Is(err, idem.ErrKeyReused) || errors.Is(err, idem.ErrUnknown) || errors.Is(err, idem.ErrRejected) {
			t.Fatalf("call %d: err = %v, want a final *TokenReusedError matching ErrKeyReused alone", i, err)
		}
		if tr.Key != key || tr.Code != "ClientTokenConflictException" || tr.Status != 400 || tr.Recorded != recorded {
			t.Fatalf("call %d: %+v; want key %s, ClientTokenConflictException, 400, recorded %v", i, tr, key, recorded)
		}
		var api smithy.APIError
		if !recorded && (!errors.As(err, &api) || api.ErrorCode() != "ClientTokenConflictException") {
			t.Fatalf("call %d: err = %v, want the SDK's error within", i, err)
		}
		if want := sent + 1 - i; f.requests() != want {
			t.Fatalf("call %d: %d requests reached the endpoint, want %d: a recorded mismatch is not sent again", i, f.requests(), want)
		}
	}
	op := lookup(t, j, "bucket-1")
	if op.State != journal.StateRejected || op.Key != key || op.KeyReused != "ClientTokenConflictException" {
		t.Fatalf("journal holds %s %s, key reused %q, want rejected under %s, marked key reused", op.State, op.Key, op.KeyReused, key)
	}
	if op.RefusedWithoutEffect() {
		t.Fatal("a token held for another request is RefusedWithoutEffect: a resend under a new token could apply it twice")
	}
}

func TestAChangedInputIsAMismatch(t *testing.T) {
	f := newFakeAWS(t)
	j := openJournal(t, filepath.Join(t.TempDir(), "journal"))
	client := cloudcontrol.NewFromConfig(awsConfig(f, newOperations(t, j), 0))
	ctx := idem.WithOperation(context.Background(), "bucket-1")
	f.fail = []int{500, 500, 500}
	client.CreateResource(ctx, bucket("b1"))
	sent := f.requests()
	for _, in := range []*cloudcontrol.CreateResourceInput{bucket("b2"), {TypeName: aws.String("AWS::SQS::Queue"), DesiredState: bucket("b1").DesiredState}} {
		_, err := client.CreateResource(ctx, in)
		if !errors.Is(err, idem.ErrMismatch) {
			t.Fatalf("err = %v, want ErrMismatch", err)
		}
	}
	if f.requests() != sent {
		t.Fatalf("a refused call sent %d requests", f.requests()-sent)
	}
}

func TestTheInputsOwnToken(t *testing.T) {
	f := newFakeAWS(t)
	j := openJournal(t, filepath.Join(t.TempDir(), "journal"))
	client := cloudcontrol.NewFromConfig(awsConfig(f, newOperations(t, j), 0))
	ctx := idem.WithOperation(context.Background(), "bucket-1")

	in := bucket("b1")
	in.ClientToken = aws.String("mine")
	if _, err := client.CreateResource(ctx, in); !errors.Is(err, idemaws.ErrTokenSet) || f.requests() != 0 {
		t.Fatalf("err = %v after %d requests, want ErrTokenSet before any", err, f.requests())
	}
	if _, ok, _ := j.Lookup(ctx, "bucket-1"); ok {
		t.Fatal("a refused call left an operation in the journal")
	}
	// The SDK sets the token on the caller's input, as its own token
	// middleware does; the same input is the same call again.
	in = bucket("b1")
	if _, err := client.CreateResource(ctx, in); err != nil {
		t.Fatal(err)
	}
	if key := lookup(t, j, "bucket-1").Key; aws.ToString(in.ClientToken) != key {
		t.Fatalf("the input's token is %q, the operation's %s", aws.ToString(in.ClientToken), key)
	}
	if _, err := client.CreateResource(ctx, in); err != nil || f.requests() != 1 {
		t.Fatalf("again with the token set: err = %v after %d requests, want the recorded answer", err, f.requests())
	}
}

// A1.4: an input whose token is not the one journaled for its operation
// is refused before anything is sent, whether the operation is pending or
// done, and the input keeps its token: the caller's token is never
// silently replaced by the journal's.
func TestAnotherTokenThanTheJournaledOneIsRefused(t *testing.T) {
	f := newFakeAWS(t)
	f.fail = []int{503}
	j := openJournal(t, filepath.Join(t.TempDir(), "journal"))
	client := cloudcontrol.NewFromConfig(awsConfig(f, newOperations(t, j), 1))
	ctx := idem.WithOperation(context.Background(), "bucket-1")
	if _, err := client.CreateResource(ctx, bucket("b1")); !errors.Is(err, idem.ErrUnknown) {
		t.Fatalf("err = %v, want unknown after one 503", err)
	}
	journaled := lookup(t, j, "bucket-1")
	for _, state := range []journal.State{journal.StatePending, journal.StateDone} {
		sent := f.requests()
		in := bucket("b1")
		in.ClientToken = aws.String("mine")
		if _, err := client.CreateResource(ctx, in); !errors.Is(err, idemaws.ErrTokenSet) {
			t.Fatalf("%s operation, input token %q: err = %v, want ErrTokenSet", state, "mine", err)
		}
		if f.requests() != sent {
			t.Fatalf("%s operation: %d requests reached the endpoint, want none", state, f.requests()-sent)
		}
		if got := aws.ToString(in.ClientToken); got != "mine" {
			t.Fatalf("%s operation: the input's token became %q, want the caller's %q", state, got, "mine")
		}
		if op := lookup(t, j, "bucket-1"); op.Key != journaled.Key || op.State != state {
			t.Fatalf("journal holds %s under %s, want %s under %s", op.State, op.Key, state, journaled.Key)
		}
		if state == journal.StatePending { // finish it under its own token
			if _, err := client.CreateResource(ctx, bucket("b1")); err != nil {
				t.Fatal(err)
			}
		}
	}
	if wire := f.wire(); len(wire) != 2 || wire[0] != journaled.Key || wire[1] != journaled.Key {
		t.Fatalf("tokens on the wire %q, want %s twice", wire, journaled.Key)
	}
}

func TestCallsWithoutAnOperationAreTheSDKs(t *testing.T) {
	f := newFakeAWS(t)
	j := openJournal(t, filepath.Join(t.TempDir(), "journal"))
	client := cloudcontrol.NewFromConfig(awsConfig(f, newOperations(t, j), 0))
	for range 2 {
		if _, err := client.CreateResource(context.Background(), bucket("b1")); err != nil {
			t.Fatal(err)
		}
	}
	wire := f.wire()
	if len(wire) != 2 || wire[0] == wire[1] || f.creations() != 2 {
		t.Fatalf("tokens %q, %d creations: want the SDK's own token per call", wire, f.creations())
	}
	if ops, err := j.List(context.Background(), journal.ListAll); err != nil || len(ops) != 0 {
		t.Fatalf("journal lists %d operations (%v), want none", len(ops), err)
	}
}

func TestAnOperationWithoutAClientTokenIsRefused(t *testing.T) {
	f := newFakeAWS(t)
	j := openJournal(t, filepath.Join(t.TempDir(), "journal"))
	client := cloudcontrol.NewFromConfig(awsConfig(f, newOperations(t, j), 0))
	ctx := idem.WithOperation(context.Background(), "read-1")
	_, err := client.GetResource(ctx, &cloudcontrol.GetResourceInput{TypeName: aws.String("AWS::S3::Bucket"), Identifier: aws.String("b1")})
	if !errors.Is(err, idemaws.ErrNoClientToken) || f.requests() != 0 {
		t.Fatalf("err = %v after %d requests, want ErrNoClientToken before any", err, f.requests())
	}
}

func TestECSRunTask(t *testing.T) {
	f := newFakeAWS(t)
	f.fail = []int{502}
	j := openJournal(t, filepath.Join(t.TempDir(), "journal"))
	client := ecs.NewFromConfig(awsConfig(f, newOperations(t, j), 0))
	ctx := idem.WithOperation(context.Background(), "task-1")
	in := func() *ecs.RunTaskInput {
		return &ecs.RunTaskInput{TaskDefinition: aws.String("nightly-report:3"), Cluster: aws.String("batch"), Count: aws.Int32(1)}
	}
	first, err := client.RunTask(ctx, in())
	if err != nil {
		t.Fatal(err)
	}
	again, err := client.RunTask(ctx, in())
	if err != nil {
		t.Fatal(err)
	}
	wire := f.wire()
	key := lookup(t, j, "task-1").Key
	if len(wire) != 2 || wire[0] != key || wire[1] != key || f.creations() != 1 {
		t.Fatalf("tokens on the wire %q, %d creations; want %s twice, 1", wire, f.creations(), key)
	}
	if a, b := aws.ToString(first.Tasks[0].TaskArn), aws.ToString(again.Tasks[0].TaskArn); a != b || a != "arn:aws:ecs:us-east-1:123456789012:task/res-1" {
		t.Fatalf("task ARNs %q and %q, want res-1's, from the journal the second time", a, b)
	}
	if _, err := client.RunTask(ctx, &ecs.RunTaskInput{TaskDefinition: aws.String("nightly-report:4"), Cluster: aws.String("batch"), Count: aws.Int32(1)}); !errors.Is(err, idem.ErrMismatch) {
		t.Fatalf("another task definition under the operation: err = %v, want ErrMismatch", err)
	}
}

// lapsing is a journal whose claims lapse once the first attempt was sent.
type lapsing struct {
	journal.Journal
	f *fakeAWS
}

func (l lapsing) Claim(ctx context.Context, id string) (journal.Claim, error) {
	c, err := l.Journal.Claim(ctx, id)
	if err != nil {
		return nil, err
	}
	lost := make(chan struct{})
	var once sync.Once
	l.f.mu.Lock()
	l.f.seen = func(string) { once.Do(func() { close(lost) }) }
	l.f.mu.Unlock()
	return lapsingClaim{c, lost}, nil
}

type lapsingClaim struct {
	journal.Claim
	lost chan struct{}
}

func (c lapsingClaim) Lost() <-chan struct{} { return c.lost }

func TestNoAttemptAfterTheClaimLapses(t *testing.T) {
	f := newFakeAWS(t)
	f.fail = []int{500, 500, 500}
	j := openJournal(t, filepath.Join(t.TempDir(), "journal"))
	client := cloudcontrol.NewFromConfig(awsConfig(f, newOperations(t, lapsing{j, f}), 0))
	_, err := client.CreateResource(idem.WithOperation(context.Background(), "bucket-1"), bucket("b1"))
	if !errors.Is(err, journal.ErrClaimLost) || !errors.Is(err, idem.ErrUnknown) {
		t.Fatalf("err = %v, want ErrClaimLost, unknown", err)
	}
	if f.requests() != 1 {
		t.Fatalf("%d requests reached the endpoint, want 1: none after the claim lapsed", f.requests())
	}
	if op := lookup(t, j, "bucket-1"); op.State != journal.StatePending {
		t.Fatalf("journal holds %s, want pending", op.State)
	}
}

func TestNewRefusesABadConfig(t *testing.T) {
	j := openJournal(t, filepath.Join(t.TempDir(), "journal"))
	for _, o := range []idemaws.Config{
		{},
		{Journal: j, KeyTTL: -time.Second},
		{Journal: j, MaxRecordedBody: -1},
	} {
		if _, err := idemaws.New(o); !errors.Is(err, idem.ErrInvalidConfig) {
			t.Errorf("New(%+v) = %v, want ErrInvalidConfig", o, err)
		}
	}
}

func awsRequestID(md middleware.Metadata) string {
	id, _ := awsmiddleware.GetRequestIDMetadata(md)
	return id
}

func TestAnExpiredTokenIsNotSentAgain(t *testing.T) {
	f := newFakeAWS(t)
	f.fail = []int{500, 500, 500}
	j := openJournal(t, filepath.Join(t.TempDir(), "journal"))
	const ttl = 200 * time.Millisecond
	ops, err := idemaws.New(idemaws.Config{Journal: j, KeyTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	client := cloudcontrol.NewFromConfig(awsConfig(f, ops, 0))
	ctx := idem.WithOperation(context.Background(), "bucket-1")
	if _, err := client.CreateResource(ctx, bucket("b1")); !errors.Is(err, idem.ErrUnknown) || f.requests() != 3 {
		t.Fatalf("err = %v after %d requests, want unknown after 3", err, f.requests())
	}
	// A token is not sent in the last tenth of its TTL either: an attempt
	// needs time to reach the API.
	for time.Since(lookup(t, j, "bucket-1").Created) < ttl-ttl/10 {
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := client.CreateResource(ctx, bucket("b1")); !errors.Is(err, idem.ErrKeyExpired) || f.requests() != 3 {
		t.Fatalf("err = %v after %d requests, want ErrKeyExpired and no request past the first call's 3", err, f.requests())
	}
}

// TestTheSDKsRetriesStopWhenTheTokenExpires: the SDK's retries are
// attempts of the operation, and none is sent once its token may be
// forgotten: an attempt is sent while the token's age, plus an attempt's
// allowance (a minute of an hour's KeyTTL), is under the KeyTTL, and not
// after; the outcome is unknown, the operation pending. The journal's
// clock is moved by the SDK's backoff, so that the ages are exact
// whatever the machine's load.
func TestTheSDKsRetriesStopWhenTheTokenExpires(t *testing.T) {
	f := newFakeAWS(t)
	f.fail = []int{500, 500, 500}
	clock := newTestClock()
	j, err := filejournal.Open(filepath.Join(t.TempDir(), "journal"), filejournal.Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	ops, err := idemaws.New(idemaws.Config{Journal: j, KeyTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	cfg := awsConfig(f, ops, 0)
	cfg.Retryer = func() aws.Retryer {
		return retry.NewStandard(func(o *retry.StandardOptions) {
			// The second attempt at 58m59s, the last second it may be sent
			// in; the third at 59m01s, past it.
			o.Backoff, o.RateLimiter = clock.waits(58*time.Minute+59*time.Second, 2*time.Second), ratelimit.None
		})
	}
	_, err = cloudcontrol.NewFromConfig(cfg).CreateResource(idem.WithOperation(context.Background(), "bucket-1"), bucket("b1"))
	if !errors.Is(err, idem.ErrKeyExpired) || !errors.Is(err, idem.ErrUnknown) || f.requests() != 2 {
		t.Fatalf("err = %v after %d requests; want unknown with ErrKeyExpired after 2, the third due past the TTL", err, f.requests())
	}
	if op := lookup(t, j, "bucket-1"); op.State != journal.StatePending {
		t.Fatalf("journal holds %s, want pending", op.State)
	}
}

// TestAResumedTokenIsJudgedByTheLifetimeItRecorded is C6.7 through the
// SDK: Operations whose tokens live an hour leave an operation pending;
// two hours later, Operations configured with a day's lifetime do not
// send its token again: the lifetime recorded with the operation says the
// API forgot it an hour ago.
func TestAResumedTokenIsJudgedByTheLifetimeItRecorded(t *testing.T) {
	f := newFakeAWS(t)
	f.fail = []int{500}
	clock := newTestClock()
	j, err := filejournal.Open(filepath.Join(t.TempDir(), "journal"), filejournal.Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	create := func(ttl time.Duration) error {
		ops, err := idemaws.New(idemaws.Config{Journal: j, KeyTTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		_, err = cloudcontrol.NewFromConfig(awsConfig(f, ops, 1)).CreateResource(idem.WithOperation(context.Background(), "bucket-1"), bucket("b1"))
		return err
	}
	if err := create(time.Hour); !errors.Is(err, idem.ErrUnknown) {
		t.Fatalf("first call: %v, want unknown", err)
	}
	if op := lookup(t, j, "bucket-1"); op.State != journal.StatePending || op.KeyTTL != time.Hour {
		t.Fatalf("journal holds %s with KeyTTL %v, want pending with 1h", op.State, op.KeyTTL)
	}
	clock.advance(2 * time.Hour)
	if err := create(24 * time.Hour); !errors.Is(err, idem.ErrKeyExpired) || f.requests() != 1 {
		t.Fatalf("two hours later with a day's lifetime: %v after %d requests, want ErrKeyExpired after the first only", err, f.requests())
	}
}

// waits is a backoff that, before each retry, moves the clock on by the
// next of waits and has the SDK wait no real time.
func (c *testClock) waits(waits ...time.Duration) retry.BackoffDelayer {
	return retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.now, waits = c.now.Add(waits[0]), waits[1:]
		return 0, nil
	})
}

// TestAnInputTheSDKRefusesJournalsNothing: the SDK validates the input
// before idemaws claims the operation, so an input it refuses leaves
// nothing in the journal, and the corrected input is a new operation, not
// a mismatch.
func TestAnInputTheSDKRefusesJournalsNothing(t *testing.T) {
	f := newFakeAWS(t)
	j := openJournal(t, filepath.Join(t.TempDir(), "journal"))
	client := cloudcontrol.NewFromConfig(awsConfig(f, newOperations(t, j), 0))
	ctx := idem.WithOperation(context.Background(), "bucket-1")
	_, err := client.CreateResource(ctx, &cloudcontrol.CreateResourceInput{DesiredState: bucket("b1").DesiredState})
	var invalid smithy.InvalidParamsError
	if !errors.As(err, &invalid) || f.requests() != 0 {
		t.Fatalf("err = %v after %d requests, want the SDK's validation error before any", err, f.requests())
	}
	if _, ok, _ := j.Lookup(ctx, "bucket-1"); ok {
		t.Fatal("an input the SDK refused left an operation in the journal")
	}
	if _, err := client.CreateResource(ctx, bucket("b1")); err != nil || f.creations() != 1 {
		t.Fatalf("the corrected input: err = %v, %d creations", err, f.creations())
	}
}

// V1.1: an operation newer than the table idemaws carries is covered
// when the SDK fills its token: the member the SDK's middleware fills is
// the token, journaled, one token across a retry, answered from the
// journal after.
func TestAnOperationNewerThanTheTableIsFoundByTheSDKsMiddleware(t *testing.T) {
	defer idemaws.ForgetTableEntries("CloudControl.CreateResource")()
	f := newFakeAWS(t)
	f.fail = []int{500}
	j := openJournal(t, filepath.Join(t.TempDir(), "journal"))
	client := cloudcontrol.NewFromConfig(awsConfig(f, newOperations(t, j), 0))
	ctx := idem.WithOperation(context.Background(), "bucket-1")
	for range 2 {
		if _, err := client.CreateResource(ctx, bucket("b1")); err != nil {
			t.Fatal(err)
		}
	}
	wire, key := f.wire(), lookup(t, j, "bucket-1").Key
	if len(wire) != 2 || wire[0] != key || wire[1] != key || f.creations() != 1 {
		t.Fatalf("tokens on the wire %q, %d creations; want %s twice, 1", wire, f.creations(), key)
	}
}
