package idemaws

import (
	"errors"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/journal"
)

// TestATokenReusedIsKnownByItsCodeWhateverTheProtocol proves V2.4 for
// EC2's query protocol, whose XML answer carries no header the dialect
// reads: the SDK's error code says the token is held for another request,
// and the outcome is final, the token reused.
func TestATokenReusedIsKnownByItsCodeWhateverTheProtocol(t *testing.T) {
	j, err := filejournal.Open(filepath.Join(t.TempDir(), "journal"), filejournal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	o, err := New(Config{Journal: j})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>IdempotentParameterMismatch</Code><Message>Arguments on this idempotent request are inconsistent with arguments used in previous request(s).</Message></Error></Errors><RequestID>r</RequestID></Response>`)
	resp := &http.Response{StatusCode: http.StatusBadRequest, Header: http.Header{"Content-Type": {"text/xml;charset=UTF-8"}}}
	if a := o.dialect.Read(resp, body); a != 0 {
		t.Fatalf("the dialect reads the XML as %v; the test wants a reading only the code can give", a)
	}
	c := &call{o: o, attempts: 1, resp: resp, body: body, fits: true}
	sdkErr := &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: resp},
		Err: &smithy.GenericAPIError{Code: "IdempotentParameterMismatch", Message: "inconsistent"}}
	v := c.judge(sdkErr)
	if v.state != journal.StateRejected || v.resp != resp || !v.reused || v.code != "IdempotentParameterMismatch" {
		t.Fatalf("judge = %+v; want rejected, the response, the token reused with its code", v)
	}
	// Another 400 of the same answer is a plain rejection, so the code
	// decided.
	sdkErr.Err = &smithy.GenericAPIError{Code: "InvalidParameterValue"}
	if v := c.judge(sdkErr); v.state != journal.StateRejected || v.reused {
		t.Fatalf("an InvalidParameterValue is %+v, want a plain rejection", v)
	}
}

// TestAnAnswerThatSaysNothingOfAnEarlierAttemptIsUnknown proves A2 for
// the answers that end a call without saying whether an earlier attempt
// was applied: a 409 the dialect does not read (a request with the token
// in progress) and a refusal of the signature or credentials, by its code
// (an ...SignatureException as a listed one). Each leaves the operation
// pending, so the next call sends again under the token; recorded
// rejected, the journal would answer the refusal while the first attempt
// may have created the resource. A 4xx that refuses the request itself
// is rejected.
func TestAnAnswerThatSaysNothingOfAnEarlierAttemptIsUnknown(t *testing.T) {
	j, err := filejournal.Open(filepath.Join(t.TempDir(), "journal"), filejournal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	o, err := New(Config{Journal: j})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		status int
		code   string
		want   journal.State
	}{
		{http.StatusConflict, "ConflictException", journal.StatePending},
		{http.StatusConflict, "", journal.StatePending},
		{http.StatusForbidden, "InvalidSignatureException", journal.StatePending},
		{http.StatusForbidden, "SignatureDoesNotMatch", journal.StatePending},
		{http.StatusBadRequest, "ExpiredTokenException", journal.StatePending},
		{http.StatusBadRequest, "ValidationException", journal.StateRejected},
		{http.StatusForbidden, "AccessDeniedException", journal.StateRejected},
	} {
		body := []byte(`{"__type":"` + tc.code + `","message":"m"}`)
		resp := &http.Response{StatusCode: tc.status, Header: http.Header{"Content-Type": {"application/x-amz-json-1.0"}}}
		if a := o.dialect.Read(resp, body); a != 0 {
			t.Fatalf("%d %s: the dialect reads it as %v; the test wants an answer only judge can read", tc.status, tc.code, a)
		}
		c := &call{o: o, attempts: 2, resp: resp, body: body, fits: true}
		sdkErr := &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: resp},
			Err: &smithy.GenericAPIError{Code: tc.code, Message: "m"}}
		if v := c.judge(sdkErr); v.state != tc.want || v.resp != resp || v.why != nil || v.reused || v.applied {
			t.Errorf("%d %s: judge = %s (its response %t), %+v; want %s, its response, no reason", tc.status, tc.code, v.state, v.resp == resp, v, tc.want)
		}
	}
}

// V3.4: a done record that the SDK reads as an error is an "already
// exists" only when idemaws marked it applied; any other has no output.
func TestADoneRecordReadAsAnErrorIsAppliedOnlyWhenMarked(t *testing.T) {
	sdkErr := &smithy.GenericAPIError{Code: "FileSystemAlreadyExists"}
	for _, tc := range []struct {
		marked  journal.Operation
		applied bool
	}{
		{journal.Operation{Applied: true}, true},
		{journal.Operation{}, false},
		{journal.Operation{Settled: true}, false},
		{journal.Operation{Header: http.Header{"Idem-Already-Applied": {"true"}}}, false}, // a server's field is not the mark
	} {
		op := tc.marked
		op.ID, op.Key, op.State, op.Status, op.Body = "fs-1", "k", journal.StateDone, 409, []byte(`{"ErrorCode":"FileSystemAlreadyExists"}`)
		c := &call{api: "EFS.CreateFileSystem", op: op, replay: &op}
		err := c.replayed(nil, sdkErr)
		if errors.Is(err, ErrAlreadyApplied) != tc.applied || errors.Is(err, ErrNoOutput) == tc.applied || errors.Is(err, idem.ErrRejected) {
			t.Errorf("marked %+v: err = %v; want applied %v, else ErrNoOutput", tc.marked, err, tc.applied)
		}
	}
	// A done record read as an output is the output.
	op := journal.Operation{ID: "fs-1", Key: "k", State: journal.StateDone, Status: 201, Body: []byte(`{}`)}
	c := &call{op: op, replay: &op}
	if err := c.replayed(&struct{ FileSystemId *string }{}, nil); err != nil {
		t.Errorf("a recorded body read as an output: %v", err)
	}
}
