package sqlkit_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/sqlkit"
)

// Dollar numbers ? in order and keeps ?N, whatever its digits.
func TestDollarPlaceholders(t *testing.T) {
	for in, want := range map[string]string{
		`a = ? AND b = ?`:             `a = $1 AND b = $2`,
		`a = ?1 OR b = ?1 AND c = ?2`: `a = $1 OR b = $1 AND c = $2`,
		`no placeholders`:             `no placeholders`,
		`a = ?9`:                      `a = $9`,
		`a = ?0`:                      `a = $0`,
		`a = ?10 OR b = ?`:            `a = $10 OR b = $1`,
		`a = ?19, ?90`:                `a = $19, $90`,
	} {
		if got := sqlkit.Dollar.Rebind(in); got != want {
			t.Errorf("Dollar.Rebind(%q) = %q, want %q", in, got, want)
		}
	}
}

// Numbered leaves a statement as written; Positional turns ?N into ? and
// passes the argument again in its place.
func TestPositionalRepeatsNumberedArguments(t *testing.T) {
	f := &sqlkit.Flavor{Placeholders: sqlkit.Positional, Tokens: map[string]string{"{{x}}": "X"}}
	s := sqlkit.NewStmts(f, map[string]string{"{{t}}": "keys"})
	q, args := s.Bind(`UPDATE {{t}} SET a = ?1, b = ?2 WHERE c = ?1 AND d = ?3 {{x}}`, []any{"one", 2, 3.0})
	if q != `UPDATE keys SET a = ?, b = ? WHERE c = ? AND d = ? X` ||
		len(args) != 4 || args[0] != "one" || args[1] != 2 || args[2] != "one" || args[3] != 3.0 {
		t.Fatalf("Bind = %q %v", q, args)
	}
	q, args = s.Bind(`SELECT ? , ?`, []any{1, 2})
	if q != `SELECT ? , ?` || len(args) != 2 || args[0] != 1 || args[1] != 2 {
		t.Fatalf("Bind = %q %v", q, args)
	}
	n := sqlkit.NewStmts(&sqlkit.Flavor{Placeholders: sqlkit.Numbered}, nil)
	if q := n.Text(`a = ?1 OR b = ?`); q != `a = ?1 OR b = ?` {
		t.Fatalf("Numbered: %q", q)
	}
}

// A rerun waits at least a quarter of its step (1 ms << run+1, capped at
// 100 ms) and less than five quarters: never at once, never much longer.
func TestWaitIsBetweenAQuarterAndFiveQuartersOfItsStep(t *testing.T) {
	for run := range 20 {
		step := min(time.Millisecond<<(run+1), 100*time.Millisecond)
		for range 200 {
			if d := sqlkit.WaitTime(run); d < step/4 || d >= step*5/4 {
				t.Fatalf("rerun %d waits %v, want from %v to under %v", run+1, d, step/4, step*5/4)
			}
		}
	}
}

type state string

func (s state) Error() string    { return "state " + string(s) }
func (s state) SQLState() string { return string(s) }

// Rerun runs again only what again accepts, at most reruns times, and
// counts every run.
func TestRerunCountsItsRuns(t *testing.T) {
	again := func(err error) bool { return sqlkit.Generic(err) == sqlkit.Serialization }
	runs, reruns := 0, 0
	n, err := sqlkit.Rerun(context.Background(), 2, again, func() { reruns++ }, func() error {
		runs++
		return state("40001")
	})
	if n != 3 || runs != 3 || reruns != 2 || sqlkit.Generic(err) != sqlkit.Serialization {
		t.Fatalf("Rerun = %d, %v after %d runs, %d reruns; want 3 runs, 2 reruns", n, err, runs, reruns)
	}
	runs = 0
	n, err = sqlkit.Rerun(context.Background(), 5, again, nil, func() error { runs++; return errors.New("syntax") })
	if n != 1 || runs != 1 || err == nil {
		t.Fatalf("Rerun of another failure = %d, %v after %d runs; want 1 run", n, err, runs)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = sqlkit.Rerun(ctx, 5, again, nil, func() error { return state("40P01") })
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "waiting to rerun") {
		t.Fatalf("Rerun on an ended context = %v", err)
	}
}

// SQLState classes every code its rule names, and no other.
func TestSQLStateClasses(t *testing.T) {
	for code, want := range map[string]sqlkit.Class{
		"40001": sqlkit.Serialization, "40P01": sqlkit.Serialization, "23505": sqlkit.Unique,
		"08006": sqlkit.Unavailable, "08P01": sqlkit.Unavailable, "53300": sqlkit.Unavailable,
		"57P01": sqlkit.Unavailable, "57P02": sqlkit.Unavailable, "57P03": sqlkit.Unavailable,
		"57014": sqlkit.Unavailable, "25006": sqlkit.Unavailable,
		"57P04": sqlkit.Other, "23503": sqlkit.Other, "42601": sqlkit.Other, "40002": sqlkit.Other,
	} {
		if got := sqlkit.SQLState(code); got != want {
			t.Errorf("SQLState(%s) = %d, want %d", code, got, want)
		}
	}
}
