package idemaws_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/acm"
	"github.com/aws/aws-sdk-go-v2/service/cloudcontrol"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/efs"
	efstypes "github.com/aws/aws-sdk-go-v2/service/efs/types"
	"github.com/aws/aws-sdk-go-v2/service/route53"
	route53types "github.com/aws/aws-sdk-go-v2/service/route53/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/idemaws"
	"github.com/idemkit/idem/journal"
)

// apisConfig is a program's configuration against the fake APIs: the
// standard retryer without waits, idemaws installed when ops is set.
func apisConfig(f *fakeAPIs, ops *idemaws.Operations, maxAttempts int) aws.Config {
	cfg := aws.Config{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""),
		BaseEndpoint: aws.String(f.srv.URL),
		HTTPClient:   f.srv.Client(),
		Retryer: func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) { o.Backoff, o.RateLimiter = noWait{}, ratelimit.None })
		},
		RetryMaxAttempts: maxAttempts,
	}
	if ops != nil {
		cfg.APIOptions = []func(*middleware.Stack) error{ops.Install}
	}
	return cfg
}

func certificate(domain string) *acm.RequestCertificateInput {
	return &acm.RequestCertificateInput{DomainName: aws.String(domain)}
}

func fileSystem(op string) *efs.CreateFileSystemInput {
	return &efs.CreateFileSystemInput{PerformanceMode: efstypes.PerformanceModeGeneralPurpose,
		Tags: []efstypes.Tag{{Key: aws.String("op"), Value: aws.String(op)}}}
}

func hostedZone(name string) *route53.CreateHostedZoneInput {
	return &route53.CreateHostedZoneInput{Name: aws.String(name)}
}

func vpcEndpoint(service string) *ec2.CreateVpcEndpointInput {
	return &ec2.CreateVpcEndpointInput{VpcId: aws.String("vpc-1"), ServiceName: aws.String(service), VpcEndpointType: ec2types.VpcEndpointTypeInterface}
}

// V1.2: ACM's IdempotencyToken, which the SDK does not fill, is the
// journal's, in ACM's format (1 to 32 word characters, so 32 hex digits,
// not a UUID): one token across a 500 and its retry, one certificate, the
// second call answered from the journal.
func TestACMRequestCertificate(t *testing.T) {
	f := newFakeAPIs(t, 0, 1)
	f.faults = []string{"500"}
	j := openJournal(t, filepath.Join(t.TempDir(), "journal"))
	client := acm.NewFromConfig(apisConfig(f, newOperations(t, j), 0))
	ctx := idem.WithOperation(context.Background(), "cert-1")
	first, err := client.RequestCertificate(ctx, certificate("a.example.com"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := client.RequestCertificate(ctx, certificate("a.example.com"))
	if err != nil {
		t.Fatal(err)
	}
	op := lookup(t, j, "cert-1")
	tokens := f.tokens("a.example.com")
	if len(tokens) != 1 || tokens[0] != op.Key || f.count() != 2 || f.creations("a.example.com") != 1 {
		t.Fatalf("tokens %q, %d requests, %d certificates; want %s alone, 2 requests, 1", tokens, f.count(), f.creations("a.example.com"), op.Key)
	}
	if !regexp.MustCompile(`^\w{1,32}$`).MatchString(op.Key) {
		t.Fatalf("token %q does not fit ACM's 1 to 32 word characters", op.Key)
	}
	if a, b := aws.ToString(first.CertificateArn), aws.ToString(again.CertificateArn); a != b || a != "arn:aws:acm:us-east-1:123456789012:certificate/1" {
		t.Fatalf("ARNs %q and %q, want certificate 1 twice", a, b)
	}
}

// V1.8: EC2's ClientToken, which the SDK does not fill for
// CreateVpcEndpoint and EC2's model (not at hand) gives through the SDK's
// Go source, is the journal's, of up to 64 ASCII characters: one token
// across a 500 and its retry, one endpoint, the second call answered from
// the journal. Then a program killed with SIGKILL once its request was
// applied resumes under the same token, and EC2 answers the first
// endpoint again: one creation.
func TestEC2CreateVpcEndpoint(t *testing.T) {
	f := newFakeAPIs(t, 0, 1)
	f.faults = []string{"500"}
	j := openJournal(t, filepath.Join(t.TempDir(), "journal"))
	client := ec2.NewFromConfig(apisConfig(f, newOperations(t, j), 0))
	ctx := idem.WithOperation(context.Background(), "vpce-a")
	first, err := client.CreateVpcEndpoint(ctx, vpcEndpoint("a.example.com"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := client.CreateVpcEndpoint(ctx, vpcEndpoint("a.example.com"))
	if err != nil {
		t.Fatal(err)
	}
	op := lookup(t, j, "vpce-a")
	tokens := f.tokens("a.example.com")
	if len(tokens) != 1 || tokens[0] != op.Key || f.count() != 2 || f.creations("a.example.com") != 1 || op.State != journal.StateDone {
		t.Fatalf("tokens %q, %d requests, %d endpoints, journal %s; want %s alone, 2 requests, 1, done", tokens, f.count(), f.creations("a.example.com"), op.State, op.Key)
	}
	if len(op.Key) > 64 || !regexp.MustCompile(`^[\x00-\x7F]+$`).MatchString(op.Key) {
		t.Fatalf("token %q is not EC2's up to 64 ASCII characters", op.Key)
	}
	if a, b := aws.ToString(first.VpcEndpoint.VpcEndpointId), aws.ToString(again.VpcEndpoint.VpcEndpointId); a != b || a != "vpce-1" || aws.ToString(again.ClientToken) != op.Key {
		t.Fatalf("endpoints %q and %q (token %q), want vpce-1 twice under %s", a, b, aws.ToString(again.ClientToken), op.Key)
	}

	// A program killed once its request was applied, its answer lost.
	journal := filepath.Join(t.TempDir(), "journal")
	// The request is answered only once the program is dead, so that
	// its answer is lost however fast the program would read it.
	reached, killed := make(chan struct{}), make(chan struct{})
	dead := sync.OnceFunc(func() { close(killed) })
	t.Cleanup(dead)
	f.mu.Lock()
	f.onRequest = func(n int) {
		if n == 3 {
			close(reached)
			<-killed
		}
	}
	f.mu.Unlock()
	cmd, out, errOut := startBatchChild(t, "ec2", journal, f.srv.URL, 1)
	ended := make(chan error, 1)
	go func() { ended <- cmd.Wait() }()
	select {
	case <-reached:
		cmd.Process.Signal(syscall.SIGKILL)
		<-ended
		dead()
	case err := <-ended:
		t.Fatalf("the program ended (%v) before it was killed: %s %s", err, out, errOut)
	}
	cmd, out, errOut = startBatchChild(t, "ec2", journal, f.srv.URL, 1)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the restarted program: %v: %s", err, errOut)
	}
	var r batchResult
	if err := json.Unmarshal(out.Bytes(), &r); err != nil || r != (batchResult{"op-000.example.com", "vpce-2"}) {
		t.Fatalf("the restarted program printed %q (%v); want op-000.example.com and vpce-2", out, err)
	}
	if tokens := f.tokens(r.Op); len(tokens) != 1 || f.creations(r.Op) != 1 || f.count() != 4 {
		t.Fatalf("tokens %q, %d endpoints, %d requests in all; want one token, one endpoint, 4 requests", tokens, f.creations(r.Op), f.count())
	}
	if tok, ok := idemaws.TokenFor("EC2", "CreateVpcEndpoint"); !ok || tok != (idemaws.Token{Member: "ClientToken", MaxLength: 64, Pattern: `^[\x00-\x7F]+$`, KeyTTL: 24 * time.Hour}) {
		t.Fatalf("TokenFor(EC2, CreateVpcEndpoint) = %+v, %v", tok, ok)
	}
}

// V1.3: Route 53's CallerReference is required, and the SDK refuses an
// input without it before idemaws sees the call; idemaws fills it from the
// journal, and still journals nothing for an input the SDK refuses on
// other grounds, leaving the member as it was. V2.2: a token seen again
// answers HostedZoneAlreadyExists without the zone's ID: the operation is
// done, and the error names the token, the zone's CallerReference.
func TestRoute53CreateHostedZone(t *testing.T) {
	f := newFakeAPIs(t, 0, 1)
	j := openJournal(t, filepath.Join(t.TempDir(), "journal"))
	client := route53.NewFromConfig(apisConfig(f, newOperations(t, j), 0))
	ctx := idem.WithOperation(context.Background(), "zone-1")

	bad := &route53.CreateHostedZoneInput{}
	_, err := client.CreateHostedZone(ctx, bad)
	var invalid smithy.InvalidParamsError
	if !errors.As(err, &invalid) || f.count() != 0 || bad.CallerReference != nil {
		t.Fatalf("no Name: err = %v, %d requests, CallerReference %v; want the SDK's refusal, none sent, the member left unset", err, f.count(), bad.CallerReference)
	}
	if _, ok, _ := j.Lookup(ctx, "zone-1"); ok {
		t.Fatal("an input the SDK refused left an operation in the journal")
	}

	// The first attempt is applied, its answer lost; the retry meets the
	// token again.
	f.faults = []string{"drop"}
	in := hostedZone("a.example.com")
	_, err = client.CreateHostedZone(ctx, in)
	var applied *idemaws.AppliedError
	if !errors.As(err, &applied) || !errors.Is(err, idemaws.ErrAlreadyApplied) || errors.Is(err, idem.ErrRejected) || errors.Is(err, idem.ErrUnknown) {
		t.Fatalf("err = %v, want an *AppliedError, neither rejected nor unknown", err)
	}
	var exists *route53types.HostedZoneAlreadyExists
	op := lookup(t, j, "zone-1")
	if applied.Key != op.Key || applied.Code != "HostedZoneAlreadyExists" || applied.ResourceID != "" || applied.Recorded || !errors.As(err, &exists) {
		t.Fatalf("%+v; want token %s, HostedZoneAlreadyExists, no ID, the SDK's error within", applied, op.Key)
	}
	if aws.ToString(in.CallerReference) != op.Key || op.State != journal.StateDone || !op.Applied {
		t.Fatalf("CallerReference %q; journal %s %v; want %s, done, flagged applied", aws.ToString(in.CallerReference), op.State, op.Header, op.Key)
	}
	// The zone is found by its CallerReference.
	list, err := client.ListHostedZonesByName(context.Background(), &route53.ListHostedZonesByNameInput{DNSName: aws.String("a.example.com")})
	if err != nil || len(list.HostedZones) != 1 || aws.ToString(list.HostedZones[0].CallerReference) != applied.Key {
		t.Fatalf("ListHostedZonesByName = %+v, %v; want the one zone, CallerReference %s", list, err, applied.Key)
	}
	// A later call answers the same, from the journal, sending nothing.
	sent := f.count()
	_, err = client.CreateHostedZone(ctx, hostedZone("a.example.com"))
	if !errors.As(err, &applied) || !applied.Recorded || applied.Code != "HostedZoneAlreadyExists" || f.count() != sent {
		t.Fatalf("again: err = %v after %d requests; want the recorded *AppliedError, nothing sent", err, f.count()-sent)
	}
	if f.creations("a.example.com") != 1 || len(f.tokens("a.example.com")) != 1 {
		t.Fatalf("%d zones under %q; want 1 under one token", f.creations("a.example.com"), f.tokens("a.example.com"))
	}
}

// V2.1: EFS answers a CreationToken seen again with 409
// FileSystemAlreadyExists and the file system's ID: the operation is done,
// the caller gets the ID, and every later call answers the same from the
// journal, never rejected, never unknown.
func TestEFSAlreadyExistsIsAnAppliedOperation(t *testing.T) {
	f := newFakeAPIs(t, 0, 1)
	j := openJournal(t, filepath.Join(t.TempDir(), "journal"))
	client := efs.NewFromConfig(apisConfig(f, newOperations(t, j), 0))
	ctx := idem.WithOperation(context.Background(), "fs-1")
	f.faults = []string{"drop"}
	for i, recorded := range []bool{false, true, true} {
		_, err := client.CreateFileSystem(ctx, fileSystem("fs-1"))
		var applied *idemaws.AppliedError
		var exists *efstypes.FileSystemAlreadyExists
		if !errors.As(err, &applied) || errors.Is(err, idem.ErrRejected) || errors.Is(err, idem.ErrUnknown) || !errors.As(err, &exists) {
			t.Fatalf("call %d: err = %v, want an *AppliedError with EFS's error", i, err)
		}
		if applied.ResourceID != "fs-1" || aws.ToString(exists.FileSystemId) != "fs-1" || applied.Code != "FileSystemAlreadyExists" || applied.Recorded != recorded {
			t.Fatalf("call %d: %+v; want fs-1, FileSystemAlreadyExists, recorded %v", i, applied, recorded)
		}
	}
	if f.count() != 2 || f.creations("fs-1") != 1 || len(f.tokens("fs-1")) != 1 {
		t.Fatalf("%d requests, %d file systems, tokens %q; want 2, 1, one", f.count(), f.creations("fs-1"), f.tokens("fs-1"))
	}
	if op := lookup(t, j, "fs-1"); op.State != journal.StateDone || op.Status != 409 {
		t.Fatalf("journal holds %s %d, want done 409", op.State, op.Status)
	}
}

// V2.3: an answer Config.Dialect reads as applied is done whatever its
// status, and every later call answers it as applied from the journal:
// never "rejected after 0 attempt(s)", never unknown.
func TestADialectsAppliedAnswerIsNeverARejection(t *testing.T) {
	f := newFakeAWS(t)
	f.reject = "AlreadyExistsException"
	j := openJournal(t, filepath.Join(t.TempDir(), "journal"))
	d := idem.AWSCloudControl()
	d.Signals = append(slices.Clone(d.Signals), idem.Signal{Field: "__type", Value: "AlreadyExistsException", Answer: idem.AnswerApplied})
	ops, err := idemaws.New(idemaws.Config{Journal: j, Dialect: &d})
	if err != nil {
		t.Fatal(err)
	}
	client := cloudcontrol.NewFromConfig(awsConfig(f, ops, 0))
	ctx := idem.WithOperation(context.Background(), "bucket-1")
	for i, recorded := range []bool{false, true, true} {
		_, err := client.CreateResource(ctx, bucket("b1"))
		var applied *idemaws.AppliedError
		if !errors.As(err, &applied) || errors.Is(err, idem.ErrRejected) || errors.Is(err, idem.ErrUnknown) {
			t.Fatalf("call %d: err = %v; want applied, neither rejected nor unknown", i, err)
		}
		if applied.Code != "AlreadyExistsException" || applied.Recorded != recorded || applied.ResourceID != "" {
			t.Fatalf("call %d: %+v; want AlreadyExistsException, recorded %v, no ID", i, applied, recorded)
		}
	}
	if op := lookup(t, j, "bucket-1"); op.State != journal.StateDone || op.Status != 400 || f.requests() != 1 {
		t.Fatalf("journal holds %s %d after %d requests; want done 400 after 1", op.State, op.Status, f.requests())
	}
}

// V3: an operation settled by hand as done (idem journal settle ...
// --done) holds no output the SDK can read: the next call answers
// ErrNoOutput, never an output of nil fields, and sends nothing.
func TestAHandSettledOperationHasNoOutput(t *testing.T) {
	for _, status := range []int{201, 409} {
		f := newFakeAPIs(t, 0, 1)
		f.faults = []string{"503"}
		j := openJournal(t, filepath.Join(t.TempDir(), "journal"))
		client := efs.NewFromConfig(apisConfig(f, newOperations(t, j), 1))
		ctx := idem.WithOperation(context.Background(), "fs-1")
		if _, err := client.CreateFileSystem(ctx, fileSystem("fs-1")); !errors.Is(err, idem.ErrUnknown) {
			t.Fatalf("err = %v, want unknown after a 503", err)
		}
		if err := idem.Settle(ctx, j, "fs-1", idem.Settlement{State: journal.StateDone, Status: status, Note: "fs-9 in the console"}); err != nil {
			t.Fatal(err)
		}
		out, err := client.CreateFileSystem(ctx, fileSystem("fs-1"))
		if !errors.Is(err, idemaws.ErrNoOutput) || out != nil || errors.Is(err, idem.ErrRejected) || errors.Is(err, idem.ErrUnknown) {
			t.Fatalf("settled done %d: out %+v, err = %v; want ErrNoOutput and no output", status, out, err)
		}
		if f.count() != 1 {
			t.Fatalf("settled done %d: %d requests, want the first one only", status, f.count())
		}
	}
}

// V3: a done operation whose response was too large to record answers
// ErrNoOutput too, with idem.ErrBodyNotRecorded.
func TestAnOperationRecordedWithoutItsBodyHasNoOutput(t *testing.T) {
	f := newFakeAPIs(t, 0, 1)
	j := openJournal(t, filepath.Join(t.TempDir(), "journal"))
	ops, err := idemaws.New(idemaws.Config{Journal: j, MaxRecordedBody: 16})
	if err != nil {
		t.Fatal(err)
	}
	client := efs.NewFromConfig(apisConfig(f, ops, 0))
	ctx := idem.WithOperation(context.Background(), "fs-1")
	if out, err := client.CreateFileSystem(ctx, fileSystem("fs-1")); err != nil || aws.ToString(out.FileSystemId) != "fs-1" {
		t.Fatalf("first call: %+v, %v", out, err)
	}
	out, err := client.CreateFileSystem(ctx, fileSystem("fs-1"))
	if !errors.Is(err, idemaws.ErrNoOutput) || !errors.Is(err, idem.ErrBodyNotRecorded) || out != nil {
		t.Fatalf("out %+v, err = %v; want ErrNoOutput, ErrBodyNotRecorded", out, err)
	}
}

// V1.4: Config.Tokens names an operation's token member and format, in
// place of what idemaws knows; New refuses an entry it cannot use.
func TestACallerNamesTheTokenMember(t *testing.T) {
	f := newFakeAPIs(t, 0, 1)
	j := openJournal(t, filepath.Join(t.TempDir(), "journal"))
	ops, err := idemaws.New(idemaws.Config{Journal: j, Tokens: map[string]idemaws.Token{
		"ACM.RequestCertificate": {Member: "IdempotencyToken", MaxLength: 20, Pattern: `^[0-9a-f]+$`},
	}})
	if err != nil {
		t.Fatal(err)
	}
	client := acm.NewFromConfig(apisConfig(f, ops, 0))
	if _, err := client.RequestCertificate(idem.WithOperation(context.Background(), "cert-1"), certificate("a.example.com")); err != nil {
		t.Fatal(err)
	}
	if key := lookup(t, j, "cert-1").Key; !regexp.MustCompile(`^[0-9a-f]{20}$`).MatchString(key) || f.tokens("a.example.com")[0] != key {
		t.Fatalf("token %q (on the wire %q), want the caller's format: 20 hex digits", key, f.tokens("a.example.com"))
	}
	for _, tok := range []idemaws.Token{
		{},                                 // no member
		{Member: "A.B.C"},                  // too deep
		{Member: "T", Pattern: `(`},        // no pattern
		{Member: "T", Pattern: `^[A-Z]+$`}, // no hex token fits
		{Member: "T", MinLength: 9, MaxLength: 8}, // no length
		{Member: "T", KeyTTL: -time.Second},
	} {
		if _, err := idemaws.New(idemaws.Config{Journal: j, Tokens: map[string]idemaws.Token{"X.Y": tok}}); !errors.Is(err, idem.ErrInvalidConfig) {
			t.Errorf("Tokens entry %+v: err = %v, want ErrInvalidConfig", tok, err)
		}
	}
	// A member the input type lacks is refused before anything is sent.
	ops, _ = idemaws.New(idemaws.Config{Journal: j, Tokens: map[string]idemaws.Token{"ACM.RequestCertificate": {Member: "NoSuchField"}}})
	sent := f.count()
	_, err = acm.NewFromConfig(apisConfig(f, ops, 0)).RequestCertificate(idem.WithOperation(context.Background(), "cert-2"), certificate("b.example.com"))
	if !errors.Is(err, idemaws.ErrNoClientToken) || f.count() != sent {
		t.Fatalf("a member the input lacks: err = %v, %d requests; want ErrNoClientToken, none", err, f.count()-sent)
	}
}

// V1.5: each operation's token lives as long as its API documents: ACM's
// an hour, so a pending ACM operation is not sent again once its token is
// within a minute of that hour, while an EFS one, whose token lives with
// the file system, still is; Config.KeyTTL caps both.
func TestEachOperationHasItsTokensLifetime(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	for _, tc := range []struct {
		keyTTL       time.Duration
		after        time.Duration
		acmOK, efsOK bool
	}{
		{0, 58 * time.Minute, true, true},
		{0, 59 * time.Minute, false, true},
		{0, 72 * time.Hour, false, true},
		{2 * time.Hour, 59 * time.Minute, false, true},
		{2 * time.Hour, 2 * time.Hour, false, false},
		{30 * time.Minute, 29 * time.Minute, false, false},
		{30 * time.Minute, 26 * time.Minute, true, true},
	} {
		now = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
		f := newFakeAPIs(t, 0, 1)
		j, err := filejournal.Open(filepath.Join(t.TempDir(), "journal"), filejournal.Options{Now: clock})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { j.Close() })
		ops, err := idemaws.New(idemaws.Config{Journal: j, KeyTTL: tc.keyTTL})
		if err != nil {
			t.Fatal(err)
		}
		cfg := apisConfig(f, ops, 1)
		f.faults = []string{"503", "503"}
		ctx := context.Background()
		acmc, efsc := acm.NewFromConfig(cfg), efs.NewFromConfig(cfg)
		acmc.RequestCertificate(idem.WithOperation(ctx, "cert"), certificate("a.example.com"))
		efsc.CreateFileSystem(idem.WithOperation(ctx, "fs"), fileSystem("fs"))
		now = now.Add(tc.after)
		_, acmErr := acmc.RequestCertificate(idem.WithOperation(ctx, "cert"), certificate("a.example.com"))
		_, efsErr := efsc.CreateFileSystem(idem.WithOperation(ctx, "fs"), fileSystem("fs"))
		if (acmErr == nil) != tc.acmOK || !tc.acmOK && !errors.Is(acmErr, idem.ErrKeyExpired) {
			t.Errorf("KeyTTL %v, %v later: ACM err = %v, want sent: %v", tc.keyTTL, tc.after, acmErr, tc.acmOK)
		}
		if (efsErr == nil) != tc.efsOK || !tc.efsOK && !errors.Is(efsErr, idem.ErrKeyExpired) {
			t.Errorf("KeyTTL %v, %v later: EFS err = %v, want sent: %v", tc.keyTTL, tc.after, efsErr, tc.efsOK)
		}
	}
}

// V1.1: the table idemaws carries knows the operations of the AWS models
// that take a token, whether or not the SDK fills it, with the format and
// lifetime AWS documents.
func TestTheTableKnowsTheTokensOfTheModels(t *testing.T) {
	for _, tc := range []struct {
		service, operation string
		want               idemaws.Token
	}{
		{"ACM", "RequestCertificate", idemaws.Token{Member: "IdempotencyToken", MinLength: 1, MaxLength: 32, Pattern: `^\w+$`, KeyTTL: time.Hour}},
		{"Route 53", "CreateHostedZone", idemaws.Token{Member: "CallerReference", MinLength: 1, MaxLength: 128}},
		{"EFS", "CreateFileSystem", idemaws.Token{Member: "CreationToken", MinLength: 1, MaxLength: 64, Pattern: `^.+$`}},
		{"CloudFront", "CreateDistribution", idemaws.Token{Member: "DistributionConfig.CallerReference"}},
		{"CloudControl", "CreateResource", idemaws.Token{Member: "ClientToken", MinLength: 1, MaxLength: 128, Pattern: `^[-A-Za-z0-9+/=]+$`, KeyTTL: 36 * time.Hour}},
		{"ECS", "RunTask", idemaws.Token{Member: "ClientToken"}},
	} {
		if got, ok := idemaws.TokenFor(tc.service, tc.operation); !ok || got != tc.want {
			t.Errorf("TokenFor(%q, %q) = %+v, %v; want %+v", tc.service, tc.operation, got, ok, tc.want)
		}
	}
	for _, op := range [][2]string{{"CloudControl", "GetResource"}, {"CloudFront", "UpdateDistribution"}, {"EFS", "DescribeFileSystems"}} {
		if got, ok := idemaws.TokenFor(op[0], op[1]); ok {
			t.Errorf("TokenFor(%q, %q) = %+v; want none: it takes no token", op[0], op[1], got)
		}
	}
}
