package fileengine

// The records the journal holds and takes: what it knows of an operation,
// in the form it stores it (times as Unix nanoseconds, the outcome's
// header and body encoded), and the limits a record must keep.

import (
	"hash/maphash"
	"net/http"
	"time"
)

// State is where an operation stands: the state byte of the format.
type State uint8

// The states of an operation. The zero State is not valid.
const (
	// Pending: the intent is recorded; no final outcome is known.
	Pending State = 1
	// Done: a final response was recorded.
	Done State = 2
	// Rejected: a response that refused the operation was recorded.
	Rejected State = 3
)

// final reports whether s is an outcome: Done or Rejected.
func (s State) final() bool { return s == Done || s == Rejected }

// Record is one operation as the journal holds it: its intent and, once
// State is Done or Rejected, its outcome.
type Record struct {
	// ID is the operation's ID and Key its key: 1 to MaxIDLen and
	// MaxKeyLen bytes.
	ID, Key string
	// Method and URL are the request's, for people reading the journal.
	Method, URL string
	// Fingerprint identifies the request the operation sends.
	Fingerprint [32]byte
	// Created is when the key was minted, in Unix nanoseconds.
	Created int64
	// KeyTTL is how long the server keeps the key, in nanoseconds: the
	// operation is expired once pending KeyTTL after Created.
	KeyTTL int64
	// State is Pending after Begin, Done or Rejected after Complete.
	State State
	// Outcome is set once State is Done or Rejected.
	Outcome
}

// Outcome is the part of a Record a completion sets. The response header
// and body stay in their encoded form, Raw, until DecodeHeaderBody is
// asked for them: most outcomes are never looked at again.
type Outcome struct {
	// Completed is when the outcome was recorded, in Unix nanoseconds.
	Completed int64
	// Status is the response status, 0 to MaxStatus.
	Status int32
	// Flags are the completion's flags: FlagBodyTruncated,
	// FlagHeaderTruncated, FlagSummarized.
	Flags uint8
	// Raw is the response header and body, encoded (codec.go).
	Raw string
}

// Intent is what Begin records of a new operation.
type Intent struct {
	ID, Key, Method, URL string
	Fingerprint          [32]byte
	// Created is when the key was minted; zero means now, by Options.Now.
	Created time.Time
	// KeyTTL is how long the server keeps the key; it must be positive.
	KeyTTL time.Duration
}

// Completion is what Complete records of an operation's outcome.
type Completion struct {
	// ID names the operation. Key, when set, must be its key.
	ID, Key string
	// State is Done or Rejected.
	State State
	// Completed is when the outcome was known; zero means now, by
	// Options.Now.
	Completed time.Time
	// Status, Flags, Header and Body are the outcome, encoded by Complete
	// into Outcome's Status, Flags and Raw.
	Status int
	Flags  uint8
	Header http.Header
	Body   []byte
}

// Meta is what the index holds of an operation in memory: enough to list,
// count and compact operations without reading the file. The rest of its
// Record (key, method, URL, fingerprint, and the outcome's header and body)
// stays in the file and is read when the record is asked for.
type Meta struct {
	// ID is the operation's ID.
	ID string
	// Created, KeyTTL and, once State is final, Completed are the
	// Record's.
	Created, Completed, KeyTTL int64
	// Status and Flags are the outcome's, once State is final.
	Status int32
	// State is the Record's.
	State State
	Flags uint8
}

// entry is one operation in the index: its Meta, and where its records are
// in the file. A journal without a file keeps the whole Record in mem
// instead, and its offsets are those the records would have in a file.
type entry struct {
	Meta
	intentAt       int64  // offset of the intent record
	completionAt   int64  // offset of the latest completion record, when State is final
	intentSize     uint32 // framed size of the intent record
	completionSize uint32 // framed size of the latest completion record, or 0
	keySum         uint64 // keySum of the operation's key: Complete checks a key without reading the intent
}

// Expired reports whether m is pending and its key is at least its KeyTTL
// old at now.
func (m *Meta) Expired(now time.Time) bool {
	return m.State == Pending && now.Sub(time.Unix(0, m.Created)) >= time.Duration(m.KeyTTL)
}

// keySeed seeds keySum. It is drawn once per process, so no key can be
// chosen to collide with another's sum.
var keySeed = maphash.MakeSeed()

// keySum is the sum of an operation's key that the index keeps in its
// entry, so that Complete can accept the operation's own key without
// reading the intent back from the file. Two different keys share a sum
// with a probability of 2^-64.
func keySum(key string) uint64 { return maphash.String(keySeed, key) }

// keySumBytes is keySum of a key in bytes.
func keySumBytes(key []byte) uint64 { return maphash.Bytes(keySeed, key) }

// entryOf returns r's entry in the index, without the places of its
// records: its Meta and the sum of its key.
func entryOf(r *Record) entry {
	return entry{Meta: metaOf(r), keySum: keySum(r.Key)}
}

// metaOf returns what the index keeps of r.
func metaOf(r *Record) Meta {
	return Meta{ID: r.ID, Created: r.Created, Completed: r.Completed, KeyTTL: r.KeyTTL, Status: r.Status, State: r.State, Flags: r.Flags}
}

// unixNanos returns t as Unix nanoseconds, saturating outside the range
// int64 nanoseconds can hold (years 1678 to 2262).
func unixNanos(t time.Time) int64 {
	switch {
	case t.Before(minStoredTime):
		return minStoredTime.UnixNano()
	case t.After(maxStoredTime):
		return maxStoredTime.UnixNano()
	}
	return t.UnixNano()
}
