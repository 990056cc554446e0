package fileengine

// Framing of the journal file (J1): the file header and the record
// envelope. The payloads inside the envelope are codec.go's.
//
// # On-disk format
//
// A journal file is a file header followed by records. Integers are
// little-endian. Every record starts at an offset that is a multiple of 8.
//
// File header, 16 bytes:
//
//	0                    8           12          16
//	+--------------------+-----------+-----------+
//	| magic "IDEMJRNL"   | version   | crc       |
//	+--------------------+-----------+-----------+
//	version  u32, currently 1
//	crc      u32, CRC-32C (Castagnoli) of bytes 0..12
//
// Record, align8(16+n) bytes for an n-byte payload:
//
//	0          4      5          8          12              12+n       16+n        align8(16+n)
//	+----------+------+----------+----------+---------------+----------+-----------+
//	| length n | type | reserved | hdr crc  | payload       | data crc | padding   |
//	+----------+------+----------+----------+---------------+----------+-----------+
//	length    u32, payload bytes, at most MaxPayload (16 MiB); more is corruption
//	type      u8, 1 intent, 2 completion; anything else is corruption
//	reserved  3 bytes, zero
//	hdr crc   u32, CRC-32C of bytes 0..8 (length, type, reserved): a damaged
//	          length is caught here, before it is used to find the next record
//	data crc  u32, CRC-32C of the type byte followed by the payload
//	padding   0 to 7 bytes, zero, checked on read

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
)

// Sizes and limits of the format.
const (
	journalMagic   = "IDEMJRNL"
	journalVersion = 1

	fileHeaderSize   = 16
	recordHeaderSize = 12 // length u32, type u8, reserved [3]u8, header crc u32
	recordCRCSize    = 4
	recordAlign      = 8
	minRecordSize    = recordHeaderSize + recordCRCSize // an empty payload, already aligned

	// MaxPayload is the largest payload a record may carry: 16 MiB. A
	// header claiming more is corruption, so a damaged length can never
	// make recovery allocate or read without bound; an append that would
	// need more is refused with ErrInvalidOperation.
	MaxPayload = 16 << 20
)

// recordType says what a record's payload is.
type recordType uint8

const (
	recIntent     recordType = 1
	recCompletion recordType = 2
)

// castagnoli is the CRC-32C table; the standard library uses the CPU's
// CRC32 instruction for it where there is one.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// typeCRC[t] is the CRC-32C of the single type byte t: the start of a
// record's data checksum, computed once.
var typeCRC = func() (t [256]uint32) {
	for i := range t {
		t[i] = crc32.Update(0, castagnoli, []byte{byte(i)})
	}
	return t
}()

// alignRecord rounds n up to a multiple of recordAlign.
func alignRecord(n int64) int64 { return (n + recordAlign - 1) &^ (recordAlign - 1) }

// recordSize is the framed size of a record with an n-byte payload.
func recordSize(n int) int64 { return alignRecord(int64(minRecordSize + n)) }

// appendFileHeader appends the 16-byte file header to buf.
func appendFileHeader(buf []byte) []byte {
	start := len(buf)
	buf = append(buf, journalMagic...)
	buf = binary.LittleEndian.AppendUint32(buf, journalVersion)
	return binary.LittleEndian.AppendUint32(buf, crc32.Checksum(buf[start:start+12], castagnoli))
}

// ReasonNotJournal begins the CorruptError.Reason of a file whose first
// bytes are not a journal's: it was never a journal, rather than one
// damaged.
const ReasonNotJournal = "not an idem journal"

// checkFileHeader returns why h (the first fileHeaderSize bytes, or fewer
// if the file is shorter) is not a journal file header, or "".
func checkFileHeader(h []byte) string {
	switch {
	case len(h) < fileHeaderSize:
		return fmt.Sprintf("file header is %d bytes, want %d", len(h), fileHeaderSize)
	case string(h[:8]) != journalMagic:
		return fmt.Sprintf("%s (it begins with %q, not %q)", ReasonNotJournal, h[:8], journalMagic)
	case binary.LittleEndian.Uint32(h[12:16]) != crc32.Checksum(h[:12], castagnoli):
		return "file header checksum mismatch"
	case binary.LittleEndian.Uint32(h[8:12]) != journalVersion:
		return fmt.Sprintf("unsupported journal version %d", binary.LittleEndian.Uint32(h[8:12]))
	}
	return ""
}

// beginRecord appends room for a record header to buf and returns the new
// buffer and the record's start; the caller appends the payload and then
// calls endRecord.
func beginRecord(buf []byte) ([]byte, int) {
	start := len(buf)
	return append(buf, make([]byte, recordHeaderSize)...), start
}

// endRecord frames the payload appended to buf since beginRecord: it fills
// in the header, appends the data checksum and the zero padding. A payload
// over MaxPayload is refused and buf is returned cut back to start.
func endRecord(buf []byte, start int, t recordType) ([]byte, error) {
	n := len(buf) - start - recordHeaderSize
	if n > MaxPayload {
		return buf[:start], fmt.Errorf("%w: record payload is %d bytes, over the %d-byte limit", ErrInvalidOperation, n, MaxPayload)
	}
	h := buf[start : start+recordHeaderSize]
	binary.LittleEndian.PutUint32(h[0:4], uint32(n))
	h[4] = byte(t)
	h[5], h[6], h[7] = 0, 0, 0
	binary.LittleEndian.PutUint32(h[8:12], crc32.Checksum(h[:8], castagnoli))
	crc := crc32.Update(typeCRC[t], castagnoli, buf[start+recordHeaderSize:])
	buf = binary.LittleEndian.AppendUint32(buf, crc)
	for (len(buf)-start)%recordAlign != 0 {
		buf = append(buf, 0)
	}
	return buf, nil
}

// recordCheck is the result of checking the record at one offset.
type recordCheck uint8

const (
	recordOK recordCheck = iota
	// recordShort: the file ends inside the record (its header, or the
	// payload, checksum or padding its valid header announces).
	recordShort
	// recordBadHeader: the header checksum fails, so its length cannot be
	// trusted.
	recordBadHeader
	// recordBadData: the header is valid and the record is whole, but the
	// data checksum fails. The frame's size is set; nothing else is.
	recordBadData
	// recordInvalid: both checksums hold, yet the record breaks the format
	// (reserved bits, length, padding, type). No torn write produces that.
	recordInvalid
)

// frame is a record found in the file.
type frame struct {
	typ     recordType
	payload []byte // aliases the reader's buffer: valid until its next read
	size    int64  // framed size, padding included
}

// fileReader serves byte ranges of the file from a buffer filled by large
// ReadAt calls, so that recovery makes few system calls. With readAhead
// started, a goroutine reads the next chunks of the file while the caller
// works on the current one.
type fileReader struct {
	r     io.ReaderAt
	size  int64
	buf   []byte
	start int64 // file offset of buf[0]
	n     int   // valid bytes in buf
	ahead *readAhead
}

// readChunk is how much the reader asks the file for at a time. A
// variable, for tests.
var readChunk = 1 << 20

func newFileReader(r io.ReaderAt, size int64) *fileReader {
	return &fileReader{r: r, size: size}
}

// at returns the file's bytes [off, off+n), or fewer when the file ends
// before off+n. The slice is valid until the next call.
func (fr *fileReader) at(off int64, n int) ([]byte, error) {
	if off >= fr.start && off+int64(n) <= fr.start+int64(fr.n) {
		i := int(off - fr.start)
		return fr.buf[i : i+n], nil
	}
	if off >= fr.size {
		return nil, nil
	}
	if fr.ahead != nil {
		if b, ok, err := fr.fromAhead(off, n); ok || err != nil {
			return b, err
		}
	}
	want := int64(max(n, readChunk))
	if rest := fr.size - off; want > rest {
		want = rest
	}
	if int64(cap(fr.buf)) < want {
		fr.buf = make([]byte, max(want, min(int64(readChunk), fr.size)))
	}
	fr.buf = fr.buf[:cap(fr.buf)]
	got, err := fr.r.ReadAt(fr.buf[:want], off)
	if int64(got) < want {
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("reading at offset %d: %w", off, err)
	}
	fr.start, fr.n = off, got
	return fr.buf[:min(n, got)], nil
}

// check checks the record at off; the reason is set for recordInvalid.
func (fr *fileReader) check(off int64) (frame, recordCheck, string, error) {
	h, err := fr.at(off, recordHeaderSize)
	if err != nil {
		return frame{}, 0, "", err
	}
	if len(h) < recordHeaderSize {
		return frame{}, recordShort, "", nil
	}
	if binary.LittleEndian.Uint32(h[8:12]) != crc32.Checksum(h[:8], castagnoli) {
		return frame{}, recordBadHeader, "", nil
	}
	n := binary.LittleEndian.Uint32(h[0:4])
	typ := recordType(h[4])
	if h[5]|h[6]|h[7] != 0 {
		return frame{}, recordInvalid, "reserved record header bytes are not zero", nil
	}
	if n > MaxPayload {
		return frame{}, recordInvalid, fmt.Sprintf("record length %d is over the %d-byte limit", n, MaxPayload), nil
	}
	size := recordSize(int(n))
	if off+size > fr.size {
		return frame{}, recordShort, "", nil
	}
	b, err := fr.at(off, int(size))
	if err != nil {
		return frame{}, 0, "", err
	}
	end := recordHeaderSize + int(n)
	payload := b[recordHeaderSize:end]
	if binary.LittleEndian.Uint32(b[end:end+recordCRCSize]) != crc32.Update(typeCRC[typ], castagnoli, payload) {
		return frame{size: size}, recordBadData, "", nil
	}
	for i := end + recordCRCSize; i < len(b); i++ {
		if b[i] != 0 {
			return frame{}, recordInvalid, fmt.Sprintf("padding byte at offset %d is %#x, want 0", off+int64(i), b[i]), nil
		}
	}
	if typ != recIntent && typ != recCompletion {
		return frame{}, recordInvalid, fmt.Sprintf("unknown record type %d", typ), nil
	}
	return frame{typ: typ, payload: payload, size: size}, recordOK, "", nil
}

// validFrom reports whether any record from off on, at an aligned offset,
// passes both checksums: the evidence that a failed record is not the torn
// end of the file but damage in its middle. Anything a writer wrote in full
// counts, whether or not it would then decode.
func (fr *fileReader) validFrom(off int64) (bool, error) {
	for p := off; p+minRecordSize <= fr.size; p += recordAlign {
		h, err := fr.at(p, recordHeaderSize)
		if err != nil {
			return false, err
		}
		if binary.LittleEndian.Uint32(h[8:12]) != crc32.Checksum(h[:8], castagnoli) {
			continue
		}
		n := binary.LittleEndian.Uint32(h[0:4])
		if n > MaxPayload || p+recordSize(int(n)) > fr.size {
			continue
		}
		b, err := fr.at(p, int(recordSize(int(n))))
		if err != nil {
			return false, err
		}
		end := recordHeaderSize + int(n)
		if binary.LittleEndian.Uint32(b[end:end+recordCRCSize]) == crc32.Update(typeCRC[h[4]], castagnoli, b[recordHeaderSize:end]) {
			return true, nil
		}
	}
	return false, nil
}
