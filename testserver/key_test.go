package testserver

import (
	"errors"
	"net/http"
	"strings"
	"testing"
)

func TestIdempotencyKeyParsing(t *testing.T) {
	long := strings.Repeat("k", MaxKeyLength)
	tests := []struct {
		name    string
		values  []string
		want    string
		wantErr error // nil: any error is fine when want is ""
	}{
		{"uuid bare", []string{"8e03978e-40d5-43e8-bc93-6894a57f9324"}, "8e03978e-40d5-43e8-bc93-6894a57f9324", nil},
		{"uuid quoted", []string{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`}, "8e03978e-40d5-43e8-bc93-6894a57f9324", nil},
		{"surrounding spaces", []string{"  abc \t"}, "abc", nil},
		{"bare punctuation", []string{"key_1.2:3+4/5=6~7"}, "key_1.2:3+4/5=6~7", nil},
		{"quoted with space", []string{`"a b"`}, "a b", nil},
		{"quoted escapes", []string{`"a\"b\\c"`}, `a"b\c`, nil},
		{"max length bare", []string{long}, long, nil},
		{"max length quoted", []string{`"` + long + `"`}, long, nil},
		{"missing", nil, "", errKeyMissing},
		{"empty", []string{""}, "", errKeyEmpty},
		{"blank", []string{"   "}, "", errKeyEmpty},
		{"empty quoted", []string{`""`}, "", errKeyEmpty},
		{"two headers", []string{"a", "b"}, "", errKeyMany},
		{"too long bare", []string{long + "k"}, "", errKeyTooLong},
		{"too long quoted", []string{`"` + long + `k"`}, "", errKeyTooLong},
		{"huge", []string{strings.Repeat("k", 10000)}, "", errKeyTooLong},
		{"bare space", []string{"a b"}, "", nil},
		{"bare quote inside", []string{`a"b`}, "", nil},
		{"bare comma", []string{"a,b"}, "", nil},
		{"bare non-ascii", []string{"clé"}, "", nil},
		{"unterminated", []string{`"abc`}, "", nil},
		{"after closing quote", []string{`"abc"x`}, "", nil},
		{"parameters", []string{`"abc";a=1`}, "", nil},
		{"bad escape", []string{`"a\nb"`}, "", nil},
		{"control char", []string{"\"a\x01b\""}, "", nil},
		{"non-ascii quoted", []string{`"clé"`}, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for _, v := range tt.values {
				h.Add(HeaderIdempotencyKey, v)
			}
			got, err := Dialect{}.headerKey(h)
			if tt.want != "" {
				if err != nil || got != tt.want {
					t.Fatalf("idempotencyKey = %q, %v; want %q", got, err, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("idempotencyKey = %q, want an error", got)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("error %v, want %v", err, tt.wantErr)
			}
		})
	}
}

// S2.1: the client is its account, X-Client-ID, else the anonymous
// client; a bearer token never changes it, and another scheme is refused.
func TestClientScope(t *testing.T) {
	tests := []struct {
		name   string
		header map[string]string
		want   string
		err    int // 0 none, 400 or 401
	}{
		{"nothing is anonymous", nil, AnonymousClient, 0},
		{"client id", map[string]string{"X-Client-ID": "alice"}, "client:alice", 0},
		{"a bearer token alone is anonymous", map[string]string{"Authorization": "Bearer s3cret"}, AnonymousClient, 0},
		{"a bearer token leaves the client id's scope", map[string]string{"Authorization": "Bearer s3cret", "X-Client-ID": "alice"}, "client:alice", 0},
		{"scheme is case-insensitive", map[string]string{"Authorization": "bearer s3cret", "X-Client-ID": "alice"}, "client:alice", 0},
		{"basic refused", map[string]string{"Authorization": "Basic YTpi"}, "", 401},
		{"bearer without token", map[string]string{"Authorization": "Bearer "}, "", 401},
		{"bearer of blanks", map[string]string{"Authorization": "Bearer  \t"}, "", 401},
		{"basic refused beside a client id", map[string]string{"Authorization": "Basic YTpi", "X-Client-ID": "alice"}, "", 401},
		{"client id with space", map[string]string{"X-Client-ID": "a b"}, "", 400},
		{"client id too long", map[string]string{"X-Client-ID": strings.Repeat("a", 256)}, "", 400},
		{"client id of the longest length", map[string]string{"X-Client-ID": strings.Repeat("a", 255)}, "client:" + strings.Repeat("a", 255), 0},
		{"client id of the first and last printable characters", map[string]string{"X-Client-ID": "!~"}, "client:!~", 0},
		{"client id with DEL", map[string]string{"X-Client-ID": "a\x7f"}, "", 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tt.header {
				h.Set(k, v)
			}
			got, err := clientScope(h)
			switch {
			case tt.err == 0 && (err != nil || got != tt.want):
				t.Fatalf("clientScope = %q, %v; want %q", got, err, tt.want)
			case tt.err != 0 && err == nil:
				t.Fatalf("clientScope = %q, want an error", got)
			case tt.err != 0 && errors.Is(err, errUnauthorized) != (tt.err == 401):
				t.Fatalf("error %v, want a %d error", err, tt.err)
			}
		})
	}
}

func TestFingerprintSeparatesFields(t *testing.T) {
	a := fingerprintOf("POST", "/a", []byte("x"))
	for _, other := range [][3]string{
		{"POS", "T/a", "x"},
		{"POST", "/ax", ""},
		{"POST", "/a", "x "},
		{"POST", "/a?", "x"},
		{"POST", "/a?q=1", "x"},
		{"PUT", "/a", "x"},
	} {
		if fingerprintOf(other[0], other[1], []byte(other[2])) == a {
			t.Errorf("fingerprint of %q equals that of POST /a x", other)
		}
	}
	if fingerprintOf("POST", "/a", []byte("x")) != a {
		t.Error("fingerprint is not deterministic")
	}
}
