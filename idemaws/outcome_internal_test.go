package idemaws

import (
	"net/http"
	"path/filepath"
	"testing"

	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
)

// TestATokenReusedIsKnownByItsCodeWhateverTheProtocol proves A2.3 for
// EC2's query protocol, whose XML answer carries no header the dialect
// reads: the SDK's error code says the token was reused, and the outcome
// is unknown with ErrKeyReused, the operation pending.
func TestATokenReusedIsKnownByItsCodeWhateverTheProtocol(t *testing.T) {
	j, err := filejournal.Open(filepath.Join(t.TempDir(), "journal"), filejournal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	o, err := New(Options{Journal: j})
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
	state, got, why := c.judge(sdkErr)
	if state != idem.StatePending || got != resp || why != idem.ErrKeyReused {
		t.Fatalf("judge = %s, %v, %v; want pending, the response, ErrKeyReused", state, got, why)
	}
	// Another 400 of the same answer is a rejection, so the code decided.
	sdkErr.Err = &smithy.GenericAPIError{Code: "InvalidParameterValue"}
	if state, _, _ := c.judge(sdkErr); state != idem.StateRejected {
		t.Fatalf("an InvalidParameterValue is %s, want rejected", state)
	}
}
