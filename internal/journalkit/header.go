package journalkit

// The encoding of a recorded header and body: the header names in sorted
// order, each with its values, then the body, as varints and
// length-prefixed bytes. A file journal's completion record holds it, a
// Client's memory keeps an outcome in it, and the PostgreSQL journal
// stores a header in it.

import (
	"encoding/binary"
	"fmt"
	"net/http"
	"slices"
)

// AppendHeaderBody appends the header-and-body section of an outcome: the header names in sorted order, so the same header always
// encodes to the same bytes, then the body.
func AppendHeaderBody(buf []byte, h http.Header, body []byte) []byte {
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
			buf = AppendString(buf, k)
			buf = binary.AppendUvarint(buf, uint64(len(vs)))
			for _, v := range vs {
				buf = AppendString(buf, v)
			}
		}
	}
	buf = binary.AppendUvarint(buf, uint64(len(body)))
	return append(buf, body...)
}

// AppendString appends s, length-prefixed.
func AppendString(buf []byte, s string) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(s)))
	return append(buf, s...)
}

// Decoder reads an encoded payload: varints and length-prefixed fields. The
// first failure is kept in Bad and every later read returns zero values, so
// a decode function checks once at the end.
type Decoder struct {
	// B is the payload.
	B []byte
	// I is the offset of the next read in B.
	I int
	// Bad is the first failure, or empty.
	Bad string
}

// Fail records reason, unless a failure is already recorded, and ends the
// reading.
func (d *Decoder) Fail(reason string) {
	if d.Bad == "" {
		d.Bad = reason
	}
	d.I = len(d.B)
}

// Byte reads one byte.
func (d *Decoder) Byte() byte {
	if d.I >= len(d.B) {
		d.Fail("payload ends early")
		return 0
	}
	c := d.B[d.I]
	d.I++
	return c
}

// Uvarint reads an unsigned varint.
func (d *Decoder) Uvarint() uint64 {
	v, n := binary.Uvarint(d.B[d.I:])
	if n <= 0 {
		d.Fail("bad varint")
		return 0
	}
	d.I += n
	return v
}

// Varint reads a signed varint.
func (d *Decoder) Varint() int64 {
	v, n := binary.Varint(d.B[d.I:])
	if n <= 0 {
		d.Fail("bad varint")
		return 0
	}
	d.I += n
	return v
}

// Span reads a length-prefixed field of at most limit bytes and returns its
// bounds in the payload.
func (d *Decoder) Span(what string, limit int) (int, int) {
	n := d.Uvarint()
	if n > uint64(limit) || n > uint64(len(d.B)-d.I) {
		if d.Bad == "" {
			d.Fail(fmt.Sprintf("%s length %d is too long", what, n))
		}
		return d.I, d.I
	}
	start := d.I
	d.I += int(n)
	return start, d.I
}

// End fails unless the whole payload was read.
func (d *Decoder) End() {
	if d.Bad == "" && d.I != len(d.B) {
		d.Fail(fmt.Sprintf("%d trailing payload bytes", len(d.B)-d.I))
	}
}

// CheckHeaderBody checks a header-and-body section without allocating:
// names strictly increasing (sorted, no repeats), every length inside the
// section, nothing after the body. It returns the body's length, or the
// reason it fails.
func CheckHeaderBody(b []byte) (int, string) {
	d := Decoder{B: b}
	n := d.Uvarint()
	if d.Bad == "" && n > uint64(len(b))/2 {
		// Every name takes at least two bytes (length, value count).
		return 0, fmt.Sprintf("header name count %d is too large", n)
	}
	prevA, prevB := -1, -1
	for range n {
		a, z := d.Span("header name", len(b))
		if d.Bad != "" {
			break
		}
		if prevA >= 0 && string(b[a:z]) <= string(b[prevA:prevB]) {
			return 0, fmt.Sprintf("header name %q is out of order", b[a:z])
		}
		prevA, prevB = a, z
		nv := d.Uvarint()
		if d.Bad == "" && nv > uint64(len(b)-d.I) {
			return 0, fmt.Sprintf("header value count %d is too large", nv)
		}
		for range nv {
			d.Span("header value", len(b))
		}
		if d.Bad != "" {
			break
		}
	}
	bA, bB := d.Span("body", len(b))
	d.End()
	if d.Bad != "" {
		return 0, d.Bad
	}
	return bB - bA, ""
}

// EncodeHeader returns h in the journal's encoding of a header (with an
// empty body), which DecodeHeaderBody reads back: byte for byte, whatever
// the values hold. Every journal that stores a header as bytes stores it this way.
func EncodeHeader(h http.Header) []byte { return AppendHeaderBody(nil, h, nil) }

// EncodeHeaderBody encodes a recorded header and body as a completion
// record holds them, for DecodeHeaderBody: the one encoding of an outcome,
// in a file journal and in a Client's memory.
func EncodeHeaderBody(h http.Header, body []byte) []byte {
	size := uvarintSize(len(h)) + uvarintSize(len(body)) + len(body)
	for k, vs := range h {
		size += uvarintSize(len(k)) + len(k) + uvarintSize(len(vs))
		for _, v := range vs {
			size += uvarintSize(len(v)) + len(v)
		}
	}
	return AppendHeaderBody(make([]byte, 0, size), h, body)
}

// uvarintSize is the length of n encoded by binary.AppendUvarint.
func uvarintSize(n int) int {
	size := 1
	for ; n >= 0x80; n >>= 7 {
		size++
	}
	return size
}

// DecodeHeader reads back what EncodeHeader wrote, and refuses, with an
// error matching ErrCorrupt, bytes it did not write.
func DecodeHeader(b []byte) (http.Header, error) {
	if _, reason := CheckHeaderBody(b); reason != "" {
		return nil, fmt.Errorf("%w: encoded header: %s", ErrCorrupt, reason)
	}
	h, _ := DecodeHeaderBody(string(b))
	return h, nil
}

// DecodeHeaderBody decodes a section CheckHeaderBody accepted.
// The header's names and values are slices of one string and its value
// lists slices of one array; the body is a fresh copy, so the caller may
// keep and change both. Empty parts are nil.
func DecodeHeaderBody(raw string) (http.Header, []byte) {
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

// EmptyHeaderBody is the header-and-body section of an outcome without a
// header or a body, as compaction's summaries keep it.
var EmptyHeaderBody = string(AppendHeaderBody(nil, nil, nil))
