package idemaws_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/acm"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/efs"
	"github.com/aws/aws-sdk-go-v2/service/route53"
	"github.com/aws/smithy-go/middleware"
	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/idemaws"
	"github.com/idemkit/idem/journal"
)

// The environment of a batch child: which API (acm, efs, route53 or ec2)
// and how many operations.
const (
	envBatch = "IDEMAWS_TEST_BATCH"
	envOps   = "IDEMAWS_TEST_OPS"
)

// batchResult is what the batch child prints for each operation it
// finished.
type batchResult struct{ Op, ID string }

// batchChild is a batch job written as docs/vendor-sdks.md says: it runs
// every operation; an operation whose outcome is unknown is left for the
// next run (exit status 3: run again); "already exists" is the
// operation's outcome, its resource found from the error (EFS's ID) or by
// its token (Route 53's CallerReference).
func batchChild() int {
	j, err := filejournal.Open(os.Getenv(envJournal), filejournal.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer j.Close()
	ops, err := idemaws.New(idemaws.Config{Journal: j})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	cfg := aws.Config{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""),
		BaseEndpoint: aws.String(os.Getenv(envEndpoint)),
		HTTPClient:   &http.Client{Timeout: 250 * time.Millisecond},
		Retryer: func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.Backoff, o.RateLimiter = fixedWait(20*time.Millisecond), ratelimit.None
			})
		},
		APIOptions: []func(*middleware.Stack) error{ops.Install},
	}
	acmc, efsc, r53, ec2c := acm.NewFromConfig(cfg), efs.NewFromConfig(cfg), route53.NewFromConfig(cfg), ec2.NewFromConfig(cfg)
	n, _ := strconv.Atoi(os.Getenv(envOps))
	unknown := 0
	enc := json.NewEncoder(os.Stdout)
	for i := range n {
		name := fmt.Sprintf("op-%03d.example.com", i)
		ctx := idem.WithOperation(context.Background(), name)
		id := ""
		switch os.Getenv(envBatch) {
		case "acm":
			out, e := acmc.RequestCertificate(ctx, certificate(name))
			if err = e; e == nil {
				id = aws.ToString(out.CertificateArn)
			}
		case "efs":
			out, e := efsc.CreateFileSystem(ctx, fileSystem(name))
			if err = e; e == nil {
				id = aws.ToString(out.FileSystemId)
			}
		case "route53":
			out, e := r53.CreateHostedZone(ctx, hostedZone(name))
			if err = e; e == nil {
				id = aws.ToString(out.HostedZone.Id)
			}
		case "ec2":
			out, e := ec2c.CreateVpcEndpoint(ctx, vpcEndpoint(name))
			if err = e; e == nil {
				id = aws.ToString(out.VpcEndpoint.VpcEndpointId)
			}
		}
		var applied *idemaws.AppliedError
		switch {
		case errors.As(err, &applied) && applied.ResourceID != "":
			id = applied.ResourceID
		case errors.As(err, &applied): // Route 53: the zone whose CallerReference is the token
			list, err := r53.ListHostedZonesByName(context.Background(), &route53.ListHostedZonesByNameInput{DNSName: aws.String(name)})
			if err != nil {
				unknown++ // look again on the next run
				continue
			}
			for _, z := range list.HostedZones {
				if aws.ToString(z.CallerReference) == applied.Key {
					id = aws.ToString(z.Id)
				}
			}
		case errors.Is(err, idem.ErrUnknown):
			unknown++
			continue
		case err != nil:
			fmt.Fprintln(os.Stderr, name, err)
			return 1
		}
		enc.Encode(batchResult{name, id})
	}
	if unknown > 0 {
		return 3
	}
	return 0
}

func startBatchChild(t *testing.T, api, journal, endpoint string, n int) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envJournal+"="+journal, envEndpoint+"="+endpoint, envBatch+"="+api, envOps+"="+strconv.Itoa(n))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, &out, &errOut
}

// TestABatchFinishesOnEachAPIWithFaultsAndKills: a batch job that follows
// docs/vendor-sdks.md runs IDEM_AWS_BATCH_OPS operations (default 40) on
// each of ACM, EFS, Route 53 and EC2 against an endpoint where a fifth of
// the requests meet a fault (a 500, a 503, a throttle, a connection
// dropped after the creation was applied, an answer later than the client
// waits). It is killed with SIGKILL twice mid-batch, and run again until
// it says it is done. Every operation finishes, under one token, with one
// creation, and the job knows what each made (V1, V2).
func TestABatchFinishesOnEachAPIWithFaultsAndKills(t *testing.T) {
	n := 40
	if s := os.Getenv("IDEM_AWS_BATCH_OPS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 25 {
			t.Fatalf("IDEM_AWS_BATCH_OPS=%q: want a number of operations, at least 25 (the kills come after 21 requests)", s)
		}
	}
	for i, api := range []string{"acm", "efs", "route53", "ec2"} {
		t.Run(api, func(t *testing.T) {
			f := newFakeAPIs(t, 0.2, uint64(49+i))
			journalPath := filepath.Join(t.TempDir(), "journal")
			for _, after := range []int{12, 9} {
				killAt := f.count() + after
				reached := make(chan struct{})
				f.mu.Lock()
				f.onRequest = func(n int) {
					if n == killAt {
						close(reached)
					}
				}
				f.mu.Unlock()
				cmd, out, errOut := startBatchChild(t, api, journalPath, f.srv.URL, n)
				ended := make(chan error, 1)
				go func() { ended <- cmd.Wait() }()
				select {
				case <-reached:
					cmd.Process.Signal(syscall.SIGKILL)
					<-ended
				case err := <-ended:
					t.Fatalf("the batch ended (%v) before it was killed: %s %s", err, out, errOut)
				}
			}
			f.mu.Lock()
			f.onRequest = nil
			f.mu.Unlock()

			var results []batchResult
			for run := 0; ; run++ {
				if run == 20 {
					t.Fatalf("the batch did not finish in 20 runs")
				}
				cmd, out, errOut := startBatchChild(t, api, journalPath, f.srv.URL, n)
				err := cmd.Wait()
				var exit *exec.ExitError
				if errors.As(err, &exit) && exit.ExitCode() == 3 {
					continue // some outcome unknown: run again
				}
				if err != nil {
					t.Fatalf("run %d: %v: %s", run, err, errOut)
				}
				for s := bufio.NewScanner(out); s.Scan(); {
					var r batchResult
					if err := json.Unmarshal(s.Bytes(), &r); err != nil {
						t.Fatalf("the batch printed %q: %v", s.Text(), err)
					}
					results = append(results, r)
				}
				t.Logf("%s: %d operations, 2 kills, finished on run %d after the kills, %d requests in all", api, n, run+1, f.count())
				break
			}
			if len(results) != n {
				t.Fatalf("the finished batch reported %d operations, want %d", len(results), n)
			}
			j, err := filejournal.Open(journalPath, filejournal.Options{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer j.Close()
			sent, made := 0, 0
			for _, r := range results {
				tokens := f.tokens(r.Op)
				sent, made = sent+len(tokens), made+f.creations(r.Op)
				if len(tokens) != 1 || f.creations(r.Op) != 1 {
					t.Errorf("%s: tokens %q, %d creations; want one token, one creation", r.Op, tokens, f.creations(r.Op))
					continue
				}
				f.mu.Lock()
				m := f.byOp[r.Op][0]
				f.mu.Unlock()
				want := map[string]string{"acm": "arn:aws:acm:us-east-1:123456789012:certificate/" + m.id, "efs": "fs-" + m.id,
					"route53": "/hostedzone/Z" + m.id, "ec2": "vpce-" + m.id}[api]
				if op := lookup(t, j, r.Op); r.ID != want || op.State != journal.StateDone || op.Key != tokens[0] {
					t.Errorf("%s: the job got %q, the journal holds %s under %s; want %q, done under %s", r.Op, r.ID, op.State, op.Key, want, tokens[0])
				}
			}
			t.Logf("%s: tokens per operation %.2f, creations per operation %.2f", api, float64(sent)/float64(n), float64(made)/float64(n))
		})
	}
}
