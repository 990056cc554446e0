package idemaws_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/cloudcontrol"
	"github.com/aws/smithy-go/middleware"
	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/idemaws"
)

// A bucket created through Cloud Control, as operation "bucket reports-2026"
// of a job: the second call, as after a restart, is answered from the
// journal under the same token. A program would load its configuration
// with config.LoadDefaultConfig; here a stand-in for AWS answers on
// loopback.
func Example() {
	sent := 0
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sent++
		var in struct{ ClientToken string }
		json.NewDecoder(r.Body).Decode(&in)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		fmt.Fprintf(w, `{"ProgressEvent":{"Identifier":"reports-2026","OperationStatus":"IN_PROGRESS","RequestToken":%q}}`, in.ClientToken)
	}))
	defer api.Close()
	dir, err := os.MkdirTemp("", "idemaws-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	journal, err := filejournal.Open(filepath.Join(dir, "aws.journal"), filejournal.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer journal.Close()
	ops, err := idemaws.New(idemaws.Config{Journal: journal})
	if err != nil {
		log.Fatal(err)
	}
	cfg := aws.Config{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "SECRET", ""),
		BaseEndpoint: aws.String(api.URL),
		APIOptions:   []func(*middleware.Stack) error{ops.Install},
	}
	client := cloudcontrol.NewFromConfig(cfg)

	ctx := idem.WithOperation(context.Background(), "bucket reports-2026")
	for range 2 {
		out, err := client.CreateResource(ctx, &cloudcontrol.CreateResourceInput{
			TypeName:     aws.String("AWS::S3::Bucket"),
			DesiredState: aws.String(`{"BucketName":"reports-2026"}`),
		})
		if err != nil {
			log.Fatal(err)
		}
		op, _, _ := journal.Lookup(ctx, "bucket reports-2026")
		fmt.Println(aws.ToString(out.ProgressEvent.Identifier), op.State, aws.ToString(out.ProgressEvent.RequestToken) == op.Key)
	}
	fmt.Println("requests sent:", sent)
	// Output:
	// reports-2026 done true
	// reports-2026 done true
	// requests sent: 1
}
