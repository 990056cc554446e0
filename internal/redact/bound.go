package redact

import (
	"net/http"
	"slices"
	"strings"

	"github.com/idemkit/idem/internal/journalkit"
)

// Bound returns the part of h that an outcome records within
// limit bytes, and whether fields were left out. A header within the limit
// is returned as it is, without a copy. Over the limit, the fields that
// say what became of the request (firstKept) are kept first, so that no
// padding can push a redirect's Location out; then the others, in name
// order, each if it still fits.
func Bound(h http.Header, limit int64) (http.Header, bool) {
	total := int64(0)
	for name, values := range h {
		total += fieldSize(name, values)
	}
	if total <= limit {
		return h, false
	}
	names := make([]string, 0, len(h))
	for name := range h {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int {
		pa, pb := slices.Contains(firstKept, a), slices.Contains(firstKept, b)
		switch {
		case pa && !pb:
			return -1
		case pb && !pa:
			return 1
		}
		return strings.Compare(a, b)
	})
	kept := make(http.Header)
	room := limit
	for _, name := range names {
		if size := fieldSize(name, h[name]); size <= room {
			kept[name] = h[name]
			room -= size
		}
	}
	return kept, true
}

// firstKept are the header fields a bounded record keeps before any other,
// in canonical form.
var firstKept = []string{"Location", "Content-Location", "Content-Type", "Retry-After", "Idempotent-Replayed", journalkit.AppliedHeader, journalkit.KeyReusedHeader, journalkit.UnrecordedHeadersField}

// fieldSize is the size of a header field on the wire: name + ": " + value
// + CRLF for each of its values.
func fieldSize(name string, values []string) int64 {
	size := int64(0)
	for _, v := range values {
		size += int64(len(name) + len(v) + 4)
	}
	return size
}
