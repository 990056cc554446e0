package idem_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/internal/journalhelp"
	"github.com/idemkit/idem/journal"
)

const oldBase = "https://api.old.example.test/v1/"

// movedJournal returns a journal holding operation "charge", pending, as
// first sent: POST oldBase+"charges?x=1" with body.
func movedJournal(t *testing.T, body string) *filejournal.Journal {
	t.Helper()
	j, err := filejournal.Open(filepath.Join(t.TempDir(), "ops.journal"), filejournal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	url := oldBase + "charges?x=1"
	err = journalhelp.Begin(j, journal.Operation{ID: "charge", Key: "key-charge", Method: "POST", URL: url,
		Fingerprint: sha256.Sum256([]byte("POST\x00" + url + "\x00" + body))})

	if err != nil {
		t.Fatal(err)
	}
	return j
}

func keyServer(t *testing.T, keys *[]string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		*keys = append(*keys, r.URL.Path+" "+r.Header.Get("Idempotency-Key"))
		w.WriteHeader(201)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestBaseURLMoveResumesUnderTheKey(t *testing.T) {
	for _, streamed := range []bool{false, true} {
		j := movedJournal(t, `{"amount":5}`)
		var keys []string
		srv := keyServer(t, &keys)
		c, err := idem.New(idem.Config{Journal: j, BaseURLMoves: map[string]string{
			"https://elsewhere.example.test/": srv.URL + "/elsewhere/",
			oldBase:                           srv.URL + "/v2/",
		}})
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest("POST", srv.URL+"/v2/charges?x=1", strings.NewReader(`{"amount":5}`))
		if streamed {
			req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(`{"amount":5}`)), nil }
		}
		resp, err := c.Do("charge", req)
		if err != nil {
			t.Fatalf("streamed=%v: Do at the moved URL: %v", streamed, err)
		}
		resp.Body.Close()
		if len(keys) != 1 || keys[0] != "/v2/charges key-charge" {
			t.Fatalf("streamed=%v: sent %q, want the journaled key at the new URL", streamed, keys)
		}
		if op, _ := lookup(j, "charge"); op.State != journal.StateDone || op.Status != 201 {
			t.Fatalf("after Do: %+v", op)
		}
	}
}

func TestBaseURLMoveStillGuardsTheRest(t *testing.T) {
	var keys []string
	srv := keyServer(t, &keys)
	moves := map[string]string{oldBase: srv.URL + "/v2/"}
	for _, tc := range []struct {
		name, url, body string
		moves           map[string]string
	}{
		{"no move allowed", srv.URL + "/v2/charges?x=1", `{"amount":5}`, nil},
		{"other body", srv.URL + "/v2/charges?x=1", `{"amount":6}`, moves},
		{"other query", srv.URL + "/v2/charges?x=2", `{"amount":5}`, moves},
		{"other path", srv.URL + "/v2/refunds?x=1", `{"amount":5}`, moves},
		{"other prefix", srv.URL + "/v3/charges?x=1", `{"amount":5}`, moves},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := movedJournal(t, `{"amount":5}`)
			c, err := idem.New(idem.Config{Journal: j, BaseURLMoves: tc.moves})
			if err != nil {
				t.Fatal(err)
			}
			req, _ := http.NewRequestWithContext(context.Background(), "POST", tc.url, bytes.NewReader([]byte(tc.body)))
			if _, err := c.Do("charge", req); !errors.Is(err, idem.ErrMismatch) {
				t.Fatalf("Do = %v, want ErrMismatch", err)
			}
		})
	}
	if len(keys) != 0 {
		t.Fatalf("sent %q", keys)
	}
}

// C5: a request outside every moved prefix is judged at its own URL; the
// old prefix is never put in front of a URL the move does not start.
func TestBaseURLMoveIgnoresARequestOutsideTheNewPrefix(t *testing.T) {
	var keys []string
	srv := keyServer(t, &keys)
	const body = `{"amount":5}`
	old := "https://api.old.example.test/v1/charges?then="
	url := old + srv.URL + "/y"
	j, err := filejournal.Open(filepath.Join(t.TempDir(), "ops.journal"), filejournal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	err = journalhelp.Begin(j, journal.Operation{ID: "charge", Key: "key-charge", Method: "POST", URL: url,
		Fingerprint: sha256.Sum256([]byte("POST\x00" + url + "\x00" + body))})
	if err != nil {
		t.Fatal(err)
	}
	c, err := idem.New(idem.Config{Journal: j, BaseURLMoves: map[string]string{old: srv.URL + "/v2/"}})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", srv.URL+"/y", strings.NewReader(body))
	if _, err := c.Do("charge", req); !errors.Is(err, idem.ErrMismatch) {
		t.Fatalf("Do outside the new prefix: err = %v, want ErrMismatch", err)
	}
	if len(keys) != 0 {
		t.Fatalf("sent %q, want nothing", keys)
	}
}
