package pgjournal_test

// F11.10: when a journal's claims end, measured against its life's end in
// the database.

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/journal"
	"github.com/idemkit/idem/lab/testkit/pgtest"
	"github.com/idemkit/idem/pgjournal"
)

// lapseLog records when the journal logs that its liveness lapsed: the
// instant its claims are lost.
type lapseLog struct {
	mu sync.Mutex
	at time.Time
}

func (l *lapseLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *lapseLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *lapseLog) WithGroup(string) slog.Handler            { return l }
func (l *lapseLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message == logLifeLapsed {
		l.mu.Lock()
		if l.at.IsZero() {
			l.at = time.Now()
		}
		l.mu.Unlock()
	}
	return nil
}

func (l *lapseLog) when() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.at
}

// aliveUntil returns the alive_until of owner's life in dsn's database,
// or the zero time if it has none.
func aliveUntil(t *testing.T, dsn, owner string) time.Time {
	t.Helper()
	var until []time.Time
	queryRow(t, dsn, `SELECT array_agg(alive_until) FROM idem_lives WHERE owner = '`+owner+`'`, &until)
	if len(until) == 0 {
		return time.Time{}
	}
	return until[0]
}

// TestALifeEndsBeforeItsEndInTheDatabase is F11.10, the instant a
// journal's claims end (its liveness lapsed by its own clock) measured
// against the life's alive_until in the database (the same machine's
// clock here): before it, counted from the sending of the statement
// that started the life, then of each renewal that succeeded, however
// late their answers. Each statement here runs at once and is answered
// 0.3 Liveness late; then no statement reaches the database, so the
// last one's alive_until stands. Counted from the answers, the claims
// would end 0.2 Liveness after the life did in the database, when
// another machine may take their operations.
func TestALifeEndsBeforeItsEndInTheDatabase(t *testing.T) {
	const liveness = 3 * time.Second
	for _, renewed := range []bool{false, true} {
		name := map[bool]string{false: "from its start", true: "from a late renewal"}[renewed]
		t.Run(name, func(t *testing.T) {
			dsn := pgtest.NewDatabase(t)
			p, via := newProxy(t, dsn)
			log := &lapseLog{}
			j := openJournal(t, via, pgjournal.Options{Owner: "a", Liveness: liveness, LeaseTTL: time.Hour,
				Timeout: time.Minute, Logger: slog.New(log)})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			op := journal.Operation{ID: "charge", Key: "k", Method: "POST", URL: "http://x/", KeyTTL: 24 * time.Hour, State: journal.StatePending}
			var before time.Time // alive_until before the statement measured
			if renewed {
				c, err := j.ClaimBegin(ctx, op)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Release()
				for j.Stats().LivenessRenewals == 0 {
					time.Sleep(5 * time.Millisecond)
				}
				before = aliveUntil(t, dsn, "a")
				p.DelayAnswers(liveness * 3 / 10)
			} else {
				p.DelayAnswers(liveness * 3 / 10)
				go func() {
					if c, err := j.ClaimBegin(ctx, op); err == nil { // its intent never arrives
						c.Release()
					}
				}()
			}
			// The statement measured has run once alive_until moved.
			var until time.Time
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(2 * time.Millisecond) {
				if until = aliveUntil(t, dsn, "a"); !until.IsZero() && until.After(before) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the life was not started or renewed")
				}
			}
			p.FreezeRequests(true)
			defer p.FreezeRequests(false)
			for log.when().IsZero() {
				if time.Since(until) > liveness {
					t.Fatalf("the journal's liveness did not lapse by itself within %v of its end in the database", liveness)
				}
				time.Sleep(2 * time.Millisecond)
			}
			ended := log.when()
			if last := aliveUntil(t, dsn, "a"); !last.Equal(until) {
				t.Fatalf("a statement reached the database after the one measured: alive_until %v, then %v", until, last)
			}
			if want := uint64(map[bool]int{false: 0, true: 2}[renewed]); j.Stats().LivenessRenewals != want {
				t.Fatalf("%d renewals, want %d: the statement measured was answered", j.Stats().LivenessRenewals, want)
			}
			// Sent at about until - Liveness, the claims end at about a
			// tenth of Liveness before until.
			if margin := until.Sub(ended); margin <= 0 || margin > liveness/2 {
				t.Fatalf("the claims ended %v before the life's end in the database, want within (0, %v]", margin, liveness/2)
			}
			t.Logf("the claims ended %v before the life's end in the database", until.Sub(ended).Round(time.Millisecond))
		})
	}
}
