package journal

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/idemkit/idem/internal/journalkit"
)

// Fingerprint identifies the content of a request: SHA-256 over its method,
// URL and body. A Client refuses an operation ID presented again with
// another fingerprint.
type Fingerprint [sha256.Size]byte

// String returns the fingerprint in lowercase hexadecimal.
func (f Fingerprint) String() string { return hex.EncodeToString(f[:]) }

// FingerprintOf returns the fingerprint of a request whose body is in memory.
func FingerprintOf(method, url string, body []byte) Fingerprint {
	w := journalkit.NewFingerprintWriter(method, url)
	w.Write(body)
	return w.Sum()
}
