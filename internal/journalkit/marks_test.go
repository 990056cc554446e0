package journalkit

import (
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// C16.3, C16.4: the stored form holds the marks under their names, and
// only them: a field of a mark's name in the header is replaced; it reads
// back as the marks and the header without them; a header without marks
// is the same header, stored and read.
func TestStoredHeaderAndSplitMarks(t *testing.T) {
	m := Marks{Applied: true, KeyReused: "Conflict", Settled: true, SettledNote: "seen", Unrecorded: []string{"Authorization", "Set-Cookie"}}
	h := http.Header{"Content-Type": {"text/plain"}, AppliedHeader: {"false"}, SettledNoteHeader: {"the server's"}}
	stored := StoredHeader(h, m)
	want := http.Header{"Content-Type": {"text/plain"}, AppliedHeader: {"true"}, KeyReusedHeader: {"Conflict"},
		SettledHeader: {"by hand"}, SettledNoteHeader: {"seen"}, UnrecordedHeadersField: {"Authorization, Set-Cookie"}}
	if !reflect.DeepEqual(stored, want) {
		t.Fatalf("stored %v, want %v", stored, want)
	}
	if len(h) != 3 || h.Get(AppliedHeader) != "false" {
		t.Fatalf("StoredHeader changed its argument: %v", h)
	}
	got, gm := SplitMarks(stored)
	if !reflect.DeepEqual(got, http.Header{"Content-Type": {"text/plain"}}) || !reflect.DeepEqual(gm, m) {
		t.Fatalf("read back %v %+v, want Content-Type and %+v", got, gm, m)
	}
	if len(stored) != 6 {
		t.Fatalf("SplitMarks changed its argument: %v", stored)
	}
	// A server's field of a mark's name, no marks: dropped.
	if s := StoredHeader(http.Header{"X": {"1"}, KeyReusedHeader: {"c"}}, Marks{}); !reflect.DeepEqual(s, http.Header{"X": {"1"}}) {
		t.Fatalf("stored %v, want X alone", s)
	}
	// No marks, no field of their names: the header itself, nil kept nil.
	plain := http.Header{"X": {"1"}}
	if s := StoredHeader(plain, Marks{}); reflect.ValueOf(s).Pointer() != reflect.ValueOf(plain).Pointer() {
		t.Fatal("StoredHeader copied a header without marks")
	}
	if s, sm := SplitMarks(plain); reflect.ValueOf(s).Pointer() != reflect.ValueOf(plain).Pointer() || !reflect.DeepEqual(sm, Marks{}) {
		t.Fatal("SplitMarks copied a header without marks")
	}
	if s := StoredHeader(nil, Marks{}); s != nil {
		t.Fatalf("stored %v, want nil", s)
	}
	// Marks alone read back as a nil header; each mark on its own.
	for _, one := range []Marks{{Applied: true}, {KeyReused: "c"}, {Settled: true}, {SettledNote: "n"}, {Unrecorded: []string{"A"}}} {
		s := StoredHeader(nil, one)
		if got, gm := SplitMarks(s); got != nil || !reflect.DeepEqual(gm, one) {
			t.Fatalf("%+v stored as %v reads back as %v %+v", one, s, got, gm)
		}
	}
	// An earlier release's list, spaced or not, several values.
	_, gm = SplitMarks(http.Header{UnrecordedHeadersField: {"A,B ,", " C"}})
	if !reflect.DeepEqual(gm.Unrecorded, []string{"A", "B", "C"}) {
		t.Fatalf("unrecorded %q, want A B C", gm.Unrecorded)
	}
}

// C16.7: a name of Operation.Unrecorded is an RFC 9110 token: a letter,
// a digit or one of its fifteen other bytes, at least one of them. Every
// byte is tried alone, first and last, and the empty name is refused.
func TestValidHeaderNameTakesOnlyATokensBytes(t *testing.T) {
	const tchar = "!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	for b := 0; b < 256; b++ {
		c := string(rune(b))
		if b >= 0x80 {
			c = string([]byte{byte(b)})
		}
		want := strings.Contains(tchar, c)
		for _, name := range []string{c, "A" + c, c + "z"} {
			if got := ValidHeaderName(name); got != want {
				t.Errorf("ValidHeaderName(%q) = %v, want %v", name, got, want)
			}
		}
	}
	if ValidHeaderName("") {
		t.Error(`ValidHeaderName("") = true, want false`)
	}
	if !ValidHeaderName("X-Request-Id") || ValidHeaderName("Set-Cookie, Authorization") {
		t.Error("a header name and a list of two are not told apart")
	}
}
