package idem

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"

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
// its URL and its body bytes. Two requests with the same fingerprint are, for
// idempotency, the same request; an operation ID presented again with a
// different fingerprint is refused with ErrMismatch.
type Fingerprint [sha256.Size]byte

// String returns the fingerprint in lowercase hexadecimal.
func (f Fingerprint) String() string { return hex.EncodeToString(f[:]) }

// fingerprintWriter hashes a request as it is described: method and URL
// first, each followed by a NUL byte so that no two (method, URL) pairs frame
// the same bytes, then the body as written.
type fingerprintWriter struct{ h hash.Hash }

func newFingerprintWriter(method, url string) fingerprintWriter {
	h := sha256.New()
	io.WriteString(h, method)
	h.Write([]byte{0})
	io.WriteString(h, url)
	h.Write([]byte{0})
	return fingerprintWriter{h}
}

func (w fingerprintWriter) Write(p []byte) (int, error) { return w.h.Write(p) }

func (w fingerprintWriter) sum() (f Fingerprint) {
	w.h.Sum(f[:0])
	return f
}

// FingerprintOf returns the fingerprint of a request whose body is in memory.
func FingerprintOf(method, url string, body []byte) Fingerprint {
	w := newFingerprintWriter(method, url)
	w.Write(body)
	return w.sum()
}
