package journal

import (
	"net/http"

	"github.com/idemkit/idem/internal/redact"
)

// The header fields by which a recorded outcome is marked, stored with
// Operation.Header. A program reads them through idem.AlreadyApplied and
// Operation.RefusedWithoutEffect; code that records outcomes itself sets
// them.
const (
	// HeaderAlreadyApplied is "true" on an answer that says the operation
	// was applied by an earlier request.
	HeaderAlreadyApplied = "Idem-Already-Applied"
	// HeaderKeyReused marks a refusal of a key the server holds for
	// another request.
	HeaderKeyReused = "Idem-Key-Reused"
	// HeaderSettled marks an outcome a person recorded (idem.Settle), with
	// "by hand".
	HeaderSettled = "Idem-Settled"
	// HeaderSettledNote holds the note of an outcome a person recorded.
	HeaderSettledNote = "Idem-Settled-Note"
	// HeaderUnrecorded names the response header fields an outcome left
	// out by the secrets rule (cookies, credentials).
	HeaderUnrecorded = "Idem-Unrecorded-Headers"
)

// RecordedHeader returns what an outcome records of header h under a
// limit of limit bytes, and whether fields were left out for the limit:
// without cookies and credentials, and, over the limit, the fields that
// say what became of the request first. It is a Client's rule, for code
// that records outcomes through a Claim itself.
func RecordedHeader(h http.Header, limit int64) (http.Header, bool) {
	return redact.Bound(redact.Default.RecordedHeader(h), limit)
}
