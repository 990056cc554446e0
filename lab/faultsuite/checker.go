package faultsuite

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Checker judges a run in the manner of Jepsen's counter and total-queue
// checkers: it records what the client observed of each operation (its
// attempts and their keys, the outcome of every Do, the resumes after a
// crash) and, given what the server holds at the end, counts the
// operations that took effect twice, the ones reported done that did not
// take effect, and the ones never done.
//
// A Checker is a Recorder and is safe for concurrent use.
type Checker struct {
	mu       sync.Mutex
	ops      map[string]*trace
	ids      []string
	attempts int
	failures map[string]int
	replayed int
	strays   map[string]bool // operations observed that the run did not declare
}

// trace is what the client observed of one operation.
type trace struct {
	key       string          // the first key seen
	others    map[string]bool // the other keys seen, if any (a violation)
	done      bool            // a Do returned its response
	rejected  bool
	unknowns  int // Do calls that ended unknown, and resumes after a crash
	resumes   int // resumes after a crash
	refused   int
	applied   int      // done answers that said the operation was applied before
	falseDone []string // done answers that were not the workload's answer
}

// NewChecker returns a Checker for a run of the operations ids.
func NewChecker(ids []string) *Checker {
	c := &Checker{
		ops:      make(map[string]*trace, len(ids)),
		ids:      slices.Clone(ids),
		failures: map[string]int{},
		strays:   map[string]bool{},
	}
	for _, id := range ids {
		c.ops[id] = &trace{}
	}
	return c
}

// trace returns op's trace, noting an operation the run did not declare.
// Called with mu held.
func (c *Checker) trace(op string) *trace {
	t, ok := c.ops[op]
	if !ok {
		c.strays[op] = true
		t = &trace{}
		c.ops[op] = t
	}
	return t
}

// Attempt records one attempt of op and the key it carried.
func (c *Checker) Attempt(op, key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.attempts++
	t := c.trace(op)
	switch {
	case t.key == "":
		t.key = key
	case key != t.key:
		if t.others == nil {
			t.others = map[string]bool{}
		}
		t.others[key] = true
	}
}

// Failure records one failed attempt by its cause.
func (c *Checker) Failure(cause string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failures[cause]++
}

// Replayed records a response the server replayed.
func (c *Checker) Replayed() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.replayed++
}

// Outcome records how one Do of op ended.
func (c *Checker) Outcome(op string, r Result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.trace(op)
	switch r {
	case ResultDone:
		t.done = true
	case ResultRejected:
		t.rejected = true
	case ResultUnknown:
		t.unknowns++
	default:
		t.refused++
	}
}

// Final records the answer a Do of op ended done with. The workload's
// answer is 201 Created, first or replayed; any other is false unless the
// API said it had applied the operation before: an in-flight answer
// (409, 429, 208...) taken for done.
func (c *Checker) Final(op string, status int, applied bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.trace(op)
	switch {
	case applied:
		t.applied++
	case status != http.StatusCreated:
		t.falseDone = append(t.falseDone, strconv.Itoa(status))
	}
}

// Resumed records that op was found pending by a client restarted after a
// crash.
func (c *Checker) Resumed(op string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.trace(op)
	t.unknowns++
	t.resumes++
}

// Done reports whether every operation of the run has been reported done.
func (c *Checker) Done() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range c.ids {
		if !c.ops[id].done {
			return false
		}
	}
	return true
}

// ServerView is what the server holds at the end of a run.
type ServerView struct {
	// Effects counts the business rows (charges and reservations) per
	// reference, which the workload sets to the operation ID.
	Effects map[string]int
	// Replays is how many answers the server replayed from a stored key,
	// or -1 when the run cannot know (a server that was killed loses its
	// counters).
	Replays int64
	// Charges and Captures are the charges the server recorded and the
	// captures its payment gateway made; exactly-once charging makes them
	// equal once every request has finished.
	Charges, Captures int64
	// StockTaken is how much of the inventory the server's stock count
	// lost, and Reserved how much its reservation rows hold: the same
	// number, unless stock moved without a reservation or the other way.
	StockTaken, Reserved int64
	// Wire is what reached the server, seen between the proxy and the
	// server (see Wire), or nil for a run without a proxy. With it, an
	// operation's keys are counted from the wire as well as from the
	// client's reports, and a key sent again while the server still
	// answered it is a violation.
	Wire *WireView
}

// maxViolations bounds the violations a Report spells out.
const maxViolations = 10

// Report is the verdict on a run.
type Report struct {
	// Name names the run in its line.
	Name string
	// Operations is the number of operations the run declared.
	Operations int
	// Attempts counts the attempts the client reported. It is a lower
	// bound on the requests the server saw: net/http resends some on its
	// own, and a killed client cannot report its last ones.
	Attempts int
	// Retries counts failed attempts by cause (see CauseOf). Every one of
	// them was followed by another attempt of its operation, in the same
	// Do, in a later Do, or after a restart, unless the operation never
	// ended done.
	Retries map[string]int
	// ClientCrashes counts operations found pending after a client crash.
	ClientCrashes int
	// Replays counts the answers the server replayed from a stored key
	// (-1 when a killed server lost its counters); ReplaysSeen the ones
	// that reached the client.
	Replays     int64
	ReplaysSeen int
	// Duplicates: operations with more than one effect.
	Duplicates int
	// Lost: operations the client reported done without an effect.
	Lost int
	// Unfinished: operations never reported done (rejected ones
	// included); after the last resume of a run there must be none.
	Unfinished int
	// UnknownThenResolved: operations that ended unknown at least once
	// (or were cut off by a crash) and were done in the end.
	UnknownThenResolved int
	// KeyChanges: operations whose attempts did not all carry one key,
	// by the client's reports and by the wire.
	KeyChanges int
	// Overlaps: requests that reached the server while another with the
	// same key was still being answered to a client that waited (see
	// Wire): two sends of one operation at once (C11).
	Overlaps int
	// Strays: effects or attempts under an operation the run did not
	// declare.
	Strays int
	// FalseDone: operations reported done with an answer that was not
	// the workload's (201) nor an already-applied answer: an in-flight
	// answer taken for final. Applied counts the done answers that said
	// the operation was applied before.
	FalseDone, Applied int
	// Charges and Captures, StockTaken and Reserved, are the ServerView's.
	Charges, Captures    int64
	StockTaken, Reserved int64
	Violations           []string // the first few, spelled out
	violationsOmitted    int
}

// Check compares what the client observed with what the server holds.
func (c *Checker) Check(name string, v ServerView) Report {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := Report{
		Name: name, Operations: len(c.ids), Attempts: c.attempts, Retries: maps.Clone(c.failures),
		Replays: v.Replays, ReplaysSeen: c.replayed, Charges: v.Charges, Captures: v.Captures,
		StockTaken: v.StockTaken, Reserved: v.Reserved,
	}
	for _, id := range c.ids {
		t, n := c.ops[id], v.Effects[id]
		r.ClientCrashes += t.resumes
		r.Applied += t.applied
		if len(t.falseDone) > 0 {
			r.FalseDone++
			r.violate("operation %s was reported done with status %s, neither its answer nor an already-applied one", id, strings.Join(t.falseDone, ", "))
		}
		switch {
		case n > 1:
			r.Duplicates++
			r.violate("operation %s took effect %d times", id, n)
		case n == 0 && t.done:
			r.Lost++
			r.violate("operation %s was reported done but has no effect", id)
		}
		if !t.done {
			r.Unfinished++
			r.violate("operation %s never ended done (rejected %v, unknown %d times, refused %d times, %d effects)",
				id, t.rejected, t.unknowns, t.refused, n)
		} else if t.unknowns > 0 {
			r.UnknownThenResolved++
		}
		if keys := t.keys(v.Wire, id); len(keys) > 1 {
			r.KeyChanges++
			r.violate("operation %s was sent under %d keys: %s", id, len(keys), strings.Join(keys, " "))
		}
	}
	if v.Wire != nil {
		for _, o := range v.Wire.Overlaps {
			r.Overlaps++
			r.violate("%s", o)
		}
		if v.Wire.Keyless > 0 {
			r.violate("%d mutating requests reached the server without a key", v.Wire.Keyless)
		}
		if v.Wire.Misplaced > 0 {
			r.violate("%d requests carried an Idempotency-Key header where the dialect puts the key elsewhere", v.Wire.Misplaced)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(c.strays)) {
		r.Strays++
		r.violate("attempts or outcomes for %q, which is not an operation of the run", id)
	}
	for _, ref := range slices.Sorted(maps.Keys(v.Effects)) {
		if _, ok := c.ops[ref]; !ok {
			r.Strays++
			r.violate("%d effects under reference %q, which is not an operation of the run", v.Effects[ref], ref)
		}
	}
	if v.Charges != v.Captures {
		r.violate("the gateway captured %d times for %d charges", v.Captures, v.Charges)
	}
	if v.StockTaken != v.Reserved {
		r.violate("the stock went down by %d for reservations of %d", v.StockTaken, v.Reserved)
	}
	return r
}

// keys returns the distinct keys op was sent under: the ones the client
// reported and the ones the wire saw.
func (t *trace) keys(wire *WireView, op string) []string {
	all := maps.Clone(t.others)
	if all == nil {
		all = map[string]bool{}
	}
	if t.key != "" {
		all[t.key] = true
	}
	if wire != nil {
		for _, k := range wire.Keys[op] {
			all[k] = true
		}
	}
	return slices.Sorted(maps.Keys(all))
}

func (r *Report) violate(format string, args ...any) {
	if len(r.Violations) == maxViolations {
		r.violationsOmitted++
		return
	}
	r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
}

// OK reports whether the run kept the promise: no duplicate, nothing lost,
// everything done, one key per operation, never two sends of a key at
// once, no stray effect, one capture per charge and as much stock taken as
// reserved.
func (r Report) OK() bool { return len(r.Violations) == 0 }

// Err returns nil for a run that kept the promise, and otherwise an error
// listing the violations.
func (r Report) Err() error {
	if r.OK() {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "faultsuite: %s broke the promise: %s", r.Name, r)
	for _, v := range r.Violations {
		b.WriteString("\n\t" + v)
	}
	if r.violationsOmitted > 0 {
		fmt.Fprintf(&b, "\n\t... and %d more", r.violationsOmitted)
	}
	return fmt.Errorf("%s", b.String())
}

// String returns the report on one line: operations, attempts, retries by
// cause, resumes after client crashes, replays (by the server, and seen
// by the client), duplicates, lost, unfinished, unknown-then-resolved, key
// changes, overlaps, strays, false done and already-applied answers,
// captures per charges and stock taken per stock reserved, e.g.
//
//	chaos: ops=2000 attempts=2670 retries=670 (429=129 502=123 503=141 eof=17 partial-body=125 reset=26 timeout=109) client-crash-resumes=0 replays=469 replays-seen=341 duplicates=0 lost=0 unfinished=0 unknown-then-resolved=453 key-changes=0 overlaps=0 strays=0 false-done=0 applied=0 captures=1000/1000 stock=1999/1999
func (r Report) String() string {
	total := 0
	causes := slices.Sorted(maps.Keys(r.Retries))
	parts := make([]string, 0, len(causes))
	for _, k := range causes {
		total += r.Retries[k]
		parts = append(parts, fmt.Sprintf("%s=%d", k, r.Retries[k]))
	}
	replays := "unknown"
	if r.Replays >= 0 {
		replays = fmt.Sprint(r.Replays)
	}
	return fmt.Sprintf("%s: ops=%d attempts=%d retries=%d (%s) client-crash-resumes=%d replays=%s replays-seen=%d duplicates=%d lost=%d unfinished=%d unknown-then-resolved=%d key-changes=%d overlaps=%d strays=%d false-done=%d applied=%d captures=%d/%d stock=%d/%d",
		r.Name, r.Operations, r.Attempts, total, strings.Join(parts, " "), r.ClientCrashes, replays, r.ReplaysSeen,
		r.Duplicates, r.Lost, r.Unfinished, r.UnknownThenResolved, r.KeyChanges, r.Overlaps, r.Strays, r.FalseDone, r.Applied, r.Captures, r.Charges, r.StockTaken, r.Reserved)
}
