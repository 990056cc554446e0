package journalkit

import (
	"bytes"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

// EncodeHeaderBody sizes its buffer exactly also where a length's uvarint
// grows a byte (127/128, 16383/16384).
// Clause: J1.8.
func TestEncodeHeaderBodySizesEveryUvarintExactly(t *testing.T) {
	for _, n := range []int{0, 1, 127, 128, 129, 16383, 16384} {
		h := http.Header{strings.Repeat("N", max(n, 1)): {strings.Repeat("v", n)}}
		body := bytes.Repeat([]byte("b"), n)
		raw := EncodeHeaderBody(h, body)
		if len(raw) != cap(raw) || !bytes.Equal(raw, AppendHeaderBody(nil, h, body)) {
			t.Errorf("lengths %d: encoded %d bytes into %d", n, len(raw), cap(raw))
		}
	}
}

// QuoteID shortens only IDs longer than 64 bytes.
// Clause: J3.1.
func TestQuoteIDShortensOnlyLongIDs(t *testing.T) {
	id := strings.Repeat("a", 64)
	if got, want := QuoteID(id), `"`+id+`"`; got != want {
		t.Fatalf("QuoteID(64 bytes) = %s, want %s", got, want)
	}
	if got, want := QuoteID(id+"b"), `"`+id+`"...`; got != want {
		t.Fatalf("QuoteID(65 bytes) = %s, want %s", got, want)
	}
}

// DecodeHeaderBody reads back every length whose uvarint holds a 0x80 byte (128, 256, 16384).
// Clause: J1.8.
func TestDecodeHeaderBodyReadsLengthsWithAZeroContinuationByte(t *testing.T) {
	for _, n := range []int{1, 127, 128, 129, 256, 16384} {
		h := http.Header{strings.Repeat("N", n): {strings.Repeat("v", n)}, "Many": slices.Repeat([]string{"x"}, n)}
		if n <= 256 {
			for i := range n {
				h[fmt.Sprintf("H%03d", i)] = nil
			}
		}
		body := bytes.Repeat([]byte("b"), n)
		gotH, gotBody := DecodeHeaderBody(string(EncodeHeaderBody(h, body)))
		if !reflect.DeepEqual(gotH, h) || !bytes.Equal(gotBody, body) {
			t.Errorf("lengths %d: decoded %d names and a body of %d bytes, want %d names and %d bytes", n, len(gotH), len(gotBody), len(h), n)
		}
	}
}

// DecodeHeaderBody returns nil, not an empty map or slice, for an empty header and an empty body.
// Clause: J1.8.
func TestDecodeHeaderBodyEmptyPartsAreNil(t *testing.T) {
	if h, body := DecodeHeaderBody(EmptyHeaderBody); h != nil || body != nil {
		t.Errorf("empty section: decoded %#v, %#v, want nil, nil", h, body)
	}
	if h, body := DecodeHeaderBody(string(EncodeHeaderBody(nil, []byte("b")))); h != nil || string(body) != "b" {
		t.Errorf("body only: decoded %#v, %q, want nil, \"b\"", h, body)
	}
	if h, body := DecodeHeaderBody(string(EncodeHeader(http.Header{"A": {"1"}}))); !reflect.DeepEqual(h, http.Header{"A": {"1"}}) || body != nil {
		t.Errorf("header only: decoded %#v, %#v, want A: 1 and a nil body", h, body)
	}
	if h, err := DecodeHeader(EncodeHeader(nil)); h != nil || err != nil {
		t.Errorf("DecodeHeader of an empty header = %#v, %v, want nil, nil", h, err)
	}
}

// DecodeHeaderBody's value lists are consecutive windows of one array, in name order.
// Clause: J1.8.
func TestDecodeHeaderBodyValueListsShareOneArray(t *testing.T) {
	h, _ := DecodeHeaderBody(string(EncodeHeader(http.Header{"A": {"1"}, "B": {"2", "3"}, "C": {"4"}})))
	if !reflect.DeepEqual(h, http.Header{"A": {"1"}, "B": {"2", "3"}, "C": {"4"}}) {
		t.Fatalf("decoded %#v", h)
	}
	first := unsafe.Pointer(unsafe.SliceData(h["A"]))
	size := unsafe.Sizeof("")
	if unsafe.Pointer(unsafe.SliceData(h["B"])) != unsafe.Add(first, size) || unsafe.Pointer(unsafe.SliceData(h["C"])) != unsafe.Add(first, 3*size) {
		t.Errorf("the value lists of A, B and C are not consecutive in one array")
	}
}

// stringReader yields zero values, never a panic, for varints and strings running past its end.
// Clause: J1.8.
func TestStringReaderYieldsZeroValuesPastItsEnd(t *testing.T) {
	for _, tc := range []struct {
		in    string
		str   bool // read a string, else a uvarint
		wantI int
	}{
		{"", false, 0},
		{"\x80", false, 1},
		{"\x80\x80", true, 2},
		{strings.Repeat("\x80", 11) + "\x01", false, 10}, // stops after ten bytes
		{"\x03ab", true, 3},
	} {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%q: panic: %v", tc.in, p)
				}
			}()
			r := stringReader{s: tc.in}
			var v any
			var zero any
			if tc.str {
				v, zero = r.str(), ""
			} else {
				v, zero = r.uvarint(), uint64(0)
			}
			if v != zero || r.i != tc.wantI {
				t.Errorf("%q: read %#v up to %d, want %#v up to %d", tc.in, v, r.i, zero, tc.wantI)
			}
		}()
	}
	for _, in := range []string{"", "\x80", "\x00\x03ab"} {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("DecodeHeaderBody(%q): panic: %v", in, p)
				}
			}()
			if h, body := DecodeHeaderBody(in); h != nil || body != nil {
				t.Errorf("DecodeHeaderBody(%q) = %#v, %q", in, h, body)
			}
		}()
	}
}

// EncodeHeaderBody, the one encoding of an outcome, encodes into exactly
// its size, and DecodeHeaderBody reads it back.
func TestEncodeHeaderBodyInExactlyItsSize(t *testing.T) {
	h := http.Header{"Content-Type": {"application/json"}, "X-Long": {strings.Repeat("v", 300)}, "X-Many": {"a", "b"}}
	body := bytes.Repeat([]byte("b"), 20000)
	raw := EncodeHeaderBody(h, body)
	if len(raw) != cap(raw) {
		t.Fatalf("encoded %d bytes into %d", len(raw), cap(raw))
	}
	gotH, gotBody := DecodeHeaderBody(string(raw))
	if !reflect.DeepEqual(gotH, h) || !bytes.Equal(gotBody, body) {
		t.Fatalf("decoded %v and %d bytes of body, want %v and %d", gotH, len(gotBody), h, len(body))
	}
}
