package idem

import (
	"bytes"
	"errors"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"
)

func TestReadPrefixWhateverLengthTheBodyAnnounces(t *testing.T) {
	const limit = 10
	for _, c := range []struct {
		name     string
		body     string
		length   int64
		want     string
		complete bool
	}{
		{"unknown length, within the limit", "0123456789", -1, "0123456789", true},
		{"unknown length, over the limit", "0123456789a", -1, "0123456789a", false},
		{"exact length", "01234", 5, "01234", true},
		{"understated length", "0123456", 3, "0123456", true},
		{"overstated length", "012", 9, "012", true},
		{"length over the limit", "0123456789abc", 13, "0123456789a", false},
		{"empty", "", 0, "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			// One byte per Read: the loop, not one lucky Read, is tested.
			got, complete, err := readPrefix(iotest.OneByteReader(bytes.NewReader([]byte(c.body))), limit, c.length)
			if err != nil || string(got) != c.want || complete != c.complete {
				t.Fatalf("readPrefix = %q, %v, %v; want %q, %v, nil", got, complete, err, c.want, c.complete)
			}
		})
	}
	boom := errors.New("boom")
	if _, _, err := readPrefix(io.MultiReader(bytes.NewReader([]byte("01")), iotest.ErrReader(boom)), limit, -1); !errors.Is(err, boom) {
		t.Fatalf("readPrefix of a body that fails: %v, want %v", err, boom)
	}
}

// Bodies (readPrefix): a body that announces its length is read into one
// buffer of that length and one byte more, where its end shows; one that
// announces none, or more than readPrefixFirstMax (a server may
// overstate), starts from io.ReadAll's 512 bytes.
func TestReadPrefixSizesItsBufferByTheAnnouncedLength(t *testing.T) {
	for _, c := range []struct {
		name   string
		body   string
		length int64
		cap    int
	}{
		{"unknown length", "abc", -1, 512},
		{"empty, announced", "", 0, 1},
		{"exact length", "abc", 3, 4},
		{"just under readPrefixFirstMax, overstated", "abc", readPrefixFirstMax - 1, readPrefixFirstMax},
		{"readPrefixFirstMax, overstated", "abc", readPrefixFirstMax, 512},
		{"far over readPrefixFirstMax", "abc", 1 << 40, 512},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, limit := range []int64{2 * readPrefixFirstMax, math.MaxInt64} {
				got, complete, err := readPrefix(bytes.NewReader([]byte(c.body)), limit, c.length)
				if err != nil || !complete || string(got) != c.body || cap(got) != c.cap {
					t.Fatalf("limit %d: readPrefix = %q (cap %d), %v, %v; want %q (cap %d), true, nil",
						limit, got, cap(got), complete, err, c.body, c.cap)
				}
			}
			body := []byte(c.body)
			r := bytes.NewReader(body)
			if n := testing.AllocsPerRun(10, func() {
				r.Reset(body)
				readPrefix(r, 2*readPrefixFirstMax, c.length)
			}); n != 1 {
				t.Fatalf("readPrefix allocated %v times, want once", n)
			}
		})
	}
}

// Bodies (captureBody): a request body without GetBody is read by the
// length it announces (ContentLength), and a ContentLength of 0, which
// for a client request with a body means unknown, as a body of unknown
// length.
func TestCaptureBodySizesItsBufferByContentLength(t *testing.T) {
	for _, c := range []struct {
		name   string
		length int64
		cap    int
	}{
		{"unknown (0)", 0, 512},
		{"announced", 3, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, "http://api.example.test/charges", io.NopCloser(strings.NewReader("abc")))
			if err != nil {
				t.Fatal(err)
			}
			req.ContentLength = c.length
			body, err := captureBody(req, DefaultMaxBufferedBody)
			if err != nil {
				t.Fatal(err)
			}
			buf, ok := body.rewind.([]byte)
			if !ok || string(buf) != "abc" || cap(buf) != c.cap || body.length != 3 {
				t.Fatalf("captured %T %q (cap %d), length %d; want []byte \"abc\" (cap %d), length 3", body.rewind, buf, cap(buf), body.length, c.cap)
			}
		})
	}
}
