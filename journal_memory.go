package idem

// memoryJournal: the Journal a Client keeps when Config.Journal is nil. It
// enforces the rule of a Client without a journal (Config.Journal states it
// for users; DESIGN.md C15):
//
//   - A pending operation, and one a claim holds, is kept whole in a map
//     (ops), its entry holding the operation and the claim on its ID. No
//     pending operation is ever dropped to make room.
//   - A completed operation is kept whole in the store (memoryStore), its
//     outcome answering a repeated Do (C4), while the completed operations
//     kept whole fit in budget bytes (see storedOp.size), or it is the
//     latest. Past it, the oldest is dropped and only a digest of its ID is
//     kept
//     (memoryDigests): a claim or a lookup of an ID with a digest fails
//     with ErrOutcomeForgotten, so the operation is never sent again
//     under a new key.
//   - A completed operation, whole or a digest, is forgotten KeyTTL after
//     the end of the time slice it completed in (slices are an eighth of
//     KeyTTL), as the server forgets its key: its ID is then new. One a
//     claim holds is kept until the claim is released.
//   - It remembers at most maxOps operations: pending, whole and digests.
//     Beyond, Begin of a new operation fails with ErrTooManyOperations.
//
// Neither the store nor the digests hold a pointer per operation, so the
// collector does not walk them: only what is pending or claimed is in the
// map. What it keeps whole it keeps with a filejournal.Journal's checks and
// errors (checkIntent, checkCompletion, and a size bound: see
// memoryMaxRecord).
//
// The digest is maphash's, with a seed of the journal's own, its low bit
// set so that 0 marks an empty slot: 63 bits. maphash is fast and in the
// standard library; the seed never leaves the process, so IDs an outsider
// chooses cannot be made to collide, and a digest need not be the same in
// another process, which never sees it. A new ID whose digest is one of n
// held is refused as forgotten (never sent twice): a chance of n in 2^63,
// 2^-40 per operation at 2^23 digests.

import (
	"context"
	"fmt"
	"hash/maphash"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/idemkit/idem/internal/journalkit"
	"github.com/idemkit/idem/journal"
)

// memoryMaxRecord bounds the intent (ID, key, method and URL) and the
// outcome (header and body) the memory journal takes: 16 MiB, as a file
// journal bounds a record's payload. A file record's payload also holds a
// few dozen bytes of lengths, fingerprint, times and status, which this
// bound leaves out, so an intent or outcome within that much of 16 MiB is
// taken here and refused (ErrInvalidOperation) by a file journal.
const memoryMaxRecord = 16 << 20

// memoryOutcomeBudget is the budget of a Client's memory journal: the
// bytes of the completed operations it keeps whole.
const memoryOutcomeBudget = 16 << 20

// memorySlices is the number of time slices in a key lifetime.
const memorySlices = 8

// defaultMaxOperations is Config.MaxOperations's default.
const defaultMaxOperations = 1 << 23

type memoryJournal struct {
	ttl    time.Duration
	now    func() time.Time
	width  int64                  // nanoseconds of a time slice: KeyTTL/memorySlices, at least 1
	budget int                    // bytes of the completed operations kept whole
	maxOps int                    // operations remembered at most
	digest func(id string) uint64 // never 0

	mu      sync.Mutex
	ops     map[string]*memoryEntry // by ID: pending operations and claimed ones; also IDs only claimed
	pending int                     // begun operations of ops not completed
	lastEnd int64                   // the latest slice end given to a completion
	store   memoryStore             // completed operations kept whole
	digests memoryDigests           // completed operations no longer kept whole
}

// memoryEntry is an operation ID's place in the journal's map: the
// operation's fields and the claim on its ID.
type memoryEntry struct {
	// intent is the ID, key, method and URL end to end; the map's key is
	// its ID part once the operation is begun (see memoryClaim.Begin).
	intent                 string
	keyAt, methodAt, urlAt uint32 // where the key, method and URL start in intent
	status                 int32
	fingerprint            journal.Fingerprint
	created, completed     int64 // Unix nanoseconds
	keyTTL                 int64 // nanoseconds: the operation's KeyTTL
	// outcome is the recorded header and body, encoded as a file journal
	// encodes them (journalkit.EncodeHeaderBody).
	outcome []byte
	seq     int // for a completed operation: its record in the store

	state           journal.State
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
func (e *memoryEntry) setIntent(op *journal.Operation) {
	e.intent = op.ID + op.Key + op.Method + op.URL
	e.keyAt = uint32(len(op.ID))
	e.methodAt = e.keyAt + uint32(len(op.Key))
	e.urlAt = e.methodAt + uint32(len(op.Method))
}

// newMemoryJournalFor returns an empty memory journal whose keys live ttl,
// on the clock now (time.Now when nil), that remembers at most maxOps
// operations.
func newMemoryJournalFor(ttl time.Duration, now func() time.Time, maxOps int) *memoryJournal {
	if now == nil {
		now = time.Now
	}
	seed := maphash.MakeSeed()
	return &memoryJournal{
		ttl: ttl, now: now, width: max(int64(ttl/memorySlices), 1), budget: memoryOutcomeBudget, maxOps: maxOps,
		digest: func(id string) uint64 { return maphash.String(seed, id) | 1 },
		ops:    make(map[string]*memoryEntry),
	}
}

// expire forgets the completed operations KeyTTL past their slice's end
// at now. Called with mu held.
func (j *memoryJournal) expire(now int64) {
	cutoff := now - int64(j.ttl)
	for len(j.store.recs) > 0 && j.store.recs[0].end <= cutoff {
		j.store.dropFront()
	}
	j.digests.expire(cutoff)
}

// evict drops the oldest completed operations kept whole, keeping their
// digests, until those kept whole fit in the budget, or only the latest is
// left. Called with mu held, after expire.
func (j *memoryJournal) evict() {
	for j.store.bytes > j.budget && len(j.store.recs) > 1 {
		if r, live := j.store.dropFront(); live {
			j.digests.add(r.digest, r.end)
		}
	}
}

// sliceEnd returns the end of the time slice of a completion at now: never
// before one given earlier, so that the store's records are in the order
// they are forgotten. Called with mu held.
func (j *memoryJournal) sliceEnd(now int64) int64 {
	j.lastEnd = max(j.lastEnd, (now/j.width+1)*j.width)
	return j.lastEnd
}

// remembered is the number of operations the journal remembers. Called
// with mu held.
func (j *memoryJournal) remembered() int { return j.pending + j.store.live + j.digests.n }

// find returns id's entry: the one in the map, or a new one, no claim
// holding it, of an operation kept in the store. It returns nil if the
// journal holds nothing of id, and an error matching ErrOutcomeForgotten
// if it keeps only id's digest, or another ID's of the same digest.
// Called with mu held.
func (j *memoryJournal) find(id string, now int64) (*memoryEntry, error) {
	j.expire(now)
	if e := j.ops[id]; e != nil {
		return e, nil
	}
	d := j.digest(id)
	r, seq, ok := j.store.find(d)
	if ok && j.store.id(r) == id {
		return j.store.entry(r, seq), nil
	}
	if ok || j.digests.has(d) {
		return nil, fmt.Errorf("idem: journal in memory: operation %s: %w: a Client without a journal keeps the outcomes of its latest %d MiB of operations only",
			journalkit.QuoteID(id), journal.ErrOutcomeForgotten, j.budget>>20)
	}
	return nil, nil
}

// Claim waits until no other Do of id holds it, or ctx ends.
func (j *memoryJournal) Claim(ctx context.Context, id string) (journal.Claim, error) {
	return j.claim(ctx, id, true)
}

// TryClaim is Claim without the wait: a *HeldError at once when another Do
// holds id.
func (j *memoryJournal) TryClaim(ctx context.Context, id string) (journal.Claim, error) {
	return j.claim(ctx, id, false)
}

// claim takes the claim on id, waiting for it within ctx or, unless wait,
// not at all.
func (j *memoryJournal) claim(ctx context.Context, id string, wait bool) (journal.Claim, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for {
		now := j.now().UnixNano()
		j.mu.Lock()
		e, err := j.find(id, now)
		if err != nil {
			j.mu.Unlock()
			return nil, err
		}
		switch {
		case e == nil:
			e = &memoryEntry{}
			j.ops[id] = e
		case j.ops[id] != e: // kept in the store: in the map while claimed
			j.ops[e.id()] = e
		}
		if !e.held {
			e.held = true
			j.mu.Unlock()
			return &memoryClaim{j: j, id: id, e: e}, nil
		}
		if !wait {
			j.mu.Unlock()
			return nil, &journal.HeldError{ID: id}
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
	}
}

// Lookup returns the operation with the given ID, or an error matching
// ErrOutcomeForgotten if the journal keeps only its digest.
func (j *memoryJournal) Lookup(_ context.Context, id string) (journal.Operation, bool, error) {
	now := j.now().UnixNano()
	j.mu.Lock()
	defer j.mu.Unlock()
	e, err := j.find(id, now)
	if e == nil || !e.begun {
		return journal.Operation{}, false, err
	}
	return e.operation(), true, nil
}

// List returns the operations the journal keeps whole that the listing
// selects, ordered by Created then ID. It never fails.
func (j *memoryJournal) List(_ context.Context, which journal.Listing) ([]journal.Operation, error) {
	now := j.now()
	j.mu.Lock()
	defer j.mu.Unlock()
	j.expire(now.UnixNano())
	var out []journal.Operation
	for _, e := range j.ops { // a completed one is listed from the store
		if e.begun && !final(e.state) && which.Selects(journal.Operation{State: e.state, Created: time.Unix(0, e.created), KeyTTL: time.Duration(e.keyTTL)}, now) {
			out = append(out, e.operation())
		}
	}
	for i := range j.store.recs {
		r := &j.store.recs[i]
		if !r.gone && which.Selects(journal.Operation{State: r.state, Created: time.Unix(0, r.created), KeyTTL: time.Duration(r.keyTTL)}, now) {
			out = append(out, j.store.operation(r))
		}
	}
	slices.SortFunc(out, func(a, b journal.Operation) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	if out == nil {
		out = []journal.Operation{}
	}
	return out, nil
}

// Now returns the journal's clock.
func (j *memoryJournal) Now() time.Time { return j.now() }

// operation returns what e records, its header and body in fresh memory
// that the caller may keep and change. Called with mu held.
func (e *memoryEntry) operation() journal.Operation {
	op := journal.Operation{
		ID: e.id(), Key: e.key(), Fingerprint: e.fingerprint, Method: e.method(), URL: e.url(),
		Created: time.Unix(0, e.created).UTC(), KeyTTL: time.Duration(e.keyTTL), State: e.state,
	}
	if final(e.state) {
		op.Completed, op.Status = time.Unix(0, e.completed).UTC(), int(e.status)
		op.BodyTruncated, op.HeaderTruncated = e.bodyTruncated, e.headerTruncated
		op.Header, op.Body = journalkit.DecodeHeaderBody(string(e.outcome))
		readMarks(&op)
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
// Release whatever the journal holds (nil for nothing, and an error
// matching ErrOutcomeForgotten for a digest). Called with mu held.
func (c *memoryClaim) entry(now int64) (*memoryEntry, error) {
	if c.e != nil {
		return c.e, nil
	}
	return c.j.find(c.id, now)
}

func (c *memoryClaim) Operation() (journal.Operation, bool) {
	now := c.j.now().UnixNano()
	c.j.mu.Lock()
	defer c.j.mu.Unlock()
	e, _ := c.entry(now)
	if e == nil || !e.begun {
		return journal.Operation{}, false
	}
	return e.operation(), true
}

func (c *memoryClaim) Begin(_ context.Context, op journal.Operation) error {
	if op.ID != c.id {
		return fmt.Errorf("idem: journal in memory: Begin of %q under the claim on %q: %w", op.ID, c.id, journal.ErrInvalidOperation)
	}
	err := journal.CheckIntent(op)
	if size := len(op.ID) + len(op.Key) + len(op.Method) + len(op.URL); err == nil && size > memoryMaxRecord {
		err = fmt.Errorf("%w: intent of %d bytes, over the %d-byte limit of a record", journal.ErrInvalidOperation, size, memoryMaxRecord)
	}
	if err != nil {
		return fmt.Errorf("idem: journal in memory: begin %q: %w", op.ID, err)
	}
	j := c.j
	now := j.now()
	j.mu.Lock()
	defer j.mu.Unlock()
	e, err := c.entry(now.UnixNano())
	switch {
	case err != nil:
		return err
	case e == nil: // Begin after Release, of an ID no one holds
		e = &memoryEntry{}
	case e.begun:
		return fmt.Errorf("idem: journal in memory: begin %q: %w", op.ID, journal.ErrOperationExists)
	}
	j.expire(now.UnixNano())
	if j.remembered() >= j.maxOps {
		return fmt.Errorf("idem: journal in memory: begin %q: %w: a Client without a journal remembers at most %d operations "+
			"in a key lifetime (Config.MaxOperations); a Journal keeps more", op.ID, ErrTooManyOperations, j.maxOps)
	}
	if op.Created.IsZero() {
		op.Created = now
	}
	e.setIntent(&op)
	e.fingerprint, e.created, e.keyTTL = op.Fingerprint, op.Created.UnixNano(), int64(op.KeyTTL)
	e.state, e.begun = journal.StatePending, true
	// Assigning an existing key stores the new key string: the map then
	// holds the ID in the entry's intent rather than in memory of its own.
	j.ops[e.id()] = e
	j.pending++
	return nil
}

func (c *memoryClaim) Complete(_ context.Context, op journal.Operation) error {
	if op.ID != c.id {
		return fmt.Errorf("idem: journal in memory: Complete of %q under the claim on %q: %w", op.ID, c.id, journal.ErrInvalidOperation)
	}
	err := journal.CheckOutcome(op)
	var raw []byte
	if err == nil {
		raw = journalkit.EncodeHeaderBody(storedHeader(&op), op.Body)
		if len(raw) > memoryMaxRecord {
			err = fmt.Errorf("%w: outcome of %d bytes, over the %d-byte limit of a record", journal.ErrInvalidOperation, len(raw), memoryMaxRecord)
		}
	}
	if err != nil {
		return fmt.Errorf("idem: journal in memory: complete %q: %w", op.ID, err)
	}
	j := c.j
	now := j.now()
	j.mu.Lock()
	defer j.mu.Unlock()
	e, err := c.entry(now.UnixNano())
	switch {
	case err != nil:
		return err
	case e == nil || !e.begun:
		return fmt.Errorf("idem: journal in memory: complete %q: %w", op.ID, journal.ErrNoSuchOperation)
	case op.Key != "" && op.Key != e.key():
		return fmt.Errorf("idem: journal in memory: complete %q: %w: key %q is not the operation's key %q",
			op.ID, journal.ErrInvalidOperation, op.Key, e.key())
	}
	if op.Completed.IsZero() {
		op.Completed = now
	}
	j.expire(now.UnixNano())
	if final(e.state) { // a later completion replaces the earlier one
		j.store.remove(e.seq)
	} else {
		j.pending--
	}
	e.state, e.completed, e.status = op.State, op.Completed.UnixNano(), int32(op.Status)
	e.bodyTruncated, e.headerTruncated = op.BodyTruncated, op.HeaderTruncated
	e.outcome = raw
	e.seq = j.store.put(j.digest(c.id), e, j.sliceEnd(now.UnixNano()))
	j.evict()
	if !e.held && j.ops[c.id] == e { // a released claim's: the store has it
		delete(j.ops, c.id)
	}
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
	if (!e.begun || final(e.state)) && j.ops[c.id] == e { // a completed one is in the store
		delete(j.ops, c.id)
	}
	j.mu.Unlock()
	c.e = nil
}

// Forget drops the pending operation id, as filejournal.Journal.Forget does.
func (j *memoryJournal) Forget(ctx context.Context, id string) error {
	return j.forget(ctx, id, func(e *memoryEntry) error {
		if final(e.state) {
			return fmt.Errorf("idem: journal in memory: forget %q: %w: it is %s with status %d", id, journal.ErrAlreadyCompleted, e.state, e.status)
		}
		return nil
	})
}

// ForgetCompleted drops the completed operation id if its key is key, as
// filejournal.Journal.ForgetCompleted does.
func (j *memoryJournal) ForgetCompleted(ctx context.Context, id, key string) error {
	return j.forget(ctx, id, func(e *memoryEntry) error {
		if !final(e.state) || e.key() != key {
			return fmt.Errorf("idem: journal in memory: forget %q: %w: no completed operation under key %s", id, journal.ErrNoSuchOperation, key)
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
	return c.forget(check)
}

// forget drops the claimed operation if check allows it. An outcome
// dropped to a digest while the claim was held is not forgotten: it stays
// refused.
func (c *memoryClaim) forget(check func(*memoryEntry) error) error {
	j := c.j
	j.mu.Lock()
	defer j.mu.Unlock()
	if !c.e.begun {
		return fmt.Errorf("idem: journal in memory: forget %q: %w", c.id, journal.ErrNoSuchOperation)
	}
	if err := check(c.e); err != nil {
		return err
	}
	switch {
	case !final(c.e.state):
		j.pending--
	case !j.store.remove(c.e.seq):
		return fmt.Errorf("idem: journal in memory: forget %q: %w: its outcome is no longer held", c.id, journal.ErrNoSuchOperation)
	}
	*c.e = memoryEntry{held: true, free: c.e.free} // not begun: Release removes it
	return nil
}

// storedHeader is op's header as the journal stores it, with op's marks.
func storedHeader(op *journal.Operation) http.Header {
	return journalkit.StoredHeader(op.Header, journalkit.Marks{Applied: op.Applied, KeyReused: op.KeyReused,
		Settled: op.Settled, SettledNote: op.SettledNote, Unrecorded: op.Unrecorded})
}

// readMarks moves the marks stored in op's header into op's fields: the
// way every record is read, those written before the marks were fields
// among them.
func readMarks(op *journal.Operation) {
	var m journalkit.Marks
	op.Header, m = journalkit.SplitMarks(op.Header)
	op.Applied, op.KeyReused, op.Settled, op.SettledNote, op.Unrecorded = m.Applied, m.KeyReused, m.Settled, m.SettledNote, m.Unrecorded
}
