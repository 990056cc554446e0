package main

// The settings of idem demo.

import "time"

// The demo's settings, the same for both clients. They are tuned so that
// the default demo ends in well under a minute while every fault still
// costs what it would cost a real client: a stalled response is waited
// for until the attempt times out. The idem client keeps its retry budget
// (the default): at high fault rates it stops retrying, and the operations
// it leaves pending are resumed by the next round.
const (
	// demoConcurrency is how many invoices are charged at once.
	demoConcurrency = 8
	// demoAttemptTimeout bounds each attempt, response body included.
	demoAttemptTimeout = 500 * time.Millisecond
	// demoMaxAttempts bounds the attempts of one charge in one round.
	demoMaxAttempts = 8
	// demoInitialWait and demoMaxWait bound the waits between attempts.
	demoInitialWait = 5 * time.Millisecond
	demoMaxWait     = 200 * time.Millisecond
	// demoMaxStall is how long the proxy holds a stalled response if the
	// client has not given up first; above demoAttemptTimeout, so that a
	// stall ends in the client's timeout.
	demoMaxStall = 2 * demoAttemptTimeout
	// demoMaxRounds bounds the passes over the batch.
	demoMaxRounds = 100
)
