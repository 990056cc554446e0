package idem_test

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/idemkit/idem"
)

// D2.3, in every form of the client: an operation a dialect read as
// already applied from a 409 is done in the journal, and a later Do, a
// StandardClient request and a batch run answer it as done from the
// journal: never ErrRejected, never "rejected after 0 attempt(s)".
func TestAnAppliedNon2xxRecordIsDoneInEveryForm(t *testing.T) {
	d := idem.Dialect{Name: "exists", Signals: []idem.Signal{{Status: 409, Field: "code", Value: "AlreadyExists", Answer: idem.AnswerApplied}}}
	w := newWire(t, status(409, `{"code":"AlreadyExists","id":"fs-1"}`))
	j := openJournal(t, filepath.Join(t.TempDir(), "ops.journal"))
	defer j.Close()
	c := newClient(t, fast(idem.Config{Journal: j, Dialect: d}))
	ctx := context.Background()
	resp, err := c.Do("op", post(t, ctx, w.srv.URL, `{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	check := func(form string, resp *http.Response, err error) {
		t.Helper()
		if err != nil || errors.Is(err, idem.ErrRejected) {
			t.Fatalf("%s: err = %v; want done", form, err)
		}
		defer resp.Body.Close()
		if !idem.Recorded(resp) || !idem.AlreadyApplied(resp) || resp.StatusCode != 409 {
			t.Fatalf("%s: recorded %v, applied %v, status %d; want the recorded, flagged 409", form, idem.Recorded(resp), idem.AlreadyApplied(resp), resp.StatusCode)
		}
	}
	resp, err = c.Do("op", post(t, ctx, w.srv.URL, `{}`))
	check("Do", resp, err)
	resp, err = c.StandardClient().Do(post(t, idem.WithOperation(ctx, "op"), w.srv.URL, `{}`))
	check("StandardClient", resp, err)
	sum, err := c.RunBatch(ctx, []idem.BatchOp{{ID: "op", Request: func(ctx context.Context) (*http.Request, error) {
		return post(t, ctx, w.srv.URL, `{}`), nil
	}}}, idem.BatchOptions{})
	if err != nil || sum.Done != 1 || sum.Recorded != 1 || sum.Rejected != 0 {
		t.Fatalf("RunBatch = %+v, %v; want one done, recorded", sum, err)
	}
	if n := len(w.attempts()); n != 1 {
		t.Fatalf("the server saw %d attempts, want 1", n)
	}
}
