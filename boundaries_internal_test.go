package idem

import (
	"errors"
	"strings"
	"testing"
)

// D1.6: a journaled key of exactly the dialect's MaxKeyLength fits; one
// byte more does not.
func TestKeyFitsTakesAKeyOfTheLongestLength(t *testing.T) {
	d := Dialect{Name: "forty", MaxKeyLength: 40}
	if err := d.keyFits(strings.Repeat("a", 40)); err != nil {
		t.Fatalf("a key of 40 bytes: %v", err)
	}
	if err := d.keyFits(strings.Repeat("a", 41)); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("a key of 41 bytes: err = %v, want ErrInvalidRequest", err)
	}
}

// The body of a response is read to match signals only when a signal with
// a Field could match its status: an answer read by its header alone is
// handed to the caller unread.
func TestReadsBodyOnlyWhereAFieldSignalCouldMatch(t *testing.T) {
	d := Dialect{Signals: []Signal{
		{Header: "X-In-Flight", Answer: AnswerInFlight},
		{Status: 409, Field: "error.code", Value: "busy", Answer: AnswerInFlight},
	}}
	for status, want := range map[int]bool{201: false, 409: true, 500: false} {
		if got := d.readsBody(status); got != want {
			t.Errorf("readsBody(%d) = %v, want %v", status, got, want)
		}
	}
	d.Signals = append(d.Signals, Signal{Field: "state", Value: "pending", Answer: AnswerInFlight})
	if !d.readsBody(201) {
		t.Errorf("with a Field signal for every status, readsBody(201) = false")
	}
}
