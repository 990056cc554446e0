package idem

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/journal"
)

// D1.3: the fingerprint journaled for an operation whose key goes in the
// body is the fingerprint of the caller's body, as if no key were in it.
func TestDialectFingerprintIsTheCallersBody(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) }))
	defer srv.Close()
	c, err := New(Config{Dialect: Square()})
	if err != nil {
		t.Fatal(err)
	}
	const body = `{"source_id":"cnon:x","amount_money":{"amount":100}}`
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, srv.URL+"/v2/payments", strings.NewReader(body))
	resp, err := c.Do("pay", req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	op, ok := lookup(c.journal, "pay")
	if !ok {
		t.Fatal("operation not journaled")
	}
	if want := journal.FingerprintOf(http.MethodPost, srv.URL+"/v2/payments", []byte(body)); op.Fingerprint != want {
		t.Fatalf("fingerprint %s, want %s, the caller's body's", op.Fingerprint, want)
	}
}

// D1.2: the key is inserted as the object's first member, and every other
// byte of the caller's body is kept as it was, white space included.
func TestBodyWithKeyKeepsTheRestByteForByte(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{}`, `{"k":"K"}`},
		{" \n{ }\n", " \n{\"k\":\"K\" }\n"},
		{`{"a":1}`, `{"k":"K","a":1}`},
		{"\t{\n  \"a\": [1, 2],\n  \"b\": {\"c\": null}\n}", "\t{\"k\":\"K\",\n  \"a\": [1, 2],\n  \"b\": {\"c\": null}\n}"},
		{`{"é":"\u00e9"}`, `{"k":"K","é":"\u00e9"}`},
	} {
		if err := checkBodyObject([]byte(tc.body), "k"); err != nil {
			t.Fatalf("%q: %v", tc.body, err)
		}
		got := bodyWithKey([]byte(tc.body), "k", "K")
		if string(got) != tc.want {
			t.Fatalf("bodyWithKey(%q) = %q, want %q", tc.body, got, tc.want)
		}
		if !json.Valid(got) {
			t.Fatalf("bodyWithKey(%q) = %q, not JSON", tc.body, got)
		}
	}
}

// D2: how a Signal's conditions match: a JSON path through objects and
// arrays, values as written, stars at either end, header values ignoring
// case.
func TestSignalMatching(t *testing.T) {
	d := Dialect{Signals: []Signal{
		{Status: 400, Field: "errors.code", Value: "REUSED", Answer: AnswerKeyReused},
		{Field: "code", Value: "704", Answer: AnswerInFlight},
		{Field: "ok", Value: "false", Answer: AnswerRefused},
		{Field: "type", Value: "*Mismatch*", Answer: AnswerKeyReused},
		{Header: "X-State", HeaderValue: "applied*", Answer: AnswerApplied},
		{Status: 418, Header: "X-Present", Answer: AnswerRefused},
		{Header: "X-Replayed", HeaderValue: "yes", Answer: AnswerReplay},
	}}
	for _, tc := range []struct {
		status int
		header http.Header
		body   string
		want   Answer
	}{
		{400, nil, `{"errors":[{"code":"OTHER"},{"code":"REUSED"}]}`, AnswerKeyReused},
		{409, nil, `{"errors":[{"code":"REUSED"}]}`, 0},
		{422, nil, `{"code":704}`, AnswerInFlight},
		{422, nil, `{"code":"704"}`, AnswerInFlight},
		{422, nil, `{"code":7041}`, 0},
		{200, nil, `{"ok":false}`, AnswerRefused},
		{400, nil, `{"type":"com.x#IdempotentParameterMismatchException"}`, AnswerKeyReused},
		{400, nil, `{"type":"Mismatc"}`, 0},
		{200, http.Header{"X-State": {" APPLIED-before "}}, ``, AnswerApplied},
		{200, http.Header{"X-State": {"not applied"}}, ``, 0},
		{418, http.Header{"X-Present": {""}}, ``, AnswerRefused},
		{417, http.Header{"X-Present": {""}}, ``, 0},
		{418, http.Header{"X-Other": {"1"}}, ``, 0}, // a Header without a value: absent, no match
		{400, http.Header{"X-Replayed": {"yes"}}, `{"errors":[{"code":"REUSED"}]}`, AnswerReplay},
		{409, http.Header{"Idempotent-Replayed": {"true"}}, `{"code":704}`, AnswerReplay},
		{400, nil, `{"errors":[{"code":"REUSED"}]} trailing`, 0},
		{400, nil, `not json`, 0},
	} {
		resp := &http.Response{StatusCode: tc.status, Header: tc.header}
		if resp.Header == nil {
			resp.Header = http.Header{}
		}
		if got := d.answer(resp, []byte(tc.body)); got != tc.want {
			t.Fatalf("status %d, header %v, body %s: answer %v, want %v", tc.status, tc.header, tc.body, got, tc.want)
		}
	}
}

// D1.6: a pending operation whose journaled key the dialect would not take
// (minted by another version, or under another dialect) is refused before
// anything is sent.
func TestDialectRefusesAJournaledKeyItCannotTake(t *testing.T) {
	sent := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { sent++ }))
	defer srv.Close()
	c, err := New(Config{Dialect: Dialect{Name: "short keys", MaxKeyLength: 40}})
	if err != nil {
		t.Fatal(err)
	}
	claim, err := c.journal.Claim(context.Background(), "op")
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("k", 41)
	err = claim.Begin(context.Background(), journal.Operation{ID: "op", Key: long, Fingerprint: journal.FingerprintOf(http.MethodPost, srv.URL, []byte("{}")),
		Method: http.MethodPost, URL: srv.URL, Created: c.now(), KeyTTL: 24 * time.Hour, State: journal.StatePending})
	claim.Release()
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("{}"))
	if _, err := c.Do("op", req); !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), long) {
		t.Fatalf("err = %v, want ErrInvalidRequest naming the key", err)
	}
	if sent != 0 {
		t.Fatalf("server saw %d requests, want none", sent)
	}
}
