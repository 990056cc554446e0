package fileengine

// What the engine shares with every journal, from package journalkit: the
// limits, the checks and the quoting of IDs, and the encoding of an
// outcome's header and body, which a completion record holds.

import (
	"net/http"
	"time"

	"github.com/idemkit/idem/internal/journalkit"
)

const (
	// MaxIDLen and MaxKeyLen bound an operation ID and a key.
	MaxIDLen  = journalkit.MaxIDLen
	MaxKeyLen = journalkit.MaxKeyLen
	// MaxStatus is the largest status a completion may record.
	MaxStatus = journalkit.MaxStatus
)

// The range of times a record can hold.
var (
	minStoredTime = journalkit.MinStoredTime
	maxStoredTime = journalkit.MaxStoredTime
)

// decoder reads a payload.
type decoder = journalkit.Decoder

// QuoteID quotes an operation ID for a message (journalkit.QuoteID).
func QuoteID(id string) string { return journalkit.QuoteID(id) }

// CheckIDKey is journalkit.CheckIDKey.
func CheckIDKey(id, key string, keyRequired bool) error {
	return journalkit.CheckIDKey(id, key, keyRequired)
}

func appendString(buf []byte, s string) []byte { return journalkit.AppendString(buf, s) }

func appendHeaderBody(buf []byte, h http.Header, body []byte) []byte {
	return journalkit.AppendHeaderBody(buf, h, body)
}

func checkHeaderBody(b []byte) (int, string) { return journalkit.CheckHeaderBody(b) }

// DecodeHeaderBody decodes Outcome.Raw (journalkit.DecodeHeaderBody).
func DecodeHeaderBody(raw string) (http.Header, []byte) { return journalkit.DecodeHeaderBody(raw) }

// emptyHeaderBody is the header-and-body section of an outcome without a
// header or a body, as compaction's summaries keep it.
var emptyHeaderBody = journalkit.EmptyHeaderBody

// CheckKeyTTL is journalkit.CheckKeyTTL.
func CheckKeyTTL(ttl time.Duration) error { return journalkit.CheckKeyTTL(ttl) }
