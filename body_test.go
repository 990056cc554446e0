package idem

import (
	"bytes"
	"errors"
	"io"
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
