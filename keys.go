package idem

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"sync"

	"github.com/google/uuid"
)

// newKey mints a fresh idempotency key: a random (version 4) UUID in its
// canonical 36-character form. The randomness comes from crypto/rand; an
// error from it is returned rather than falling back to a weaker source.
func newKey() (string, error) {
	u, err := uuid.NewRandom()
	if err != nil {
		return "", fmt.Errorf("idem: minting key: %w", err)
	}
	return u.String(), nil
}

// Fingerprint identifies the content of a request: SHA-256 over its method,
// URL and body. An operation ID presented again with another fingerprint is
// refused with ErrMismatch.
type Fingerprint [sha256.Size]byte

// String returns the fingerprint in lowercase hexadecimal.
func (f Fingerprint) String() string { return hex.EncodeToString(f[:]) }

// fingerprintWriter hashes a request as it is described: method and URL
// first, each followed by a NUL byte so that no two (method, URL) pairs frame
// the same bytes, then the body as written. Writers are pooled: sum gives
// the writer back, and it must not be used after.
type fingerprintWriter struct {
	h       hash.Hash
	scratch []byte // method, URL and their NULs, written to h in one call
	out     [sha256.Size]byte
}

// fingerprintWriters pools fingerprintWriters: a SHA-256 state and the
// bytes that frame method and URL cost a Do three allocations otherwise.
var fingerprintWriters = sync.Pool{New: func() any { return &fingerprintWriter{h: sha256.New()} }}

// maxPooledScratch bounds the scratch buffer a pooled fingerprintWriter
// keeps: a long URL's is not kept for good.
const maxPooledScratch = 4 << 10

func newFingerprintWriter(method, url string) *fingerprintWriter {
	w := fingerprintWriters.Get().(*fingerprintWriter)
	w.h.Reset()
	b := append(w.scratch[:0], method...)
	b = append(b, 0)
	b = append(b, url...)
	b = append(b, 0)
	w.h.Write(b)
	w.scratch = b
	return w
}

func (w *fingerprintWriter) Write(p []byte) (int, error) { return w.h.Write(p) }

// sum returns the fingerprint of what was written and puts w back in the
// pool.
func (w *fingerprintWriter) sum() (f Fingerprint) {
	copy(f[:], w.h.Sum(w.out[:0]))
	if cap(w.scratch) > maxPooledScratch {
		w.scratch = nil
	}
	fingerprintWriters.Put(w)
	return f
}

// FingerprintOf returns the fingerprint of a request whose body is in memory.
func FingerprintOf(method, url string, body []byte) Fingerprint {
	w := newFingerprintWriter(method, url)
	w.Write(body)
	return w.sum()
}
