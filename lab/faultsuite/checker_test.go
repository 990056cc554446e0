package faultsuite

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
)

// The checker must catch every way a run can break the promise; a checker
// that passes everything proves nothing.
func TestCheckerCatchesEveryViolation(t *testing.T) {
	c := NewChecker([]string{"a", "b", "c", "d", "e"})
	c.Attempt("a", "k1")
	c.Outcome("a", ResultDone) // a: done, one effect: fine
	c.Attempt("b", "k2")
	c.Outcome("b", ResultDone) // b: done, two effects: duplicate
	c.Attempt("c", "k3")
	c.Outcome("c", ResultDone) // c: done, no effect: lost
	c.Attempt("d", "k4")
	c.Outcome("d", ResultUnknown) // d: never done: unfinished
	c.Attempt("e", "k5")
	c.Outcome("e", ResultUnknown)
	c.Attempt("e", "k6") // e: a second key
	c.Attempt("e", "k6") // the same second key: still two keys
	c.Outcome("e", ResultDone)
	c.Attempt("z", "k7") // z: not an operation of the run
	c.Failure(CauseReset)
	c.Failure(CauseReset)
	c.Failure("502")
	c.Replayed()

	r := c.Check("unit", ServerView{
		Effects: map[string]int{"a": 1, "b": 2, "d": 1, "e": 1, "y": 1},
		Replays: 3, Charges: 2, Captures: 3, StockTaken: 5, Reserved: 4,
	})
	want := Report{Operations: 5, Attempts: 8, Duplicates: 1, Lost: 1, Unfinished: 1, UnknownThenResolved: 1, KeyChanges: 1, Strays: 2}
	got := Report{Operations: r.Operations, Attempts: r.Attempts, Duplicates: r.Duplicates, Lost: r.Lost,
		Unfinished: r.Unfinished, UnknownThenResolved: r.UnknownThenResolved, KeyChanges: r.KeyChanges, Strays: r.Strays}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("counts %+v, want %+v", got, want)
	}
	if r.OK() || r.Err() == nil {
		t.Fatal("the report passes a run that broke the promise")
	}
	msg := r.Err().Error()
	for _, s := range []string{
		"operation b took effect 2 times",
		"operation c was reported done but has no effect",
		"operation d never ended done",
		"operation e was sent under 2 keys",
		`"z", which is not an operation of the run`,
		`reference "y", which is not an operation of the run`,
		"the gateway captured 3 times for 2 charges",
		"the stock went down by 5 for reservations of 4",
	} {
		if !strings.Contains(msg, s) {
			t.Errorf("error lacks %q:\n%s", s, msg)
		}
	}
	const line = "unit: ops=5 attempts=8 retries=3 (502=1 reset=2) client-crash-resumes=0 replays=3 replays-seen=1 duplicates=1 lost=1 unfinished=1 unknown-then-resolved=1 key-changes=1 overlaps=0 strays=2 false-done=0 applied=0 captures=3/2 stock=5/4"
	if r.String() != line {
		t.Errorf("line\n%s\nwant\n%s", r, line)
	}
}

// The wire is evidence of its own: a key the client never reported, and a
// key sent twice at once, break the promise even when the client's own
// reports are clean.
func TestCheckerJudgesTheWire(t *testing.T) {
	c := NewChecker([]string{"a", "b"})
	c.Attempt("a", "k1")
	c.Outcome("a", ResultDone)
	c.Attempt("b", "k2")
	c.Outcome("b", ResultDone)
	r := c.Check("wire", ServerView{
		Effects: map[string]int{"a": 1, "b": 1}, Replays: -1,
		Wire: &WireView{Keys: map[string][]string{"a": {"k1"}, "b": {"k2", "k9"}}, Overlaps: []string{"key k1 was sent again"}, Keyless: 2},
	})
	if r.KeyChanges != 1 || r.Overlaps != 1 || r.OK() {
		t.Fatalf("key changes %d, overlaps %d, ok %v; want 1, 1 and a broken promise", r.KeyChanges, r.Overlaps, r.OK())
	}
	for _, s := range []string{"operation b was sent under 2 keys: k2 k9", "key k1 was sent again", "2 mutating requests reached the server without a key"} {
		if !strings.Contains(r.Err().Error(), s) {
			t.Errorf("error lacks %q:\n%s", s, r.Err())
		}
	}
}

func TestCheckerPassesACleanRun(t *testing.T) {
	c := NewChecker([]string{"a", "b"})
	c.Attempt("a", "k1")
	c.Outcome("a", ResultUnknown)
	c.Resumed("a")
	c.Attempt("a", "k1")
	c.Outcome("a", ResultDone)
	c.Attempt("b", "k2")
	c.Outcome("b", ResultDone)
	c.Outcome("b", ResultDone) // answered from the journal on a later run
	if !c.Done() {
		t.Error("Done is false after every operation was done")
	}
	r := c.Check("clean", ServerView{Effects: map[string]int{"a": 1, "b": 1}, Replays: -1, Charges: 1, Captures: 1})
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if r.UnknownThenResolved != 1 || r.ClientCrashes != 1 {
		t.Errorf("unknown-then-resolved %d, client-crash resumes %d; want 1 and 1", r.UnknownThenResolved, r.ClientCrashes)
	}
	if !strings.Contains(r.String(), "replays=unknown") {
		t.Errorf("line %q does not say the replays are unknown", r)
	}
}

// Events written by a child are read back into the same calls.
func TestEventsRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w := NewEventWriter(&buf)
	w.Attempt("op-1", "key-1")
	w.Failure(CauseTimeout)
	w.Replayed()
	w.Outcome("op-1", ResultUnknown)
	w.Resumed("op-1")
	w.Outcome("op-1", ResultDone)
	w.Line("summary done=1")
	if err := w.Err(); err != nil {
		t.Fatal(err)
	}
	c := NewChecker([]string{"op-1"})
	var other []string
	if err := ReadEvents(&buf, c, func(l string) { other = append(other, l) }); err != nil {
		t.Fatal(err)
	}
	r := c.Check("events", ServerView{Effects: map[string]int{"op-1": 1}})
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if r.Attempts != 1 || r.Retries[CauseTimeout] != 1 || r.ClientCrashes != 1 || r.UnknownThenResolved != 1 || r.ReplaysSeen != 1 {
		t.Errorf("report %s", r)
	}
	if len(other) != 1 || other[0] != "summary done=1" {
		t.Errorf("other lines %q", other)
	}
	if err := ReadEvents(strings.NewReader("outcome op-1 maybe\n"), c, nil); err == nil {
		t.Error("a malformed event was accepted")
	}
}

func TestCauseOf(t *testing.T) {
	for _, tc := range []struct {
		status int
		err    error
		want   string
	}{
		{201, nil, ""},
		{400, nil, ""},
		{501, nil, ""},
		{409, nil, "409"},
		{429, nil, "429"},
		{502, nil, "502"},
		{0, fmt.Errorf("post: %w", syscall.ECONNRESET), CauseReset},
		{0, fmt.Errorf("dial: %w", syscall.ECONNREFUSED), CauseRefused},
		{0, fmt.Errorf("post: %w", io.EOF), CauseEOF},
		{0, io.ErrUnexpectedEOF, CausePartialBody},
		{0, errors.New("strange"), CauseOther},
	} {
		if got := CauseOf(tc.status, tc.err); got != tc.want {
			t.Errorf("CauseOf(%d, %v) = %q, want %q", tc.status, tc.err, got, tc.want)
		}
	}
}

// ObserveFailures reports retried statuses (every 409 the server did not
// replay as its stored answer) and broken bodies, and not a stored 409.
func TestObserveFailures(t *testing.T) {
	step := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		step++
		switch step {
		case 1:
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(http.StatusConflict)
		case 2:
			w.WriteHeader(http.StatusConflict)
		case 3:
			w.Header().Set("Content-Length", "10")
			w.Write([]byte("half"))
		}
	}))
	defer srv.Close()
	c := NewChecker(nil)
	tr := NewTransport()
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: ObserveFailures(tr, c)}
	for range 3 {
		resp, err := hc.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	r := c.Check("observe", ServerView{})
	if len(r.Retries) != 2 || r.Retries["409"] != 1 || r.Retries[CausePartialBody] != 1 {
		t.Errorf("failures %v, want one 409 and one partial body", r.Retries)
	}
}

// A done answer other than the workload's 201 is an in-flight answer taken
// for final, unless the API said it had applied the operation; a request
// carrying the key where the dialect puts none is a violation.
func TestCheckerJudgesTheDoneAnswers(t *testing.T) {
	c := NewChecker([]string{"a", "b", "c"})
	for _, op := range []string{"a", "b", "c"} {
		c.Attempt(op, "k-"+op)
		c.Outcome(op, ResultDone)
	}
	c.Final("a", http.StatusCreated, false)
	c.Final("b", http.StatusAlreadyReported, false)
	c.Final("c", http.StatusBadRequest, true)
	r := c.Check("answers", ServerView{Effects: map[string]int{"a": 1, "b": 1, "c": 1}, Replays: -1,
		Wire: &WireView{Requests: 3, Misplaced: 1}})
	if r.FalseDone != 1 || r.Applied != 1 || r.OK() {
		t.Fatalf("false done %d, applied %d, ok %v; want 1, 1 and a broken promise", r.FalseDone, r.Applied, r.OK())
	}
	for _, s := range []string{"operation b was reported done with status 208", "1 requests carried an Idempotency-Key header"} {
		if !strings.Contains(r.Err().Error(), s) {
			t.Errorf("error lacks %q:\n%s", s, r.Err())
		}
	}
	var buf bytes.Buffer
	w := NewEventWriter(&buf)
	w.Final("b", http.StatusAlreadyReported, false)
	w.Final("c", http.StatusBadRequest, true)
	back := NewChecker([]string{"b", "c"})
	if err := ReadEvents(&buf, back, nil); err != nil {
		t.Fatal(err)
	}
	if r := back.Check("events", ServerView{}); r.FalseDone != 1 || r.Applied != 1 {
		t.Fatalf("final events read back as false done %d, applied %d; want 1 and 1", r.FalseDone, r.Applied)
	}
	if err := ReadEvents(strings.NewReader("final b 208 maybe\n"), back, nil); err == nil {
		t.Error("a malformed final event was accepted")
	}
}
