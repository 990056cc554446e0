package idemaws_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/cloudcontrol"
	"github.com/aws/smithy-go/middleware"
	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/idemaws"
	"github.com/idemkit/idem/lab/testkit/pgtest"
	"go.uber.org/goleak"
)

// The environment of a child process: it creates one bucket through the
// SDK, with idemaws and a file journal, and prints what it got.
const (
	envJournal  = "IDEMAWS_TEST_JOURNAL"
	envEndpoint = "IDEMAWS_TEST_ENDPOINT"
)

// withPostgres runs the tests through pgtest.Run, for goleak, which then
// checks that nothing is left once the shared server is closed.
type withPostgres struct{ m *testing.M }

func (w withPostgres) Run() int { return pgtest.Run(w.m) }

func TestMain(m *testing.M) {
	if os.Getenv(envJournal) != "" && os.Getenv(envBatch) != "" {
		os.Exit(batchChild())
	}
	if os.Getenv(envJournal) != "" {
		os.Exit(child())
	}
	goleak.VerifyTestMain(withPostgres{m})
}

type childResult struct {
	Identifier, Token string
}

// child is a program that creates a bucket as operation "bucket-1", as a
// batch job would, with the SDK's standard retryer, waiting 3 seconds
// before each retry.
func child() int {
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
		Retryer: func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) { o.Backoff = fixedWait(3 * time.Second) })
		},
		APIOptions: []func(*middleware.Stack) error{ops.Install},
	}
	in := &cloudcontrol.CreateResourceInput{TypeName: aws.String("AWS::S3::Bucket"), DesiredState: aws.String(`{"BucketName":"b1"}`)}
	out, err := cloudcontrol.NewFromConfig(cfg).CreateResource(idem.WithOperation(context.Background(), "bucket-1"), in)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	json.NewEncoder(os.Stdout).Encode(childResult{aws.ToString(out.ProgressEvent.Identifier), aws.ToString(in.ClientToken)})
	return 0
}

// startChild starts the child program on journal against the endpoint.
// -short skips the tests that do.
func startChild(t *testing.T, journal, endpoint string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs a child process; -short skips the tests that do")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envJournal+"="+journal, envEndpoint+"="+endpoint)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, &out
}

// TestARestartResumesUnderTheSameToken kills the process, with SIGKILL,
// at the two moments a restart must not duplicate: after the API applied
// the operation but before the answer arrived, and between two attempts.
// The restarted process sends the same token, and the API creates once.
func TestARestartResumesUnderTheSameToken(t *testing.T) {
	for _, tc := range []struct {
		name string
		arm  func(f *fakeAWS) <-chan string // returns where the first attempt's token arrives
	}{
		{"applied, answer lost", func(f *fakeAWS) <-chan string {
			f.hang = make(chan string, 1)
			return f.hang
		}},
		{"between attempts", func(f *fakeAWS) <-chan string {
			answered := make(chan string, 1)
			f.fail = []int{500}
			f.answered = func(token string) {
				select {
				case answered <- token: // the child now waits before its next attempt
				default:
				}
			}
			return answered
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeAWS(t)
			journal := filepath.Join(t.TempDir(), "journal")
			f.mu.Lock()
			first := tc.arm(f)
			f.mu.Unlock()

			cmd, out := startChild(t, journal, f.srv.URL)
			var token string
			select {
			case token = <-first:
			case <-time.After(time.Minute):
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("the first attempt never came; the child said: %s", out)
			}
			cmd.Process.Signal(syscall.SIGKILL)
			if err := cmd.Wait(); err == nil {
				t.Fatalf("the child ended by itself before the kill: %s", out)
			}
			f.mu.Lock()
			f.hang, f.answered = nil, nil
			f.mu.Unlock()

			cmd, out = startChild(t, journal, f.srv.URL)
			if err := cmd.Wait(); err != nil {
				t.Fatalf("the restarted child: %v: %s", err, out)
			}
			var got childResult
			if err := json.Unmarshal(out.Bytes(), &got); err != nil {
				t.Fatalf("the restarted child printed %q: %v", out, err)
			}
			if got.Token != token || got.Identifier != "res-1" || f.creations() != 1 {
				t.Fatalf("after the restart: token %s, created %s, %d creations; want token %s, res-1, 1", got.Token, got.Identifier, f.creations(), token)
			}
			for i, w := range f.wire() {
				if w != token {
					t.Fatalf("request %d carried token %s, want %s", i, w, token)
				}
			}
		})
	}
}

type fixedWait time.Duration

func (w fixedWait) BackoffDelay(int, error) (time.Duration, error) { return time.Duration(w), nil }
