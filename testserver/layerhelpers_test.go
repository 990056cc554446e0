package testserver

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idemkit/idem/idemserver"
	"github.com/idemkit/idem/idemserver/sqlite"
)

// The key's parsing and the fingerprint are the layer's (package
// idemserver). These helpers keep the tests of them here, reading them
// through the layer's public API the way the server uses it.

// What can be wrong with a key, as the layer's answers say it.
var (
	errKeyMissing    = errors.New("is required on this request")
	errKeyEmpty      = errors.New("is empty")
	errKeyTooLong    = errors.New("is too long")
	errKeyMany       = errors.New("is given more than once")
	errBodyNotObject = errors.New("must be a JSON object")
)

// keyError turns a refusal's detail into the error it names.
func keyError(detail string) error {
	for _, err := range []error{errKeyMissing, errKeyEmpty, errKeyTooLong, errKeyMany, errBodyNotObject} {
		if strings.Contains(detail, err.Error()) {
			return err
		}
	}
	return errors.New(detail)
}

// throughLayer sends a POST with header and body through the layer
// configured as the server configures it for d, and returns the key and
// the body the handler got, or the error the layer refused it with.
func throughLayer(d Dialect, optional bool, h http.Header, body string) (key, rest string, err error) {
	db, derr := sqlite.Open(":memory:")
	if derr != nil {
		return "", "", derr
	}
	defer db.Close()
	refusal := func(w http.ResponseWriter, _ *http.Request, detail string) {
		err = keyError(detail)
		w.WriteHeader(http.StatusBadRequest)
	}
	keys, kerr := idemserver.New(context.Background(), idemserver.Config{
		DB: db, KeyHeader: d.keyHeader(), KeyField: d.KeyField, MaxKeyLength: d.maxKeyLength(),
		Answers: idemserver.Answers{MissingKey: refusal, InvalidKey: refusal,
			Refused: func(w http.ResponseWriter, r *http.Request, _ int, detail string) { refusal(w, r, detail) }},
	})
	if kerr != nil {
		return "", "", kerr
	}
	defer keys.Close()
	handler := keys.Handle(idemserver.Route{Optional: optional}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, key, _ = idemserver.Key(r.Context())
		b, rerr := io.ReadAll(r.Body)
		if rerr != nil {
			err = rerr
		}
		rest = string(b)
	}))
	r := httptest.NewRequest(http.MethodPost, "/k", strings.NewReader(body))
	for name, values := range h {
		r.Header[name] = values
	}
	handler.ServeHTTP(httptest.NewRecorder(), r)
	return key, rest, err
}

// headerKey reads the key of a request with header h as the server does.
func (d Dialect) headerKey(h http.Header) (string, error) {
	key, _, err := throughLayer(d, false, h, "{}")
	return key, err
}

// bodyKey reads the key from body as the server does for a dialect with
// a KeyField, and the body its endpoint then reads; a body without the
// key reaches it whole (the key being optional, to see what is left).
func (d Dialect) bodyKey(body []byte) (key string, rest []byte, err error) {
	key, r, err := throughLayer(d, false, nil, string(body))
	if errors.Is(err, errKeyMissing) {
		_, r, _ = throughLayer(d, true, nil, string(body))
	}
	return key, []byte(r), err
}

// fingerprintOf is the layer's fingerprint.
func fingerprintOf(method, target string, body []byte) [sha256.Size]byte {
	var f [sha256.Size]byte
	copy(f[:], idemserver.Fingerprint(method, target, body))
	return f
}
