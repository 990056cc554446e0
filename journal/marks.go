package journal

import (
	"net/http"

	"github.com/idemkit/idem/internal/journalkit"
	"github.com/idemkit/idem/internal/redact"
)

// RecordedHeader returns what an outcome records of header h under a
// limit of limit bytes: the header, the names of the fields the secrets
// rule left out (for Operation.Unrecorded), and whether fields were left
// out for the limit. Cookies and credentials are never kept; over the
// limit, the fields that say what became of the request are kept first.
// It is a Client's rule, for code that records outcomes through a Claim
// itself.
func RecordedHeader(h http.Header, limit int64) (header http.Header, unrecorded []string, truncated bool) {
	header, truncated = redact.Bound(redact.Default.RecordedHeader(h), limit)
	header, m := journalkit.SplitMarks(header)
	return header, m.Unrecorded, truncated
}
