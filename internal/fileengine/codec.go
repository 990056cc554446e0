package fileengine

// Payload encodings of the intent and completion records, the bytes inside
// frame.go's record envelope: varints and length-prefixed bytes, no
// reflection, so that recovery decodes a record with at most a few
// allocations. The header of a completion is an http.Header, the one type
// of net/http the journal knows, encoded and decoded here.
//
// Intent payload (type 1), written by Begin:
//
//	u8        encoding version, 2
//	uvarint   len(ID), then ID bytes          1..4096 bytes
//	uvarint   len(Key), then Key bytes        1..4096 bytes
//	[32]byte  Fingerprint
//	uvarint   len(Method), then Method bytes
//	uvarint   len(URL), then URL bytes
//	varint    Created, Unix nanoseconds
//	uvarint   KeyTTL, nanoseconds, at least 1
//
// Version 1 of the intent payload, written before the key lifetime was
// stored with each operation, ends at Created; it reads as an operation
// whose key lives DefaultKeyTTL, the only lifetime a journal of that time
// could have been opened with by default. Only version 2 is written:
// compaction rewrites a version 1 intent as version 2.
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
	"math"
)

const (
	// payloadVersion is the first byte of every completion payload.
	payloadVersion = 1
	// intentVersion is the first byte of the intent payloads written;
	// intentVersion1 is that of the intents written before it, without
	// a key lifetime.
	intentVersion  = 2
	intentVersion1 = 1
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
	buf = append(buf, intentVersion)
	buf = appendString(buf, r.ID)
	buf = appendString(buf, r.Key)
	buf = append(buf, r.Fingerprint[:]...)
	buf = appendString(buf, r.Method)
	buf = appendString(buf, r.URL)
	buf = binary.AppendVarint(buf, r.Created)
	return binary.AppendUvarint(buf, uint64(r.KeyTTL))
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

// intentSpans are the bounds of an intent payload's fields in the
// payload, its created time and its key lifetime.
type intentSpans struct {
	idA, idB, keyA, keyB, fpA, mA, mB, uA, uB int
	created, keyTTL                           int64
}

// parseIntent checks an intent payload and returns where its fields are,
// or why it cannot. It does not allocate.
func parseIntent(p []byte) (intentSpans, string) {
	var s intentSpans
	d := decoder{B: p}
	v := d.Byte()
	if v != intentVersion && v != intentVersion1 && d.Bad == "" {
		return s, fmt.Sprintf("unsupported intent encoding %d", v)
	}
	s.idA, s.idB = d.Span("operation ID", MaxIDLen)
	s.keyA, s.keyB = d.Span("key", MaxKeyLen)
	s.fpA = d.I
	if fpB := s.fpA + len(Record{}.Fingerprint); fpB > len(p) {
		d.Fail("payload ends early")
	} else {
		d.I = fpB
	}
	s.mA, s.mB = d.Span("method", len(p))
	s.uA, s.uB = d.Span("URL", len(p))
	s.created = d.Varint()
	s.keyTTL = int64(DefaultKeyTTL)
	if v == intentVersion {
		if ttl := d.Uvarint(); d.Bad == "" && (ttl == 0 || ttl > math.MaxInt64) {
			d.Fail(fmt.Sprintf("key lifetime %d ns is not positive", ttl))
		} else {
			s.keyTTL = int64(ttl)
		}
	}
	d.End()
	switch {
	case d.Bad != "":
		return s, "intent: " + d.Bad
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
	r.KeyTTL = s.keyTTL
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
	h := completionHead{d: decoder{B: p}}
	d := &h.d
	if v := d.Byte(); v != payloadVersion && d.Bad == "" {
		return h, fmt.Sprintf("unsupported completion encoding %d", v)
	}
	idA, idB := d.Span("operation ID", MaxIDLen)
	h.id = p[idA:idB]
	h.state = State(d.Byte())
	switch {
	case d.Bad != "":
		return h, "completion: " + d.Bad
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
	flags := d.Byte()
	o.Completed = d.Varint()
	status := d.Uvarint()
	if d.Bad == "" {
		switch {
		case flags&^knownFlags != 0:
			d.Fail(fmt.Sprintf("unknown flags %#x", flags))
		case status > MaxStatus:
			d.Fail(fmt.Sprintf("status %d is over %d", status, MaxStatus))
		}
	}
	if d.Bad != "" {
		return nil, "completion: " + d.Bad
	}
	o.Status = int32(status)
	o.Flags = flags
	raw := d.B[d.I:]
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

// completionRecordSize is the framed size of r's completion record.
func completionRecordSize(r *Record) int64 {
	var scratch [128]byte
	payload := appendCompletion(scratch[:0], r.ID, r.State, &r.Outcome)
	return alignRecord(int64(recordHeaderSize + len(payload) + recordCRCSize))
}

// summaryRecordSize is the framed size of the completion record of the
// summary of m, a completed operation.
func summaryRecordSize(m *Meta) uint32 {
	s := Record{ID: m.ID, State: m.State, Outcome: Outcome{Completed: m.Completed, Status: m.Status, Flags: m.Flags, Raw: emptyHeaderBody}}
	return uint32(completionRecordSize(&s))
}
