package testserver

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// Crash points: where an injected crash fault stops a request. Config.Crash
// receives one of these.
const (
	// CrashPointBeforeCommit is inside the final transaction, after the
	// business change and the key's answer were written but before COMMIT.
	// A crash here must leave neither behind.
	CrashPointBeforeCommit = "before-commit"

	// CrashPointAfterCommit is after the final COMMIT, before any response
	// byte is sent. A crash here leaves the effect and its stored answer;
	// the retry must get the answer replayed.
	CrashPointAfterCommit = "after-commit"

	// CrashPointAfterGateway is in POST /charges, after the gateway captured
	// the money and before the server recorded it. A crash here leaves a
	// capture the server does not know about and a locked key; the retry
	// must take the lock over and end with exactly one capture.
	CrashPointAfterGateway = "after-gateway"
)

// Faults injects failures into a Server for tests. Each rate is the fraction
// of mutating requests (0 to 1) that get that fault; the server rates must
// add up to at most 1, since a request gets at most one of them. Requests
// refused for bad input draw nothing. A fault acts only if the request
// reaches its point: an answer replayed from a stored key passes no commit
// and so is never faulted (though it may be delayed), and a gateway crash
// drawn by a reservation does nothing. The zero value injects nothing.
//
// Draws come from a generator seeded with Seed, one draw per mutating
// request in arrival order, so a sequential run is reproducible; concurrent
// requests share the sequence in whatever order they arrive.
type Faults struct {
	// Seed seeds the generator. Default 0, itself a valid seed.
	Seed uint64

	// ErrorBeforeCommit answers 500 or 503 (half each) instead of
	// committing; the transaction is rolled back and the key left free, so
	// the retry runs the request again: a reservation or stock update from
	// the start, a charge from its recovery point gateway_called, without
	// calling the gateway again. Default 0.
	ErrorBeforeCommit float64

	// HangUpAfterCommit commits, then closes the connection without a
	// response. Default 0.
	HangUpAfterCommit float64

	// BadGatewayAfterCommit commits, then answers 502 instead of the real
	// response, as a proxy in front of the server might. Default 0.
	BadGatewayAfterCommit float64

	// CrashBeforeCommit, CrashAfterCommit and CrashAfterGateway crash at the
	// matching CrashPoint (see Config.Crash). Default 0.
	CrashBeforeCommit, CrashAfterCommit, CrashAfterGateway float64

	// DelayRate delays that fraction of requests by Delay before they are
	// processed. Default 0.
	DelayRate float64

	// Delay is how long a delayed request waits. Default 50ms when DelayRate
	// is set.
	Delay time.Duration

	// Gateway injects faults into the fake payment gateway. They are drawn
	// separately and may come on top of a server fault. Default: none.
	Gateway GatewayFaults
}

// DefaultFaultDelay is the delay of a delayed request when Faults.Delay is
// zero.
const DefaultFaultDelay = 50 * time.Millisecond

// UniformFaults returns Faults that fail the given fraction of mutating
// requests, spread evenly over the seven server faults (error before
// commit, hang-up and 502 after commit, three crashes, delay), with the
// default delay and no gateway faults. UniformFaults(0.2, seed) is "faults at
// 20%".
func UniformFaults(rate float64, seed uint64) Faults {
	each := rate / 7
	return Faults{
		Seed:                  seed,
		ErrorBeforeCommit:     each,
		HangUpAfterCommit:     each,
		BadGatewayAfterCommit: each,
		CrashBeforeCommit:     each,
		CrashAfterCommit:      each,
		CrashAfterGateway:     each,
		DelayRate:             each,
	}
}

// faultKind is the one fault a request drew, if any.
type faultKind uint8

const (
	noFault faultKind = iota
	faultErrorBeforeCommit
	faultHangUpAfterCommit
	faultBadGatewayAfterCommit
	faultCrashBeforeCommit
	faultCrashAfterCommit
	faultCrashAfterGateway
	faultDelay
	faultGatewayFailure
	faultGatewayLostResponse
	numFaultKinds
)

// faultNames are the keys of Stats.Faults.
var faultNames = [numFaultKinds]string{
	noFault:                    "none",
	faultErrorBeforeCommit:     "error_before_commit",
	faultHangUpAfterCommit:     "hang_up_after_commit",
	faultBadGatewayAfterCommit: "bad_gateway_after_commit",
	faultCrashBeforeCommit:     "crash_before_commit",
	faultCrashAfterCommit:      "crash_after_commit",
	faultCrashAfterGateway:     "crash_after_gateway",
	faultDelay:                 "delay",
	faultGatewayFailure:        "gateway_failure",
	faultGatewayLostResponse:   "gateway_lost_response",
}

func (k faultKind) String() string { return faultNames[k] }

// fault is what one request drew: its kind and, for an error, the status.
type fault struct {
	kind   faultKind
	status int
}

func (f Faults) rates() []faultRate {
	return []faultRate{
		{faultErrorBeforeCommit, f.ErrorBeforeCommit},
		{faultHangUpAfterCommit, f.HangUpAfterCommit},
		{faultBadGatewayAfterCommit, f.BadGatewayAfterCommit},
		{faultCrashBeforeCommit, f.CrashBeforeCommit},
		{faultCrashAfterCommit, f.CrashAfterCommit},
		{faultCrashAfterGateway, f.CrashAfterGateway},
		{faultDelay, f.DelayRate},
	}
}

type faultRate struct {
	kind faultKind
	rate float64
}

func (f Faults) validate() error {
	sum := 0.0
	for _, r := range f.rates() {
		if !(r.rate >= 0 && r.rate <= 1) { // also refuses NaN
			return fmt.Errorf("%w: fault rate %s=%v is not between 0 and 1", ErrInvalidConfig, r.kind, r.rate)
		}
		sum += r.rate
	}
	if sum > 1+1e-9 {
		return fmt.Errorf("%w: server fault rates add up to %v, more than 1", ErrInvalidConfig, sum)
	}
	if f.Delay < 0 {
		return fmt.Errorf("%w: negative fault delay", ErrInvalidConfig)
	}
	return f.Gateway.validate()
}

// enabled reports whether any server fault can fire.
func (f Faults) enabled() bool {
	for _, r := range f.rates() {
		if r.rate > 0 {
			return true
		}
	}
	return false
}

// faultDice draws faults from a seeded generator shared by all requests.
type faultDice struct {
	faults Faults
	on     bool
	mu     sync.Mutex
	rng    *rand.Rand
}

func newFaultDice(f Faults) *faultDice {
	if f.Delay == 0 {
		f.Delay = DefaultFaultDelay
	}
	return &faultDice{
		faults: f,
		on:     f.enabled(),
		rng:    rand.New(rand.NewPCG(f.Seed, 0x1de5_7e57_5e2e_0001)),
	}
}

// draw picks the fault, if any, for the next mutating request. One uniform
// number walks the cumulative rates; inside the error interval its lower
// half means 500 and its upper half 503.
func (d *faultDice) draw() fault {
	if !d.on {
		return fault{}
	}
	d.mu.Lock()
	u := d.rng.Float64()
	d.mu.Unlock()
	low := 0.0
	for _, r := range d.faults.rates() {
		if u < low+r.rate {
			f := fault{kind: r.kind}
			if r.kind == faultErrorBeforeCommit {
				f.status = 503
				if u < low+r.rate/2 {
					f.status = 500
				}
			}
			return f
		}
		low += r.rate
	}
	return fault{}
}
