package idem_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/idemkit/idem"
)

// An OutcomeError says, in one line, what became of the operation: the
// status, a redirect only when it was one and was not followed, the body
// only when there is one, at most 200 bytes of each, then the last error.
func TestOutcomeErrorMessage(t *testing.T) {
	long := strings.Repeat("b", 200)
	for _, tc := range []struct {
		e    idem.OutcomeError
		want string
	}{
		{idem.OutcomeError{ID: "op", Key: "k", Outcome: idem.OutcomeUnknown, Attempts: 3, Err: errors.New("EOF")},
			`idem: operation "op" unknown after 3 attempt(s) (key k): EOF`},
		{idem.OutcomeError{ID: "op", Key: "k", Outcome: idem.OutcomeRejected, Attempts: 1, Status: 400},
			`idem: operation "op" rejected after 1 attempt(s) (key k): last status 400`},
		{idem.OutcomeError{ID: "op", Key: "k", Outcome: idem.OutcomeRejected, Attempts: 1, Status: 400, Body: []byte("no")},
			`idem: operation "op" rejected after 1 attempt(s) (key k): last status 400 "no"`},
		{idem.OutcomeError{ID: "op", Key: "k", Outcome: idem.OutcomeRejected, Attempts: 1, Status: 400, Body: []byte(long)},
			`idem: operation "op" rejected after 1 attempt(s) (key k): last status 400 "` + long + `"`},
		{idem.OutcomeError{ID: "op", Key: "k", Outcome: idem.OutcomeRejected, Attempts: 1, Status: 400, Body: []byte(long + "c")},
			`idem: operation "op" rejected after 1 attempt(s) (key k): last status 400 "` + long + `..."`},
		{idem.OutcomeError{ID: "op", Key: "k", Outcome: idem.OutcomeRejected, Attempts: 1, Status: 302,
			Header: http.Header{"Location": {"https://login.example.test/"}}},
			`idem: operation "op" rejected after 1 attempt(s) (key k): last status 302, a redirect to "https://login.example.test/", not followed`},
		{idem.OutcomeError{ID: "op", Key: "k", Outcome: idem.OutcomeRejected, Attempts: 1, Status: 302},
			`idem: operation "op" rejected after 1 attempt(s) (key k): last status 302`},
		{idem.OutcomeError{ID: "op", Key: "k", Outcome: idem.OutcomeRejected, Attempts: 1, Status: 201,
			Header: http.Header{"Location": {"/charges/1"}}},
			`idem: operation "op" rejected after 1 attempt(s) (key k): last status 201`},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("Error() = %s\nwant      %s", got, tc.want)
		}
	}
}
