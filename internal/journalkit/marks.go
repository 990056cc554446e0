package journalkit

import (
	"net/http"
	"strings"
)

// Marks are what an outcome's record says beside the server's answer: the
// mark fields of journal.Operation. A journal stores them in the stored
// form of the outcome's header, under the mark names above, so that a
// record written before the marks were fields reads the same way.
type Marks struct {
	Applied     bool
	KeyReused   string
	Settled     bool
	SettledNote string
	Unrecorded  []string
}

// markNames are the header names of the stored form of the marks.
var markNames = [...]string{AppliedHeader, KeyReusedHeader, SettledHeader, SettledNoteHeader, UnrecordedHeadersField}

// hasMarkNames reports whether h holds a field of a mark's name.
func hasMarkNames(h http.Header) bool {
	for _, name := range markNames {
		if _, ok := h[name]; ok {
			return true
		}
	}
	return false
}

// StoredHeader returns h as a journal stores it: any field of a mark's
// name dropped (only the marks are stored under those names) and m's
// marks added. h is returned as it is when there is nothing to change.
func StoredHeader(h http.Header, m Marks) http.Header {
	zero := !m.Applied && m.KeyReused == "" && !m.Settled && m.SettledNote == "" && len(m.Unrecorded) == 0
	if zero && !hasMarkNames(h) {
		return h
	}
	out := make(http.Header, len(h)+2)
	for name, values := range h {
		out[name] = values
	}
	for _, name := range markNames {
		delete(out, name) // a field of a mark's name is not the mark
	}
	if m.Applied {
		out[AppliedHeader] = []string{"true"}
	}
	if m.KeyReused != "" {
		out[KeyReusedHeader] = []string{m.KeyReused}
	}
	if m.Settled {
		out[SettledHeader] = []string{"by hand"}
	}
	if m.SettledNote != "" {
		out[SettledNoteHeader] = []string{m.SettledNote}
	}
	if len(m.Unrecorded) > 0 {
		out[UnrecordedHeadersField] = []string{strings.Join(m.Unrecorded, ", ")}
	}
	return out
}

// SplitMarks returns the marks stored in h and h without them (nil if
// nothing else is left). h is returned as it is when it holds no mark.
func SplitMarks(h http.Header) (http.Header, Marks) {
	if !hasMarkNames(h) {
		return h, Marks{}
	}
	var m Marks
	m.Applied = h.Get(AppliedHeader) == "true"
	m.KeyReused = h.Get(KeyReusedHeader)
	m.Settled = h.Get(SettledHeader) != ""
	m.SettledNote = h.Get(SettledNoteHeader)
	for _, v := range h[UnrecordedHeadersField] {
		for name := range strings.SplitSeq(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				m.Unrecorded = append(m.Unrecorded, name)
			}
		}
	}
	out := make(http.Header, len(h))
	for name, values := range h {
		out[name] = values
	}
	for _, name := range markNames {
		delete(out, name)
	}
	if len(out) == 0 {
		out = nil
	}
	return out, m
}

// ValidHeaderName reports whether name is a header field name (an RFC 9110
// token), so that a list of them joined by commas reads back the same.
func ValidHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
