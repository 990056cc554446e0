package idem

import (
	"fmt"

	"github.com/google/uuid"
	"github.com/idemkit/idem/internal/journalkit"
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

// newFingerprintWriter returns a writer that has hashed method and url;
// its Sum is the request's journal.Fingerprint.
func newFingerprintWriter(method, url string) *journalkit.FingerprintWriter {
	return journalkit.NewFingerprintWriter(method, url)
}
