package filejournal

// Payload encodings of the intent and completion records, the bytes inside
// frame.go's record envelope: varints and length-prefixed bytes, no
// reflection, so that recovery decodes a record with at most a few
// allocations. The header of a completion is an http.Header, the one type
// of net/http the journal knows, encoded and decoded here.
//
// Intent payload (type 1), written by Begin:
//
//	u8        encoding version, 1
//	uvarint   len(ID), then ID bytes          1..4096 bytes
//	uvarint   len(Key), then Key bytes        1..4096 bytes
//	[32]byte  Fingerprint
//	uvarint   len(Method), then Method bytes
//	uvarint   len(URL), then URL bytes
//	varint    Created, Unix nanoseconds
//
// Completion payload (type 2), written by Complete:
//
//	u8        encoding version, 1
//	uvarint   len(ID), then ID bytes
//	u8        State: 2 done, 3 rejected
//	u8        flags: bit 0 BodyTruncated, bit 1 HeaderTruncated, bit 2
//	          Summarized; the other bits are zero. A summary (bit 2) keeps
//	          no header names and an empty body. Bits 1 and 2 came after
//	          the format's first release: a reader from before them
//	          reports a record carrying them as corrupt.
//	varint    Completed, Unix nanoseconds
//	uvarint   Status, 0..999
//	uvarint   number of header names k; then k times, names in sorted order:
//	            uvarint len(name), name bytes,
//	            uvarint number of values v; then v times:
//	              uvarint len(value), value bytes
//	uvarint   len(Body), then Body bytes, ending the payload
//
// A payload that does not decode exactly (bad version, over-long field,
// trailing bytes) is corruption, as is an intent for an ID already present
// with different fields, and a completion for an ID without an intent. A
// later completion for an ID replaces the earlier one.

import (
	"encoding/binary"
	"fmt"
	"net/http"
	"slices"
)

const (
	// payloadVersion is the first byte of every payload.
	payloadVersion = 1
	// MaxIDLen and MaxKeyLen bound an operation ID and a key.
	MaxIDLen  = 4096
	MaxKeyLen = 4096
	// MaxStatus is the largest status a completion may record.
	MaxStatus = 999
)

// The bits of a completion's flags (Outcome.Flags).
const (
	// FlagBodyTruncated: the response body is not kept.
	FlagBodyTruncated = 1 << 0
	// FlagHeaderTruncated: some response header fields are not kept.
	FlagHeaderTruncated = 1 << 1
	// FlagSummarized: compaction kept only a summary of the outcome.
	FlagSummarized = 1 << 2

	knownFlags = FlagBodyTruncated | FlagHeaderTruncated | FlagSummarized
)

// appendIntent appends r's intent payload to buf.
func appendIntent(buf []byte, r *Record) []byte {
	buf = append(buf, payloadVersion)
	buf = appendString(buf, r.ID)
	buf = appendString(buf, r.Key)
	buf = append(buf, r.Fingerprint[:]...)
	buf = appendString(buf, r.Method)
	buf = appendString(buf, r.URL)
	return binary.AppendVarint(buf, r.Created)
}

// appendCompletion appends the completion payload of operation id with
// state s and outcome o to buf.
func appendCompletion(buf []byte, id string, s State, o *Outcome) []byte {
	return append(appendCompletionHead(buf, id, s, o), o.Raw...)
}

// appendCompletionHead appends a completion payload up to its header and
// body section (o.Raw, which it leaves out).
func appendCompletionHead(buf []byte, id string, s State, o *Outcome) []byte {
	buf = append(buf, payloadVersion)
	buf = appendString(buf, id)
	buf = append(buf, byte(s), o.Flags)
	buf = binary.AppendVarint(buf, o.Completed)
	return binary.AppendUvarint(buf, uint64(o.Status))
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

// intentSpans are the bounds of an intent payload's fields in the
// payload, and its created time.
type intentSpans struct {
	idA, idB, keyA, keyB, fpA, mA, mB, uA, uB int
	created                                   int64
}

// parseIntent checks an intent payload and returns where its fields are,
// or why it cannot. It does not allocate.
func parseIntent(p []byte) (intentSpans, string) {
	var s intentSpans
	d := decoder{b: p}
	if v := d.byte(); v != payloadVersion && d.bad == "" {
		return s, fmt.Sprintf("unsupported intent encoding %d", v)
	}
	s.idA, s.idB = d.span("operation ID", MaxIDLen)
	s.keyA, s.keyB = d.span("key", MaxKeyLen)
	s.fpA = d.i
	if fpB := s.fpA + len(Record{}.Fingerprint); fpB > len(p) {
		d.fail("payload ends early")
	} else {
		d.i = fpB
	}
	s.mA, s.mB = d.span("method", len(p))
	s.uA, s.uB = d.span("URL", len(p))
	s.created = d.varint()
	d.end()
	switch {
	case d.bad != "":
		return s, "intent: " + d.bad
	case s.idA == s.idB:
		return s, "intent: empty operation ID"
	case s.keyA == s.keyB:
		return s, "intent: empty key"
	}
	return s, ""
}

// decodeIntent decodes an intent payload into r and returns why it cannot,
// or "". The strings of r share one allocation.
func decodeIntent(p []byte, r *Record) string {
	s, reason := parseIntent(p)
	if reason != "" {
		return reason
	}
	// One string holds ID, key, method and URL (and the bytes between
	// them); the fields are slices of it.
	all := string(p[s.idA:s.uB])
	r.ID = all[:s.idB-s.idA]
	r.Key = all[s.keyA-s.idA : s.keyB-s.idA]
	r.Method = all[s.mA-s.idA : s.mB-s.idA]
	r.URL = all[s.uA-s.idA : s.uB-s.idA]
	copy(r.Fingerprint[:], p[s.fpA:])
	r.Created = s.created
	r.State = Pending
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
	idA, idB := d.span("operation ID", MaxIDLen)
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

// decodeOutcome reads the rest of a completion payload after its head into
// o, all but Raw, and returns the header-and-body section, checked but
// still encoded (it aliases the payload): most outcomes are never looked
// at again, and recovery should not pay for a map per response, nor keep
// the bytes. DecodeHeaderBody decodes them when asked.
func decodeOutcome(h *completionHead, o *Outcome) ([]byte, string) {
	d := &h.d
	flags := d.byte()
	o.Completed = d.varint()
	status := d.uvarint()
	if d.bad == "" {
		switch {
		case flags&^knownFlags != 0:
			d.fail(fmt.Sprintf("unknown flags %#x", flags))
		case status > MaxStatus:
			d.fail(fmt.Sprintf("status %d is over %d", status, MaxStatus))
		}
	}
	if d.bad != "" {
		return nil, "completion: " + d.bad
	}
	o.Status = int32(status)
	o.Flags = flags
	raw := d.b[d.i:]
	bodyLen, reason := checkHeaderBody(raw)
	switch {
	case reason != "":
		return nil, "completion: " + reason
	case flags&FlagBodyTruncated != 0 && bodyLen > 0:
		return nil, "completion: body kept although marked truncated"
	case flags&FlagSummarized != 0 && string(raw) != emptyHeaderBody:
		return nil, "completion: a summary keeps a header or body"
	}
	return raw, ""
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

// EncodeHeader returns h in the journal's encoding of a header (with an
// empty body), which DecodeHeaderBody reads back: byte for byte, whatever
// the values hold. The shared journal stores headers this way too.
func EncodeHeader(h http.Header) []byte { return appendHeaderBody(nil, h, nil) }

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
	return appendHeaderBody(make([]byte, 0, size), h, body)
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
	if _, reason := checkHeaderBody(b); reason != "" {
		return nil, fmt.Errorf("%w: encoded header: %s", ErrCorrupt, reason)
	}
	h, _ := DecodeHeaderBody(string(b))
	return h, nil
}

// DecodeHeaderBody decodes Outcome.Raw, a section checkHeaderBody accepted.
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

// emptyHeaderBody is the header-and-body section of an outcome without a
// header or a body, as compaction's summaries keep it.
var emptyHeaderBody = string(appendHeaderBody(nil, nil, nil))

// completionRecordSize is the framed size of r's completion record.
func completionRecordSize(r *Record) int64 {
	var scratch [128]byte
	payload := appendCompletion(scratch[:0], r.ID, r.State, &r.Outcome)
	return alignRecord(int64(recordHeaderSize + len(payload) + recordCRCSize))
}

// intentRecordSize is the framed size of r's intent record.
func intentRecordSize(r *Record) int64 {
	payload := appendIntent(nil, r)
	return alignRecord(int64(recordHeaderSize + len(payload) + recordCRCSize))
}

// summaryRecordSize is the framed size of the completion record of the
// summary of m, a completed operation.
func summaryRecordSize(m *Meta) uint32 {
	s := Record{ID: m.ID, State: m.State, Outcome: Outcome{Completed: m.Completed, Status: m.Status, Flags: m.Flags, Raw: emptyHeaderBody}}
	return uint32(completionRecordSize(&s))
}
