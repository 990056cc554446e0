package idem

// memoryJournal: the Journal a Client keeps when Config.Journal is nil.
// An operation that is pending, or that a claim holds, lives in a map, its
// entry holding the operation and the claim on its ID, so a Do costs a few
// map lookups rather than a file journal's encoding of every record it
// would write. A completed operation no claim holds moves to the archive
// (memoryArchive), and back to the map when its ID is claimed again. It
// keeps what a filejournal.Journal keeps, with the same checks and errors
// (checkIntent, checkCompletion, and a size bound: see memoryMaxRecord), and
// forgets what a filejournal.Journal without a file forgot: completed
// operations whose outcome is KeyTTL old, swept once the journal has
// doubled since the last sweep.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/idemkit/idem/internal/journalkit"
)

// memoryMaxRecord bounds the intent (ID, key, method and URL) and the
// outcome (header and body) the memory journal takes: 16 MiB, as a file
// journal bounds a record's payload. A file record's payload also holds a
// few dozen bytes of lengths, fingerprint, times and status, which this
// bound leaves out, so an intent or outcome within that much of 16 MiB is
// taken here and refused (ErrInvalidOperation) by a file journal.
const memoryMaxRecord = 16 << 20

// memorySweepMin is the number of operations below which the memory
// journal never sweeps.
const memorySweepMin = 8192

type memoryJournal struct {
	ttl time.Duration
	now func() time.Time

	mu      sync.Mutex
	ops     map[string]*memoryEntry // by ID; also IDs only claimed
	archive memoryArchive           // completed operations no claim holds
	sweepAt int                     // size at which the journal next sweeps
}

// memoryEntry is an operation ID's place in the journal's map: the
// operation's fields, as the archive keeps them, and the claim on the ID.
type memoryEntry struct {
	// intent is the ID, key, method and URL end to end; the map's key is
	// its ID part once the operation is begun (see memoryClaim.Begin).
	intent                 string
	keyAt, methodAt, urlAt uint32 // where the key, method and URL start in intent
	status                 int32
	fingerprint            Fingerprint
	created, completed     int64 // Unix nanoseconds
	// outcome is the recorded header and body, encoded as a file journal
	// encodes them (journalkit.EncodeHeaderBody).
	outcome []byte

	state           State
	bodyTruncated   bool
	headerTruncated bool
	begun           bool          // an intent is recorded; false for an ID only claimed
	held            bool          // a claim holds the ID
	free            chan struct{} // closed when the claim is released; made by the first claim that waits
}

// An intent is at most memoryMaxRecord bytes: its offsets fit a uint32.
const _ uint32 = memoryMaxRecord

func (e *memoryEntry) id() string     { return e.intent[:e.keyAt] }
func (e *memoryEntry) key() string    { return e.intent[e.keyAt:e.methodAt] }
func (e *memoryEntry) method() string { return e.intent[e.methodAt:e.urlAt] }
func (e *memoryEntry) url() string    { return e.intent[e.urlAt:] }

// setIntent records op's ID, key, method and URL in one allocation.
func (e *memoryEntry) setIntent(op *Operation) {
	e.intent = op.ID + op.Key + op.Method + op.URL
	e.keyAt = uint32(len(op.ID))
	e.methodAt = e.keyAt + uint32(len(op.Key))
	e.urlAt = e.methodAt + uint32(len(op.Method))
}

// newMemoryJournalFor returns an empty memory journal whose keys live ttl
// (DefaultKeyTTL when not positive), on the clock now (time.Now when nil).
func newMemoryJournalFor(ttl time.Duration, now func() time.Time) *memoryJournal {
	if ttl <= 0 {
		ttl = DefaultKeyTTL
	}
	if now == nil {
		now = time.Now
	}
	return &memoryJournal{ttl: ttl, now: now, ops: make(map[string]*memoryEntry), archive: newMemoryArchive(), sweepAt: memorySweepMin}
}

// size is the number of operations the journal holds, counting those
// claimed and not begun, and the archive's records taken out.
func (j *memoryJournal) size() int { return len(j.ops) + j.archive.len() }

// entry returns id's entry in the map, moving the operation there from
// the archive if it is archived; nil if the journal has nothing of id.
// Called with mu held.
func (j *memoryJournal) entry(id string) *memoryEntry {
	if e := j.ops[id]; e != nil {
		return e
	}
	e := j.archive.take(id)
	if e != nil {
		j.ops[e.id()] = e
	}
	return e
}

// Claim waits until no other Do of id holds it, or ctx ends.
func (j *memoryJournal) Claim(ctx context.Context, id string) (Claim, error) {
	return j.claim(ctx, id, true)
}

// TryClaim is Claim without the wait: a *HeldError at once when another Do
// holds id.
func (j *memoryJournal) TryClaim(ctx context.Context, id string) (Claim, error) {
	return j.claim(ctx, id, false)
}

// claim takes the claim on id, waiting for it within ctx or, unless wait,
// not at all.
func (j *memoryJournal) claim(ctx context.Context, id string, wait bool) (Claim, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	j.mu.Lock()
	for {
		e := j.entry(id)
		if e == nil {
			e = &memoryEntry{}
			j.ops[id] = e
		}
		if !e.held {
			e.held = true
			j.mu.Unlock()
			return &memoryClaim{j: j, id: id, e: e}, nil
		}
		if !wait {
			j.mu.Unlock()
			return nil, &HeldError{ID: id}
		}
		if e.free == nil {
			e.free = make(chan struct{})
		}
		free := e.free
		j.mu.Unlock()
		select {
		case <-free: // the entry may be gone: look the ID up again
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		j.mu.Lock()
	}
}

// Lookup returns the operation with the given ID. It never fails.
func (j *memoryJournal) Lookup(_ context.Context, id string) (Operation, bool, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if e := j.ops[id]; e != nil {
		if !e.begun {
			return Operation{}, false, nil
		}
		return e.operation(), true, nil
	}
	if i := j.archive.find(id); i >= 0 {
		return j.archive.operation(i), true, nil
	}
	return Operation{}, false, nil
}

// List returns the operations the listing selects, ordered by Created then
// ID. It never fails.
func (j *memoryJournal) List(_ context.Context, which Listing) ([]Operation, error) {
	now := j.now()
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []Operation
	for _, e := range j.ops {
		if e.begun && which.Selects(Operation{State: e.state, Created: time.Unix(0, e.created)}, now, j.ttl) {
			out = append(out, e.operation())
		}
	}
	for i := range j.archive.len() {
		r := j.archive.rec(i)
		if !r.gone && which.Selects(Operation{State: r.state, Created: time.Unix(0, r.created)}, now, j.ttl) {
			out = append(out, j.archive.operation(i))
		}
	}
	slices.SortFunc(out, func(a, b Operation) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	if out == nil {
		out = []Operation{}
	}
	return out, nil
}

// KeyTTL returns how long a key lives on the server.
func (j *memoryJournal) KeyTTL() time.Duration { return j.ttl }

// Now returns the journal's clock.
func (j *memoryJournal) Now() time.Time { return j.now() }

// sweepIfGrown sweeps once the journal's size has reached sweepAt. Called
// with mu held.
func (j *memoryJournal) sweepIfGrown() {
	if j.size() >= j.sweepAt {
		j.sweep()
	}
}

// sweep drops the completed operations whose outcome is KeyTTL old and
// that no claim holds, as a filejournal.Journal without a file dropped them when it
// compacted: the archive's (see settle). Called with mu held.
func (j *memoryJournal) sweep() {
	j.archive.sweep(j.now(), j.ttl)
	j.sweepAt = max(memorySweepMin, 2*j.size())
}

// settle moves id's operation from the map to the archive if it is
// completed and no claim holds it. Each method leaves the map holding
// no such operation: Release settles what its claim completed, and a
// method of a released claim what it read back or completed. Called with
// mu held.
func (j *memoryJournal) settle(id string) {
	if e := j.ops[id]; e != nil && e.begun && !e.held && e.state.final() {
		delete(j.ops, id)
		j.archive.put(e)
		j.sweepIfGrown()
	}
}

// operation returns what e records, its header and body in fresh memory
// that the caller may keep and change. Called with mu held.
func (e *memoryEntry) operation() Operation {
	op := Operation{
		ID: e.id(), Key: e.key(), Fingerprint: e.fingerprint, Method: e.method(), URL: e.url(),
		Created: time.Unix(0, e.created).UTC(), State: e.state,
	}
	if e.state.final() {
		op.Completed, op.Status = time.Unix(0, e.completed).UTC(), int(e.status)
		op.BodyTruncated, op.HeaderTruncated = e.bodyTruncated, e.headerTruncated
		op.Header, op.Body = journalkit.DecodeHeaderBody(string(e.outcome))
	}
	return op
}

// memoryClaim is a memoryJournal's Claim.
type memoryClaim struct {
	j  *memoryJournal
	id string
	e  *memoryEntry // the entry held; nil after Release
}

// entry returns the entry of the claimed ID: the one held, or after
// Release whatever the journal holds (nil for nothing). Called with mu
// held.
func (c *memoryClaim) entry() *memoryEntry {
	if c.e != nil {
		return c.e
	}
	return c.j.entry(c.id)
}

func (c *memoryClaim) Operation() (Operation, bool) {
	c.j.mu.Lock()
	defer c.j.mu.Unlock()
	e := c.entry()
	if c.e == nil {
		defer c.j.settle(c.id)
	}
	if e == nil || !e.begun {
		return Operation{}, false
	}
	return e.operation(), true
}

func (c *memoryClaim) Begin(_ context.Context, op Operation) error {
	if op.ID != c.id {
		return fmt.Errorf("idem: journal in memory: Begin of %q under the claim on %q: %w", op.ID, c.id, ErrInvalidOperation)
	}
	err := checkIntent(&op)
	if size := len(op.ID) + len(op.Key) + len(op.Method) + len(op.URL); err == nil && size > memoryMaxRecord {
		err = fmt.Errorf("%w: intent of %d bytes, over the %d-byte limit of a record", ErrInvalidOperation, size, memoryMaxRecord)
	}
	if err != nil {
		return fmt.Errorf("idem: journal in memory: begin %q: %w", op.ID, err)
	}
	j := c.j
	j.mu.Lock()
	defer j.mu.Unlock()
	e := c.entry()
	if c.e == nil {
		defer j.settle(c.id)
	}
	switch {
	case e == nil: // Begin after Release, of an ID no one holds
		e = &memoryEntry{}
	case e.begun:
		return fmt.Errorf("idem: journal in memory: begin %q: %w", op.ID, ErrOperationExists)
	}
	if op.Created.IsZero() {
		op.Created = j.now()
	}
	e.setIntent(&op)
	e.fingerprint, e.created, e.state, e.begun = op.Fingerprint, op.Created.UnixNano(), StatePending, true
	// Assigning an existing key stores the new key string: the map then
	// holds the ID in the entry's intent rather than in memory of its own.
	j.ops[e.id()] = e
	j.sweepIfGrown()
	return nil
}

func (c *memoryClaim) Complete(_ context.Context, op Operation) error {
	if op.ID != c.id {
		return fmt.Errorf("idem: journal in memory: Complete of %q under the claim on %q: %w", op.ID, c.id, ErrInvalidOperation)
	}
	err := checkCompletion(&op)
	var raw []byte
	if err == nil {
		raw = journalkit.EncodeHeaderBody(op.Header, op.Body)
		if len(raw) > memoryMaxRecord {
			err = fmt.Errorf("%w: outcome of %d bytes, over the %d-byte limit of a record", ErrInvalidOperation, len(raw), memoryMaxRecord)
		}
	}
	if err != nil {
		return fmt.Errorf("idem: journal in memory: complete %q: %w", op.ID, err)
	}
	j := c.j
	j.mu.Lock()
	defer j.mu.Unlock()
	e := c.entry()
	if c.e == nil {
		defer j.settle(c.id)
	}
	switch {
	case e == nil || !e.begun:
		return fmt.Errorf("idem: journal in memory: complete %q: %w", op.ID, ErrNoSuchOperation)
	case op.Key != "" && op.Key != e.key():
		return fmt.Errorf("idem: journal in memory: complete %q: %w: key %q is not the operation's key %q",
			op.ID, ErrInvalidOperation, op.Key, e.key())
	}
	if op.Completed.IsZero() {
		op.Completed = j.now()
	}
	e.state, e.completed, e.status = op.State, op.Completed.UnixNano(), int32(op.Status)
	e.bodyTruncated, e.headerTruncated = op.BodyTruncated, op.HeaderTruncated
	e.outcome = raw
	return nil
}

func (c *memoryClaim) Lost() <-chan struct{} { return nil }

func (c *memoryClaim) Release() {
	if c.e == nil {
		return
	}
	j := c.j
	j.mu.Lock()
	e := c.e
	e.held = false
	if e.free != nil {
		close(e.free)
		e.free = nil
	}
	if !e.begun && j.ops[c.id] == e {
		delete(j.ops, c.id)
	}
	j.settle(c.id)
	j.mu.Unlock()
	c.e = nil
}

// Forget drops the pending operation id, as filejournal.Journal.Forget does.
func (j *memoryJournal) Forget(ctx context.Context, id string) error {
	return j.forget(ctx, id, func(e *memoryEntry) error {
		if e.state.final() {
			return fmt.Errorf("idem: journal in memory: forget %q: %w: it is %s with status %d", id, ErrAlreadyCompleted, e.state, e.status)
		}
		return nil
	})
}

// ForgetCompleted drops the completed operation id if its key is key, as
// filejournal.Journal.ForgetCompleted does.
func (j *memoryJournal) ForgetCompleted(ctx context.Context, id, key string) error {
	return j.forget(ctx, id, func(e *memoryEntry) error {
		if !e.state.final() || e.key() != key {
			return fmt.Errorf("idem: journal in memory: forget %q: %w: no completed operation under key %s", id, ErrNoSuchOperation, key)
		}
		return nil
	})
}

// forget claims id and drops its operation if check allows it.
func (j *memoryJournal) forget(ctx context.Context, id string, check func(*memoryEntry) error) error {
	cl, err := j.Claim(ctx, id)
	if err != nil {
		return err
	}
	c := cl.(*memoryClaim)
	defer c.Release()
	j.mu.Lock()
	defer j.mu.Unlock()
	if !c.e.begun {
		return fmt.Errorf("idem: journal in memory: forget %q: %w", id, ErrNoSuchOperation)
	}
	if err := check(c.e); err != nil {
		return err
	}
	*c.e = memoryEntry{held: true, free: c.e.free} // not begun: Release removes it
	return nil
}
