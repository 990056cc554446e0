package idemaws

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

type inputWithTime struct {
	ClientToken *string
	StartAfter  *time.Time
}

type inputWithFloat struct {
	ClientToken *string
	Weight      *float64
}

// The same instant in two time zones has one fingerprint (A1.6).
func TestTheSameInstantHasOneFingerprint(t *testing.T) {
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	other := at.In(time.FixedZone("CEST", 2*3600))
	a, err1 := fingerprint("svc.Op", &inputWithTime{StartAfter: &at}, tokenPath{0})
	b, err2 := fingerprint("svc.Op", &inputWithTime{StartAfter: &other}, tokenPath{0})
	if err1 != nil || err2 != nil || a != b {
		t.Errorf("one instant, two zones: fingerprints %s and %s (%v, %v)", a, b, err1, err2)
	}
}

// A NaN or infinite float, which the SDK sends, is fingerprinted (A1.6).
func TestANaNFloatCanBeFingerprinted(t *testing.T) {
	nan := math.NaN()
	if _, err := fingerprint("svc.Op", &inputWithFloat{Weight: &nan}, tokenPath{0}); err != nil {
		t.Errorf("fingerprint of a NaN member: %v (ErrInvalidRequest: %v)", err, errors.Is(err, idem.ErrInvalidRequest))
	}
}

// The same SDK input struct before and after an SDK upgrade that added an
// optional member (as AWS releases do every week).
type createInputV1 struct {
	Name        *string
	ClientToken *string
}
type createInputV2 struct {
	Name        *string
	ClientToken *string
	Tags        map[string]string // new in the next SDK release, unset
}

// An SDK upgrade that adds an optional input member leaves the fingerprint
// of the same call as it was, so that journaled operations resume (A1.6).
func TestTheFingerprintSurvivesAnSDKUpgrade(t *testing.T) {
	name := "b1"
	a, _ := fingerprint("svc.Op", &createInputV1{Name: &name}, tokenPath{1})
	b, _ := fingerprint("svc.Op", &createInputV2{Name: &name}, tokenPath{1})
	if a != b {
		t.Errorf("one request, the SDK upgraded: fingerprints %s and %s", a, b)
	}
}

// attributeValue is a union as the SDK writes one (DynamoDB's
// types.AttributeValue): an interface, one struct type per member.
type attributeValue interface{ isAttributeValue() }

type memberN struct{ Value string }
type memberS struct{ Value string }

func (*memberN) isAttributeValue() {}
func (*memberS) isAttributeValue() {}

type putInput struct {
	Item        map[string]attributeValue
	ClientToken *string
}

// Two members of a union with one value are two requests (A1.6).
func TestUnionMembersWithOneValueDiffer(t *testing.T) {
	n, err := fingerprint("DynamoDB.PutItem in us-east-1", &putInput{Item: map[string]attributeValue{"balance": &memberN{"100"}}}, tokenPath{1})
	if err != nil {
		t.Fatal(err)
	}
	s, err := fingerprint("DynamoDB.PutItem in us-east-1", &putInput{Item: map[string]attributeValue{"balance": &memberS{"100"}}}, tokenPath{1})
	if err != nil {
		t.Fatal(err)
	}
	if n == s {
		t.Fatal("a number and a string member of one value have one fingerprint")
	}
}
