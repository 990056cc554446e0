package pgjournal

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"testing"
	"time"
)

// F10.4 and F10.9 at the hand-off: a queued caller whose context ends as
// the statement in flight returns either leaves the queue before it is
// handed the lead (its context's error, its row in no statement) or, once
// handed the lead, leads the next statement and gets its result; either
// way the group is never left without a leader, so the next caller's
// statement is sent. Which of the two happens is the scheduler's choice:
// the race is run many times on one P, so that both occur.
func TestAWaiterHandedTheLeadAsItsContextEndsStillLeads(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	led := 0
	for round := range 200 {
		started, release := make(chan struct{}), make(chan struct{})
		queued := make(chan int, 1)
		var statements [][]int
		g := &group[int, int]{
			commit: func(batch []*member[int, int]) error {
				var ins []int
				for _, m := range batch {
					ins = append(ins, m.in)
					m.out = 10 * m.in
				}
				statements = append(statements, ins)
				if len(statements) == 1 {
					close(started)
					<-release
				}
				return nil
			},
			onQueue: func(in int) { queued <- in },
		}
		type result struct {
			out int
			err error
		}
		first, second := make(chan result, 1), make(chan result, 1)
		go func() {
			out, err := g.do(context.Background(), 1)
			first <- result{out, err}
		}()
		<-started
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			out, err := g.do(ctx, 2)
			second <- result{out, err}
		}()
		if in := <-queued; in != 2 {
			t.Fatalf("round %d: queued %d, want 2", round, in)
		}
		cancel()
		close(release)
		if r := <-first; r.out != 10 || r.err != nil {
			t.Fatalf("round %d: the first caller got %d, %v; want 10, nil", round, r.out, r.err)
		}
		r := <-second
		carried := slices.ContainsFunc(statements, func(ins []int) bool { return slices.Contains(ins, 2) })
		switch {
		case r.err == nil && r.out == 20 && carried:
			led++
		case errors.Is(r.err, context.Canceled) && !carried:
		default:
			t.Fatalf("round %d: the caller whose context ended got %d, %v, its row carried: %v; "+
				"want 20 from the statement it led, or context.Canceled and no row", round, r.out, r.err, carried)
		}
		hang, stop := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := g.do(hang, 3)
		stop()
		if out != 30 || err != nil {
			t.Fatalf("round %d: the next caller got %d, %v; want 30, nil: the group was left without a leader", round, out, err)
		}
	}
	t.Logf("led %d of 200", led)
	if led == 0 {
		t.Fatal("in no round was the caller handed the lead before it saw its context end")
	}
}
