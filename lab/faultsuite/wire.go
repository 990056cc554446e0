package faultsuite

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemkit/idem/testserver/chaos"
)

// Wire is the evidence of what reached the server, taken between the fault
// proxy and the server, independently of what the client says of itself:
// the Idempotency-Key of every request the proxy forwarded, by operation
// (the "reference" of the request's JSON body), and every moment two
// requests with one key were being exchanged with the server at once.
//
// Its Transport is the proxy's upstream transport (chaos.Config.Transport).
// An exchange is open from the moment the proxy sends the request upstream
// until it has read the server's whole response, or failed: before it
// relays anything of that response. A client that waits for its answer
// before it sends the key again (C11) therefore never overlaps itself,
// whatever faults the proxy adds afterwards. Only a client that gave up on
// an attempt (its connection closed, so its request's context ended) may
// legitimately send the key again while the server still works on the old
// one. The proxy may learn that the connection closed a moment after the
// new request arrived, so an overlap is judged when the old exchange ends:
// it counts unless that exchange was cut short because its client had gone,
// or its client was a process killed since (see ClientKilled).
//
// A Wire looks for the key where the server's dialect reads it (see
// NewWireFor): a request whose key is elsewhere as well counts as
// misplaced.
//
// A Wire is safe for concurrent use.
type Wire struct {
	header, field string // where the key goes: a header, or a body member

	mu       sync.Mutex
	keys     map[string]map[string]bool // operation: keys seen, unquoted
	open     map[string][]*exchange     // key: exchanges open
	overlaps []*overlap
	requests int
	bare     int // keys sent as bare tokens
	quoted   int // keys sent as structured-field strings
	keyless  int // mutating requests without a key
	misplace int // keyed requests that also carry a key where the dialect puts none
	kills    int // client processes killed so far
}

// exchange is one request forwarded upstream.
type exchange struct {
	op    string
	ctx   context.Context // the client's request's
	begun time.Time
	kills int // client processes killed before it was sent

	// Set when the exchange ends, under the Wire's lock.
	ended  bool
	gaveUp bool // its client had gone: the exchange was cut short for it
}

// overlap is a request sent while an exchange with its key was open.
type overlap struct {
	key   string
	old   *exchange
	after time.Duration // since the old one was sent
}

// NewWire returns an empty Wire for keys in the Idempotency-Key header.
func NewWire() *Wire { return NewWireFor("Idempotency-Key", "") }

// NewWireFor returns an empty Wire for keys in the header named header,
// or, when field is set, in that top-level member of the JSON body; a
// request that then carries an Idempotency-Key header as well is
// misplaced.
func NewWireFor(header, field string) *Wire {
	return &Wire{header: header, field: field, keys: map[string]map[string]bool{}, open: map[string][]*exchange{}}
}

// Transport returns base recording every exchange into w.
func (w *Wire) Transport(base http.RoundTripper) http.RoundTripper {
	return wireTransport{w, base}
}

type wireTransport struct {
	w    *Wire
	base http.RoundTripper
}

func (t wireTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if t.w.field == "" && r.Header.Get(t.w.header) == "" || r.Body == nil {
		if chaos.Mutating(r) {
			t.w.mu.Lock()
			t.w.keyless++
			t.w.mu.Unlock()
		}
		return t.base.RoundTrip(r)
	}
	body, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("faultsuite: reading a forwarded body: %w", err)
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	raw, misplaced := r.Header.Get(t.w.header), false
	if t.w.field != "" {
		var member map[string]json.RawMessage
		json.Unmarshal(body, &member)           // a body that is no object has no key
		json.Unmarshal(member[t.w.field], &raw) // nor one whose member is no string
		misplaced = r.Header.Get("Idempotency-Key") != ""
	} else if !strings.EqualFold(t.w.header, "Idempotency-Key") {
		misplaced = r.Header.Get("Idempotency-Key") != ""
	}
	if raw == "" {
		t.w.mu.Lock()
		t.w.keyless++
		t.w.mu.Unlock()
		return t.base.RoundTrip(r)
	}
	end := t.w.begin(r, raw, body, misplaced)
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		end()
		return nil, err
	}
	resp.Body = &endOnEOF{ReadCloser: resp.Body, end: end}
	return resp, nil
}

// begin records an exchange under its key and operation, and returns the
// function that ends it.
func (w *Wire) begin(r *http.Request, raw string, body []byte, misplaced bool) func() {
	key, quoted := raw, false
	if k, err := strconv.Unquote(raw); err == nil && strings.HasPrefix(raw, `"`) {
		key, quoted = k, true
	}
	var ref struct {
		Reference string `json:"reference"`
	}
	json.Unmarshal(body, &ref) // a body that is not JSON has no reference
	x := &exchange{op: ref.Reference, ctx: r.Context(), begun: time.Now()}

	w.mu.Lock()
	defer w.mu.Unlock()
	w.requests++
	x.kills = w.kills
	if misplaced {
		w.misplace++
	}
	if quoted {
		w.quoted++
	} else {
		w.bare++
	}
	if x.op != "" {
		if w.keys[x.op] == nil {
			w.keys[x.op] = map[string]bool{}
		}
		w.keys[x.op][key] = true
	}
	for _, o := range w.open[key] {
		if o.ctx.Err() == nil && o.kills == x.kills {
			w.overlaps = append(w.overlaps, &overlap{key: key, old: o, after: x.begun.Sub(o.begun)})
		}
	}
	w.open[key] = append(w.open[key], x)
	var once sync.Once
	return func() {
		once.Do(func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			x.ended, x.gaveUp = true, x.ctx.Err() != nil
			w.open[key] = slices.DeleteFunc(w.open[key], func(o *exchange) bool { return o == x })
			if len(w.open[key]) == 0 {
				delete(w.open, key)
			}
		})
	}
}

// ClientKilled tells w that a client process was killed, and has been
// reaped: the requests it had sent are abandoned, though the proxy may not
// have seen their connections close yet.
func (w *Wire) ClientKilled() {
	w.mu.Lock()
	w.kills++
	w.mu.Unlock()
}

// endOnEOF ends an exchange when its response body has been read to its
// end (the read that returns io.EOF comes before the proxy relays the
// bytes it returned), fails, or is closed.
type endOnEOF struct {
	io.ReadCloser
	end func()
}

func (b *endOnEOF) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.end()
	}
	return n, err
}

func (b *endOnEOF) Close() error {
	b.end()
	return b.ReadCloser.Close()
}

// WireView is what a Wire saw, for the Checker.
type WireView struct {
	// Keys are the distinct keys that reached the server, by operation.
	Keys map[string][]string
	// Overlaps describes every request sent while another with its key
	// was being answered to a client that still waited for it.
	Overlaps []string
	// Requests counts the keyed requests forwarded; Quoted and Bare how
	// many carried their key as a structured-field string or bare.
	Requests, Quoted, Bare int
	// Keyless counts the mutating requests forwarded without a key where
	// the dialect puts it.
	Keyless int
	// Misplaced counts the keyed requests that carried a key in the
	// Idempotency-Key header as well, where the dialect puts none.
	Misplaced int
}

// View returns what w saw so far.
func (w *Wire) View() WireView {
	w.mu.Lock()
	defer w.mu.Unlock()
	v := WireView{Keys: make(map[string][]string, len(w.keys)), Requests: w.requests, Quoted: w.quoted, Bare: w.bare, Keyless: w.keyless, Misplaced: w.misplace}
	for _, o := range w.overlaps {
		if o.old.ended && o.old.gaveUp || !o.old.ended && o.old.ctx.Err() != nil {
			continue // its client had given up on it
		}
		v.Overlaps = append(v.Overlaps, fmt.Sprintf("key %s (operation %q) was sent again while the server was still answering it, %s after it was sent",
			o.key, o.old.op, o.after.Round(time.Millisecond)))
	}
	for op, keys := range w.keys {
		v.Keys[op] = slices.Sorted(maps.Keys(keys))
	}
	return v
}
