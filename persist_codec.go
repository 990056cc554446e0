package idem

// Payload encodings of the intent and completion records (drawn in
// persist.go): varints and length-prefixed bytes, no reflection, so that
// recovery decodes a record with at most a few allocations.

import (
	"encoding/binary"
	"fmt"
	"net/http"
	"slices"
)

const (
	// payloadVersion is the first byte of every payload.
	payloadVersion = 1
	// maxIDLen and maxKeyLen bound an operation ID and a key.
	maxIDLen  = 4096
	maxKeyLen = 4096
	// maxStatus is the largest status a completion may record.
	maxStatus = 999
	// The bits of a completion's flags.
	flagBodyTruncated   = 1 << 0
	flagHeaderTruncated = 1 << 1
	flagSummarized      = 1 << 2
	knownFlags          = flagBodyTruncated | flagHeaderTruncated | flagSummarized
)

// appendIntent appends e's intent payload to buf.
func appendIntent(buf []byte, e *entry) []byte {
	buf = append(buf, payloadVersion)
	buf = appendString(buf, e.id)
	buf = appendString(buf, e.key)
	buf = append(buf, e.fp[:]...)
	buf = appendString(buf, e.method)
	buf = appendString(buf, e.url)
	return binary.AppendVarint(buf, e.created)
}

// appendCompletion appends the completion payload of operation id with
// state s and outcome o to buf.
func appendCompletion(buf []byte, id string, s State, o *outcome) []byte {
	buf = append(buf, payloadVersion)
	buf = appendString(buf, id)
	buf = append(buf, byte(s), o.flags)
	buf = binary.AppendVarint(buf, o.completed)
	buf = binary.AppendUvarint(buf, uint64(o.status))
	return append(buf, o.raw...)
}

// appendHeaderBody appends the header-and-body section of a completion
// payload: the header names in sorted order, so the same header always
// encodes to the same bytes, then the body.
func appendHeaderBody(buf []byte, h http.Header, body []byte) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(h)))
	if len(h) > 0 {
		var few [16]string // most responses have fewer header names
		names := few[:0]
		for k := range h {
			names = append(names, k)
		}
		slices.Sort(names)
		for _, k := range names {
			vs := h[k]
			buf = appendString(buf, k)
			buf = binary.AppendUvarint(buf, uint64(len(vs)))
			for _, v := range vs {
				buf = appendString(buf, v)
			}
		}
	}
	buf = binary.AppendUvarint(buf, uint64(len(body)))
	return append(buf, body...)
}

func appendString(buf []byte, s string) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(s)))
	return append(buf, s...)
}

// decoder reads a payload. The first failure is kept in bad and every later
// read returns zero values, so a decode function checks once at the end.
type decoder struct {
	b   []byte
	i   int
	bad string
}

func (d *decoder) fail(reason string) {
	if d.bad == "" {
		d.bad = reason
	}
	d.i = len(d.b)
}

func (d *decoder) byte() byte {
	if d.i >= len(d.b) {
		d.fail("payload ends early")
		return 0
	}
	c := d.b[d.i]
	d.i++
	return c
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b[d.i:])
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.i += n
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b[d.i:])
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.i += n
	return v
}

// span reads a length-prefixed field of at most limit bytes and returns its
// bounds in the payload.
func (d *decoder) span(what string, limit int) (int, int) {
	n := d.uvarint()
	if n > uint64(limit) || n > uint64(len(d.b)-d.i) {
		if d.bad == "" {
			d.fail(fmt.Sprintf("%s length %d is too long", what, n))
		}
		return d.i, d.i
	}
	start := d.i
	d.i += int(n)
	return start, d.i
}

// end fails unless the whole payload was read.
func (d *decoder) end() {
	if d.bad == "" && d.i != len(d.b) {
		d.fail(fmt.Sprintf("%d trailing payload bytes", len(d.b)-d.i))
	}
}

// decodeIntent decodes an intent payload into e and returns why it cannot,
// or "". The strings of e share one allocation.
func decodeIntent(p []byte, e *entry) string {
	d := decoder{b: p}
	if v := d.byte(); v != payloadVersion && d.bad == "" {
		return fmt.Sprintf("unsupported intent encoding %d", v)
	}
	idA, idB := d.span("operation ID", maxIDLen)
	keyA, keyB := d.span("key", maxKeyLen)
	fpA, fpB := d.i, d.i+len(e.fp)
	if fpB > len(p) {
		d.fail("payload ends early")
	} else {
		d.i = fpB
	}
	mA, mB := d.span("method", len(p))
	uA, uB := d.span("URL", len(p))
	created := d.varint()
	d.end()
	switch {
	case d.bad != "":
		return "intent: " + d.bad
	case idA == idB:
		return "intent: empty operation ID"
	case keyA == keyB:
		return "intent: empty key"
	}
	// One string holds ID, key, method and URL (and the bytes between
	// them); the fields are slices of it.
	s := string(p[idA:uB])
	e.id = s[:idB-idA]
	e.key = s[keyA-idA : keyB-idA]
	e.method = s[mA-idA : mB-idA]
	e.url = s[uA-idA : uB-idA]
	copy(e.fp[:], p[fpA:fpB])
	e.created = created
	e.state = Pending
	return ""
}

// completionHead is the part of a completion payload read before the
// operation is looked up.
type completionHead struct {
	id    []byte // aliases the payload
	state State
	d     decoder
}

// decodeCompletionHead reads a completion's version, ID and state.
func decodeCompletionHead(p []byte) (completionHead, string) {
	h := completionHead{d: decoder{b: p}}
	d := &h.d
	if v := d.byte(); v != payloadVersion && d.bad == "" {
		return h, fmt.Sprintf("unsupported completion encoding %d", v)
	}
	idA, idB := d.span("operation ID", maxIDLen)
	h.id = p[idA:idB]
	h.state = State(d.byte())
	switch {
	case d.bad != "":
		return h, "completion: " + d.bad
	case idA == idB:
		return h, "completion: empty operation ID"
	case !h.state.final():
		return h, fmt.Sprintf("completion: invalid state %d", h.state)
	}
	return h, ""
}

// decodeOutcome reads the rest of a completion payload after its head. The
// header and body are checked but kept encoded, as one string: most
// outcomes are never looked at again, and recovery should not pay for a map
// per response. Operation decodes them when asked.
func decodeOutcome(h *completionHead, o *outcome) string {
	d := &h.d
	flags := d.byte()
	o.completed = d.varint()
	status := d.uvarint()
	if d.bad == "" {
		switch {
		case flags&^knownFlags != 0:
			d.fail(fmt.Sprintf("unknown flags %#x", flags))
		case status > maxStatus:
			d.fail(fmt.Sprintf("status %d is over %d", status, maxStatus))
		}
	}
	if d.bad != "" {
		return "completion: " + d.bad
	}
	o.status = int32(status)
	o.flags = flags
	raw := d.b[d.i:]
	bodyLen, reason := checkHeaderBody(raw)
	switch {
	case reason != "":
		return "completion: " + reason
	case flags&flagBodyTruncated != 0 && bodyLen > 0:
		return "completion: body kept although marked truncated"
	case flags&flagSummarized != 0 && string(raw) != emptyHeaderBody:
		return "completion: a summary keeps a header or body"
	}
	o.raw = string(raw)
	return ""
}

// checkHeaderBody checks a header-and-body section without allocating:
// names strictly increasing (sorted, no repeats), every length inside the
// section, nothing after the body. It returns the body's length.
func checkHeaderBody(b []byte) (int, string) {
	d := decoder{b: b}
	n := d.uvarint()
	if d.bad == "" && n > uint64(len(b))/2 {
		// Every name takes at least two bytes (length, value count).
		return 0, fmt.Sprintf("header name count %d is too large", n)
	}
	prevA, prevB := -1, -1
	for range n {
		a, z := d.span("header name", len(b))
		if d.bad != "" {
			break
		}
		if prevA >= 0 && string(b[a:z]) <= string(b[prevA:prevB]) {
			return 0, fmt.Sprintf("header name %q is out of order", b[a:z])
		}
		prevA, prevB = a, z
		nv := d.uvarint()
		if d.bad == "" && nv > uint64(len(b)-d.i) {
			return 0, fmt.Sprintf("header value count %d is too large", nv)
		}
		for range nv {
			d.span("header value", len(b))
		}
		if d.bad != "" {
			break
		}
	}
	bA, bB := d.span("body", len(b))
	d.end()
	if d.bad != "" {
		return 0, d.bad
	}
	return bB - bA, ""
}

// decodeHeaderBody decodes a section checkHeaderBody accepted. The header's
// names and values are slices of one string and its value lists slices of
// one array; the body is a fresh copy. Empty parts are nil.
func decodeHeaderBody(raw string) (http.Header, []byte) {
	r := stringReader{s: raw}
	n := int(r.uvarint())
	var h http.Header
	if n > 0 {
		// Count the values first, so they can share one array.
		save := r.i
		total := 0
		for range n {
			r.str()
			nv := int(r.uvarint())
			total += nv
			for range nv {
				r.str()
			}
		}
		r.i = save
		h = make(http.Header, n)
		all := make([]string, 0, total)
		for range n {
			name := r.str()
			nv := int(r.uvarint())
			if nv == 0 {
				h[name] = nil
				continue
			}
			start := len(all)
			for range nv {
				all = append(all, r.str())
			}
			h[name] = all[start:len(all):len(all)]
		}
	}
	var body []byte
	if b := r.str(); len(b) > 0 {
		body = []byte(b)
	}
	return h, body
}

// stringReader reads varints and length-prefixed strings from a section
// already checked. Out-of-range input yields zero values, never a panic.
type stringReader struct {
	s string
	i int
}

func (r *stringReader) uvarint() uint64 {
	var v uint64
	for shift := 0; r.i < len(r.s) && shift < 64; shift += 7 {
		c := r.s[r.i]
		r.i++
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return v
		}
	}
	return v
}

func (r *stringReader) str() string {
	n := r.uvarint()
	if n > uint64(len(r.s)-r.i) {
		r.i = len(r.s)
		return ""
	}
	s := r.s[r.i : r.i+int(n)]
	r.i += int(n)
	return s
}

// emptyHeaderBody is the header-and-body section of an outcome without a
// header or a body, as compaction's summaries keep it.
var emptyHeaderBody = string(appendHeaderBody(nil, nil, nil))

// completionRecordSize is the framed size of e's completion record.
func completionRecordSize(e *entry) int64 {
	var scratch [128]byte
	payload := appendCompletion(scratch[:0], e.id, e.state, &e.outcome)
	return alignRecord(int64(recordHeaderSize + len(payload) + recordCRCSize))
}

// summaryRecordSize is the framed size of the completion record of e's
// summary.
func summaryRecordSize(e *entry) uint32 {
	s := *e
	s.raw = emptyHeaderBody
	return uint32(completionRecordSize(&s))
}

// flags returns the completion flags op's outcome is recorded with.
func (op *Operation) flags() uint8 {
	var f uint8
	if op.BodyTruncated {
		f |= flagBodyTruncated
	}
	if op.HeaderTruncated {
		f |= flagHeaderTruncated
	}
	if op.Summarized {
		f |= flagSummarized
	}
	return f
}
