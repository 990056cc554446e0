package idemaws_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	"github.com/aws/aws-sdk-go-v2/service/cloudcontrol"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/idemaws"
	"github.com/idemkit/idem/journal"
)

// countAttempts counts the SDK's attempts in the Finalize step, after the
// retry loop: replays from the journal included.
type countAttempts struct {
	mu sync.Mutex
	n  int
}

func (*countAttempts) ID() string { return "CountFinalizes" }
func (c *countAttempts) HandleFinalize(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (
	middleware.FinalizeOutput, middleware.Metadata, error,
) {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return next.HandleFinalize(ctx, in)
}
func (c *countAttempts) get() int { c.mu.Lock(); defer c.mu.Unlock(); return c.n }

// A throttle (400 ThrottlingException, which the SDK retries) and then the
// caller's context ending during the SDK's wait is unknown, not a
// rejection: the outcome is read from how the call ended, not from an
// earlier attempt's answer (A2.6). The context ends when the SDK starts
// that wait, whatever the machine's load.
func TestAThrottleThenACancelIsUnknown(t *testing.T) {
	f := newFakeAWS(t)
	f.reject = "ThrottlingException" // 400, a throttle the SDK retries
	j := openJournal(t, filepath.Join(t.TempDir(), "journal"))
	ctx, cancel := context.WithCancel(idem.WithOperation(context.Background(), "bucket-1"))
	defer cancel()
	cfg := awsConfig(f, newOperations(t, j), 0)
	cfg.Retryer = func() aws.Retryer {
		return retry.NewStandard(func(o *retry.StandardOptions) {
			o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) {
				cancel() // the caller gives up as the SDK starts waiting
				return time.Hour, nil
			})
			o.RateLimiter = ratelimit.None
		})
	}
	client := cloudcontrol.NewFromConfig(cfg)
	_, err := client.CreateResource(ctx, bucket("b1"))
	if errors.Is(err, idem.ErrRejected) || !errors.Is(err, idem.ErrUnknown) || !errors.Is(err, context.Canceled) || f.requests() != 1 {
		t.Errorf("the caller gave up during the SDK's backoff after a throttle: %v after %d requests; want unknown, not rejected, after 1", err, f.requests())
	}
	if op := lookup(t, j, "bucket-1"); op.State != journal.StatePending {
		t.Errorf("journal holds %s %d after a throttle and a cancel; want pending", op.State, op.Status)
	}
	// Throttling is over: the operation should now be applied.
	f.mu.Lock()
	f.reject = ""
	f.mu.Unlock()
	_, err = client.CreateResource(idem.WithOperation(context.Background(), "bucket-1"), bucket("b1"))
	if err != nil || f.creations() != 1 {
		t.Errorf("after the throttling ended: err = %v, %d creations, %d requests; want the bucket created", err, f.creations(), f.requests())
	}
}

// lostOnBackoff is a journal whose claims lapse when the SDK starts
// waiting before a retry (as a lease not renewed during a long backoff).
type lostOnBackoff struct {
	journal.Journal
	lost chan struct{}
}

func (l *lostOnBackoff) Claim(ctx context.Context, id string) (journal.Claim, error) {
	c, err := l.Journal.Claim(ctx, id)
	if err != nil {
		return nil, err
	}
	return lapsingClaim{c, l.lost}, nil
}

type lapseOnDelay struct {
	once *sync.Once
	lost chan struct{}
}

func (d lapseOnDelay) BackoffDelay(int, error) (time.Duration, error) {
	d.once.Do(func() { close(d.lost) })
	return 500 * time.Millisecond, nil
}

// The same when the claim lapses during the wait: unknown with
// ErrClaimLost, nothing recorded (A2.6, A3.2).
func TestAThrottleThenALapsedClaimIsUnknown(t *testing.T) {
	f := newFakeAWS(t)
	f.reject = "ThrottlingException"
	j := openJournal(t, filepath.Join(t.TempDir(), "journal"))
	lj := &lostOnBackoff{Journal: j, lost: make(chan struct{})}
	cfg := awsConfig(f, newOperations(t, lj), 0)
	cfg.Retryer = func() aws.Retryer {
		return retry.NewStandard(func(o *retry.StandardOptions) {
			o.Backoff, o.RateLimiter = lapseOnDelay{&sync.Once{}, lj.lost}, ratelimit.None
		})
	}
	_, err := cloudcontrol.NewFromConfig(cfg).CreateResource(idem.WithOperation(context.Background(), "bucket-1"), bucket("b1"))
	if !errors.Is(err, journal.ErrClaimLost) || !errors.Is(err, idem.ErrUnknown) {
		t.Errorf("claim lapsed during the backoff after a throttle: err = %v; want ErrClaimLost, unknown", err)
	}
	if op := lookup(t, j, "bucket-1"); op.State != journal.StatePending {
		t.Errorf("journal holds %s; want pending", op.State)
	}
}

// An error the client's own retryer retries, though the SDK's defaults do
// not, is unknown once its attempts run out, not a rejection (A2.6).
func TestAnErrorTheRetryerRetriesIsUnknown(t *testing.T) {
	f := newFakeAWS(t)
	f.reject = "ConcurrentOperationException" // Cloud Control: another operation on the resource is in progress
	j := openJournal(t, filepath.Join(t.TempDir(), "journal"))
	cfg := awsConfig(f, newOperations(t, j), 0)
	cfg.Retryer = func() aws.Retryer {
		return retry.AddWithErrorCodes(retry.NewStandard(func(o *retry.StandardOptions) {
			o.Backoff, o.RateLimiter = noWait{}, ratelimit.None
		}), "ConcurrentOperationException")
	}
	count := &countAttempts{}
	cfg.APIOptions = append(cfg.APIOptions, func(s *middleware.Stack) error { return s.Finalize.Insert(count, "Retry", middleware.After) })
	client := cloudcontrol.NewFromConfig(cfg)
	ctx := idem.WithOperation(context.Background(), "bucket-1")
	_, err := client.CreateResource(ctx, bucket("b1"))
	if !errors.Is(err, idem.ErrUnknown) || f.requests() != 3 {
		t.Errorf("after the retryer's 3 attempts on a retryable error: err = %v, %d requests; want unknown", err, f.requests())
	}
	if op := lookup(t, j, "bucket-1"); op.State != journal.StatePending {
		t.Errorf("journal holds %s %d; want pending", op.State, op.Status)
	}
	f.mu.Lock()
	f.reject = ""
	f.mu.Unlock()
	before := count.get()
	_, err = client.CreateResource(ctx, bucket("b1"))
	t.Logf("second call: err = %v; SDK attempts %d, requests %d", err, count.get()-before, f.requests())
	if err != nil || f.creations() != 1 {
		t.Errorf("the retryable condition is over, yet: err = %v, %d creations", err, f.creations())
	}
	if n := count.get() - before; n > 1 {
		t.Errorf("a recorded rejection went through the SDK's retry loop %d times (replays, with the retryer's backoff)", n)
	}
}

// No attempt, the SDK's retries included, carries a token past its TTL
// (A2.5). The journal's clock moves 300 ms at each request, as the SDK's
// wait before its retry would: the token's age at each attempt is the
// test's doing, measured on the clock the expiry is judged by.
func TestNoAttemptCarriesATokenPastItsTTL(t *testing.T) {
	const ttl = 1500 * time.Millisecond // a token is sent until it is 1350 ms old
	f := newFakeAWS(t)
	f.fail = []int{500, 500, 500}
	clock := newTestClock()
	var (
		key     string
		created time.Time
		late    []time.Duration
	)
	f.seen = func(token string) {
		if age := clock.Now().Sub(created); token == key && age >= ttl {
			late = append(late, age)
		}
		clock.advance(300 * time.Millisecond)
	}
	j := openJournalWith(t, filepath.Join(t.TempDir(), "journal"), filejournal.Options{Now: clock.Now})
	ops, err := idemaws.New(idemaws.Config{Journal: j, KeyTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	client := cloudcontrol.NewFromConfig(awsConfig(f, ops, 0))
	ctx := idem.WithOperation(context.Background(), "bucket-1")
	if _, err := client.CreateResource(ctx, bucket("b1")); !errors.Is(err, idem.ErrUnknown) || f.requests() != 3 {
		t.Fatalf("err = %v after %d requests, want unknown after the SDK's 3 attempts, at ages 0, 300 and 600 ms", err, f.requests())
	}
	op := lookup(t, j, "bucket-1")
	f.mu.Lock()
	key, created = op.Key, op.Created
	f.fail = []int{500, 500}
	f.mu.Unlock()
	clock.advance(op.Created.Add(ttl - 500*time.Millisecond).Sub(clock.Now())) // 1000 ms old
	_, err = client.CreateResource(ctx, bucket("b1"))
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(late) > 0 {
		t.Errorf("token %s (KeyTTL %v) was sent %d time(s) after it expired, at ages %v", op.Key, ttl, len(late), late)
	}
	if !errors.Is(err, idem.ErrKeyExpired) || len(f.tokens) != 5 {
		t.Errorf("second call: err = %v after %d requests in all; want ErrKeyExpired after 5, at ages 1000 and 1300 ms, the third due at 1600", err, len(f.tokens))
	}
}

// A replay leaves the client's signing clock alone: the recorded Date is
// not read as the clock's skew (A2.1).
func TestAReplayLeavesTheSigningClockAlone(t *testing.T) {
	f := newFakeAWS(t)
	var mu sync.Mutex
	var amzDates []string
	pastDate := ""
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		amzDates = append(amzDates, r.Header.Get("X-Amz-Date"))
		if pastDate != "" {
			w.Header().Set("Date", pastDate) // the server's clock when the operation was first answered
		}
		mu.Unlock()
		f.serve(w, r)
	}))
	t.Cleanup(srv.Close)
	f.srv = srv
	j := openJournal(t, filepath.Join(t.TempDir(), "journal"))
	ops := newOperations(t, j)

	// An hour ago, a first process created the bucket; the response, with
	// its Date, is in the journal.
	mu.Lock()
	pastDate = time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat)
	mu.Unlock()
	if _, err := cloudcontrol.NewFromConfig(awsConfig(f, ops, 0)).CreateResource(idem.WithOperation(context.Background(), "bucket-1"), bucket("b1")); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	pastDate = "" // from now on, the server's Date is now
	mu.Unlock()

	// Now: a new process, with a correct clock, runs the job again.
	client := cloudcontrol.NewFromConfig(awsConfig(f, ops, 0))
	if _, err := client.CreateResource(idem.WithOperation(context.Background(), "bucket-1"), bucket("b1")); err != nil {
		t.Fatal(err)
	}
	// and then another request, not even a named one.
	if _, err := client.CreateResource(context.Background(), bucket("b2")); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	last := amzDates[len(amzDates)-1]
	mu.Unlock()
	signed, err := time.Parse("20060102T150405Z", last)
	if err != nil {
		t.Fatal(err)
	}
	if skew := time.Since(signed); skew > 5*time.Minute {
		t.Errorf("after a replay, the client signed its next request %v in the past (X-Amz-Date %s): AWS refuses a signature more than 5-15 minutes off", skew.Round(time.Second), last)
	}
}

// An SDK call made inside a named call (an AssumeRole provider's STS call,
// its client made from the same configuration) is not the operation (A1.7).
func TestCredentialsRefreshInsideANamedCall(t *testing.T) {
	f := newFakeAWS(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Amz-Target") == "" { // STS, the AWS query protocol
			body, _ := io.ReadAll(r.Body)
			if !strings.Contains(string(body), "Action=AssumeRole") {
				http.Error(w, "unexpected "+string(body), http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Type", "text/xml")
			fmt.Fprintf(w, `<AssumeRoleResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><AssumeRoleResult>
<Credentials><AccessKeyId>ASIAEXAMPLE</AccessKeyId><SecretAccessKey>secret</SecretAccessKey><SessionToken>token</SessionToken>
<Expiration>%s</Expiration></Credentials><AssumedRoleUser><Arn>arn:aws:sts::123456789012:assumed-role/r/s</Arn>
<AssumedRoleId>AROA:s</AssumedRoleId></AssumedRoleUser></AssumeRoleResult><ResponseMetadata><RequestId>r</RequestId></ResponseMetadata></AssumeRoleResponse>`,
				time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
			return
		}
		f.serve(w, r)
	}))
	t.Cleanup(srv.Close)
	f.srv = srv
	j := openJournal(t, filepath.Join(t.TempDir(), "journal"))
	cfg := awsConfig(f, newOperations(t, j), 0) // ops.Install in cfg.APIOptions: "every client made from cfg"
	cfg.Credentials = aws.NewCredentialsCache(stscreds.NewAssumeRoleProvider(sts.NewFromConfig(cfg), "arn:aws:iam::123456789012:role/r"))
	_, err := cloudcontrol.NewFromConfig(cfg).CreateResource(idem.WithOperation(context.Background(), "bucket-1"), bucket("b1"))
	if err != nil {
		t.Errorf("a named call whose credentials come from AssumeRole: %v (ErrNoClientToken: %v)", err, errors.Is(err, idemaws.ErrNoClientToken))
	}
}

var _ = smithy.GenericAPIError{}

// A pending operation resumed by a client of another region is a
// mismatch, not sent there under its token (A1.6).
func TestAnotherRegionIsAMismatch(t *testing.T) {
	f := newFakeAWS(t)
	var mu sync.Mutex
	var scopes []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		scopes = append(scopes, r.Header.Get("Authorization"))
		mu.Unlock()
		f.serve(w, r)
	}))
	t.Cleanup(srv.Close)
	f.srv = srv
	f.fail = []int{500, 500, 500}
	j := openJournal(t, filepath.Join(t.TempDir(), "journal"))
	ops := newOperations(t, j)
	ctx := idem.WithOperation(context.Background(), "bucket-1")
	if _, err := cloudcontrol.NewFromConfig(awsConfig(f, ops, 0)).CreateResource(ctx, bucket("b1")); !errors.Is(err, idem.ErrUnknown) {
		t.Fatal(err)
	}
	west := awsConfig(f, ops, 0)
	west.Region = "us-west-2"
	_, err := cloudcontrol.NewFromConfig(west).CreateResource(ctx, bucket("b1"))
	mu.Lock()
	last := scopes[len(scopes)-1]
	mu.Unlock()
	if !errors.Is(err, idem.ErrMismatch) {
		t.Errorf("operation begun in us-east-1, resumed in us-west-2: err = %v; sent %q", err, last[strings.Index(last, "Credential="):strings.Index(last, ",")])
	}
}

// The first attempt applied, its answer lost to a timeout, the retry
// throttled, the caller gone during the wait: unknown and pending, never
// "rejected" for an operation the API applied (A2.6).
func TestAnAppliedThenThrottledCallIsUnknown(t *testing.T) {
	f := newFakeAWS(t)
	f.hang = make(chan string, 1)
	go func() {
		<-f.hang
		f.mu.Lock()
		f.hang, f.reject = nil, "ThrottlingException"
		f.mu.Unlock()
	}()
	j := openJournal(t, filepath.Join(t.TempDir(), "journal"))
	cfg := awsConfig(f, newOperations(t, j), 0)
	hc := *f.srv.Client()
	hc.Timeout = 300 * time.Millisecond
	cfg.HTTPClient = &hc
	cfg.Retryer = func() aws.Retryer {
		return retry.NewStandard(func(o *retry.StandardOptions) { o.Backoff, o.RateLimiter = stepWait{}, ratelimit.None })
	}
	ctx, cancel := context.WithTimeout(idem.WithOperation(context.Background(), "bucket-1"), 1500*time.Millisecond)
	defer cancel()
	_, err := cloudcontrol.NewFromConfig(cfg).CreateResource(ctx, bucket("b1"))
	op := lookup(t, j, "bucket-1")
	t.Logf("err = %v; requests %d, creations %d", err, f.requests(), f.creations())
	if op.State != journal.StatePending || errors.Is(err, idem.ErrRejected) {
		t.Errorf("API created %d resource(s) under %s; the journal holds %s, the caller got: %v", f.creations(), op.Key, op.State, err)
	}
}

// stepWait retries at once after the first attempt, and waits 3s after
// the second.
type stepWait struct{}

func (stepWait) BackoffDelay(attempt int, _ error) (time.Duration, error) {
	if attempt == 1 {
		return 0, nil
	}
	return 3 * time.Second, nil
}

// A resumed operation refused for its credentials (400
// ExpiredTokenException) is unknown, not rejected: the refusal says
// nothing of an earlier attempt, which the API applied (A2.6).
func TestAnAuthErrorOnResumeIsNotARejection(t *testing.T) {
	f := newFakeAWS(t)
	f.hang = make(chan string, 1)
	j := openJournal(t, filepath.Join(t.TempDir(), "journal"))
	cfg := awsConfig(f, newOperations(t, j), 1)
	hc := *f.srv.Client()
	hc.Timeout = 300 * time.Millisecond
	cfg.HTTPClient = &hc
	ctx := idem.WithOperation(context.Background(), "bucket-1")
	if _, err := cloudcontrol.NewFromConfig(cfg).CreateResource(ctx, bucket("b1")); !errors.Is(err, idem.ErrUnknown) {
		t.Fatalf("err = %v", err)
	}
	<-f.hang
	f.mu.Lock()
	f.hang, f.reject = nil, "ExpiredTokenException"
	f.mu.Unlock()
	_, err := cloudcontrol.NewFromConfig(cfg).CreateResource(ctx, bucket("b1"))
	if op := lookup(t, j, "bucket-1"); op.State != journal.StatePending {
		t.Errorf("applied once (%d creation); resumed with expired credentials, the journal holds %s: %v", f.creations(), op.State, err)
	}
}

// V2.4: only idemaws marks how it read an answer: a server's own
// Idem-Key-Reused or Idem-Already-Applied on a plain refusal is not a
// mark (nor recorded: a journal stores its marks under those names), and
// the refusal is answered as one from the journal.
func TestAServersOwnMarksAreDropped(t *testing.T) {
	f := newFakeAWS(t)
	f.reject = "InvalidRequestException"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Idem-Key-Reused", "IdempotentParameterMismatch")
		w.Header().Set("Idem-Already-Applied", "true")
		f.serve(w, r)
	}))
	t.Cleanup(srv.Close)
	f.srv = srv
	j := openJournal(t, filepath.Join(t.TempDir(), "journal"))
	client := cloudcontrol.NewFromConfig(awsConfig(f, newOperations(t, j), 0))
	ctx := idem.WithOperation(context.Background(), "bucket-1")
	for i := range 2 {
		_, err := client.CreateResource(ctx, bucket("b1"))
		if !errors.Is(err, idem.ErrRejected) || errors.Is(err, idem.ErrKeyReused) || errors.Is(err, idemaws.ErrAlreadyApplied) {
			t.Fatalf("call %d: err = %v; want a plain rejection", i, err)
		}
	}
	if op := lookup(t, j, "bucket-1"); op.KeyReused != "" || op.Applied || op.Header.Get("Idem-Key-Reused") != "" || op.Header.Get("Idem-Already-Applied") != "" || !op.RefusedWithoutEffect() {
		t.Fatalf("journal holds %+v; want the refusal without the server's marks", op)
	}
}
