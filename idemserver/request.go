package idemserver

import (
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// request is a request as the layer sees it.
type request struct {
	principal   string
	key         string // "" when unkeyed
	fingerprint []byte
	body        []byte // without Config.KeyField
	seed        string // of a new key row's downstream keys
	retention   time.Duration
	level       sql.IsolationLevel // of the handler's transaction (Route.Serializable)
}

// serve is the middleware: it reads the principal, the key and the body
// and runs Route.Check (refusing before any look-up what it cannot use),
// then serves the route atomically or in phases.
func (k *Keys) serve(w http.ResponseWriter, r *http.Request, route Route, h http.Handler) {
	if !k.enter() {
		w.Header().Set("Retry-After", "1")
		k.cfg.Answers.failed(w, r, http.StatusServiceUnavailable, "the server is shutting down; retry with the same key")
		return
	}
	defer k.running.Done()
	req, ok := k.read(w, r, route)
	if ok && route.Check != nil {
		ok = route.Check(w, withBody(r.Clone(r.Context()), req.body), req.body)
	}
	if !ok {
		k.stats.invalid.Add(1)
		return
	}
	if req.key == "" {
		k.stats.unkeyed.Add(1)
	} else {
		k.stats.requests.Add(1)
	}
	if route.Phased {
		k.servePhased(w, r, req, h)
		return
	}
	k.serveAtomic(w, r, req, h)
}

// read checks everything about a request that needs no database, in
// this order: a header key, the principal, the media type, the body, a
// body key. When it
// returns false it has answered.
func (k *Keys) read(w http.ResponseWriter, r *http.Request, route Route) (*request, bool) {
	a := &k.cfg.Answers
	var key string
	var err error
	if k.keys.field == "" {
		key, err = k.keys.fromHeader(r.Header)
		if !k.keyOK(w, r, route, err) {
			return nil, false
		}
	}
	principal, err := k.cfg.Principal(r)
	if err != nil {
		status := http.StatusBadRequest
		if errors.Is(err, ErrUnauthorized) {
			status = http.StatusUnauthorized
		}
		a.refused(w, r, status, err.Error())
		return nil, false
	}
	if ct := r.Header.Get("Content-Type"); k.cfg.Accepts != nil && !k.cfg.Accepts(ct) {
		a.refused(w, r, http.StatusUnsupportedMediaType, fmt.Sprintf("the request body cannot be %q", ct))
		return nil, false
	}
	body, ok := k.readBody(w, r)
	if !ok {
		return nil, false
	}
	if k.keys.field != "" {
		var rest []byte
		key, rest, err = k.keys.fromBody(body)
		switch {
		case errors.Is(err, errBodyNotObject) && route.Optional:
			err = nil // no key in a body that is no object: unkeyed, the handler judges the body
		case errors.Is(err, errBodyNotObject):
			a.refused(w, r, http.StatusBadRequest, fmt.Sprintf("%v holding %s", err, k.keys.name()))
			return nil, false
		case err == nil:
			body = rest
		}
		if !k.keyOK(w, r, route, err) {
			return nil, false
		}
	}
	return &request{
		principal:   principal,
		key:         key,
		fingerprint: k.cfg.Fingerprint(r.Method, requestTarget(r.URL), body),
		body:        body,
		seed:        newToken(),
		retention:   route.Retention,
		level:       isolation(route),
	}, true
}

// isolation is the level of the transaction route's handler writes in:
// READ COMMITTED, or SERIALIZABLE when the route asks for it.
func isolation(route Route) sql.IsolationLevel {
	if route.Serializable {
		return sql.LevelSerializable
	}
	return sql.LevelReadCommitted
}

// keyOK answers a key that could not be read and returns false, or
// returns true: the key was read, or is missing on an optional route.
func (k *Keys) keyOK(w http.ResponseWriter, r *http.Request, route Route, err error) bool {
	switch {
	case err == nil, errors.Is(err, errKeyMissing) && route.Optional:
		return true
	case errors.Is(err, errKeyMissing):
		k.cfg.Answers.missingKey(w, r, err.Error())
	default:
		k.cfg.Answers.invalidKey(w, r, err.Error())
	}
	return false
}

// readBody reads the whole body: 413 over Config.MaxBodyBytes, 408 (and
// the connection closed) for a body that stalled past the server's read
// timeout.
func (k *Keys) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, true
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, k.cfg.MaxBodyBytes))
	var tooLarge *http.MaxBytesError
	var netErr net.Error
	switch {
	case err == nil:
		return body, true
	case errors.As(err, &tooLarge):
		k.cfg.Answers.refused(w, r, http.StatusRequestEntityTooLarge,
			fmt.Sprintf("the request body is limited to %d bytes", k.cfg.MaxBodyBytes))
	case errors.As(err, &netErr) && netErr.Timeout():
		w.Header().Set("Connection", "close")
		k.cfg.Answers.refused(w, r, http.StatusRequestTimeout,
			"the request body did not arrive within the server's read timeout; nothing was done: send it again")
	default:
		k.cfg.Answers.refused(w, r, http.StatusBadRequest, "reading the request body: "+err.Error())
	}
	return nil, false
}

// withBody returns r2 with the request's body to read from the start.
func withBody(r2 *http.Request, body []byte) *http.Request {
	r2.Body = io.NopCloser(bytes.NewReader(body))
	r2.ContentLength = int64(len(body))
	r2.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	if r2.Header.Get("Content-Length") != "" {
		r2.Header = r2.Header.Clone()
		r2.Header.Set("Content-Length", strconv.Itoa(len(body)))
	}
	return r2
}

// buffer collects a handler's answer, which is sent only after its fate
// (commit or roll back) is known.
type buffer struct {
	header http.Header
	status int
	body   bytes.Buffer
	limit  int64
	over   bool
	wrote  bool // the handler wrote a status or bytes
}

// errResponseTooLarge is what a handler's Write returns once its answer
// exceeds Config.MaxResponseBytes.
var errResponseTooLarge = errors.New("idemserver: response exceeds Config.MaxResponseBytes")

func newBuffer(limit int64) *buffer { return &buffer{header: http.Header{}, limit: limit} }

func (b *buffer) Header() http.Header { return b.header }

func (b *buffer) WriteHeader(code int) {
	if b.status == 0 && code >= 200 { // 1xx are not the answer
		b.wrote = true
		b.status = code
	}
}

func (b *buffer) Write(p []byte) (int, error) {
	b.wrote = true
	if b.status == 0 {
		b.status = http.StatusOK
	}
	if b.over || int64(b.body.Len()+len(p)) > b.limit {
		b.over = true
		return 0, errResponseTooLarge
	}
	return b.body.Write(p)
}

// Flush does nothing: nothing leaves before the commit.
func (b *buffer) Flush() {}

// response is the answer collected (200 if the handler wrote nothing).
func (b *buffer) response() Response {
	status := b.status
	if status == 0 {
		status = http.StatusOK
	}
	return Response{Status: status, Header: b.header, Body: b.body.Bytes()}
}

// send writes the answer collected, with every header the handler set.
func (b *buffer) send(w http.ResponseWriter) {
	b.response().write(w, false)
}

// AcceptJSON is a Config.Accepts for JSON APIs: no Content-Type,
// application/json, or any +json type (application/merge-patch+json).
func AcceptJSON(contentType string) bool {
	if contentType == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}
