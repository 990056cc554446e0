package testserver

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Dialect is the idempotency convention the server speaks: where a request
// carries its key, how the server answers a retry whose first request
// still runs, a replay, a key reused for another request and, where the
// convention has one, a request already applied, and how long keys
// are kept. The zero value is the server's own convention: the key in
// Idempotency-Key, 409 while in flight, Idempotent-Replayed: true on a
// replay, 422 for a reused key, 24 hours of retention. DialectNamed
// returns the conventions of real APIs.
type Dialect struct {
	// Name names the dialect on the command line (-dialect) and in logs.
	Name string

	// KeyHeader is the request header that carries the key, bare or as
	// a quoted structured-field string. Default HeaderIdempotencyKey.
	// Unused when KeyField is set.
	KeyHeader string

	// KeyField, when set, is the top-level member of the JSON request
	// body that carries the key, as a string, instead of a header. The
	// server takes the member out of the body before it fingerprints the
	// body and before the endpoint reads it.
	KeyField string

	// MaxKeyLength is the longest key accepted, in bytes. Default
	// MaxKeyLength.
	MaxKeyLength int

	// Retention is how long keys are kept when Config.Retention is zero.
	// Default DefaultRetention.
	Retention time.Duration

	// InFlight answers a retry whose first request still runs; it
	// always carries Retry-After. Default: 409, a problem document of
	// type ProblemInFlight.
	InFlight Reply

	// Mismatch answers a key reused for another request. Default: 422, a
	// problem document of type ProblemKeyMismatch.
	Mismatch Reply

	// Applied, when its Status is set, answers a retry of a request that
	// was applied (its stored answer is a 2xx) instead of the replay: the
	// answer says the key was used, and names what the first request
	// created, without repeating its answer. A stored refusal is still
	// replayed. Default: the replay.
	Applied Reply

	// UnmarkedReplays sends a replay exactly as the first answer went,
	// without Idempotent-Replayed: true. Default false.
	UnmarkedReplays bool
}

// Reply is a refusal in a dialect: a status and, when Fields is set, a
// JSON body holding those members. Each name of Fields is a dotted path:
// "error.code" is the member code of the object error, and a name ending
// in [] is an array of one object ("errors[].code" is
// {"errors":[{"code":...}]}). The body also gets a "message" member beside
// the first of them, in sorted order, saying what happened. A Reply
// without Fields is a problem document.
type Reply struct {
	// Status is the answer's status code.
	Status int
	// Fields are the members of the JSON body, by dotted path.
	Fields map[string]string
	// IDField, in an Applied answer, is the dotted path of the member
	// that holds the "id" of what the first request created.
	IDField string
}

// dialects are the conventions of the APIs the idem client has built-in
// dialects for, by the names the client gives them: each speaks as the
// provider's documentation, which the client's dialect of the same name
// cites, says the provider answers. Where a provider documents no answer
// for a request still in flight or a key reused, the server's own is kept.
// Checkout.com and Primer answer as they first documented (429 in flight;
// 400 TransactionRequestIdempotencyKeyAlreadyExists), forms the client's
// dialects read as they read the later ones.
var dialects = map[string]Dialect{
	"ietf": {Name: "ietf", UnmarkedReplays: true},
	"stripe": {
		Name: "stripe", Retention: 24 * time.Hour,
		InFlight: Reply{Status: http.StatusConflict, Fields: map[string]string{"error.type": "idempotency_error", "error.code": "idempotency_key_in_use"}},
		Mismatch: Reply{Status: http.StatusBadRequest, Fields: map[string]string{"error.type": "idempotency_error"}},
	},
	"adyen": {
		Name: "adyen", MaxKeyLength: 64, Retention: 31 * 24 * time.Hour, UnmarkedReplays: true,
		InFlight: Reply{Status: http.StatusConflict, Fields: map[string]string{"errorCode": "704", "errorType": "validation"}},
	},
	"paypal": {
		Name: "paypal", KeyHeader: "PayPal-Request-Id", MaxKeyLength: 108, Retention: 6 * time.Hour, UnmarkedReplays: true,
		Mismatch: Reply{Status: http.StatusUnprocessableEntity, Fields: map[string]string{"name": "DUPLICATE_REQUEST_ID"}},
	},
	"square": {
		Name: "square", KeyField: "idempotency_key", MaxKeyLength: 45, UnmarkedReplays: true,
		Mismatch: Reply{Status: http.StatusBadRequest, Fields: map[string]string{"errors[].category": "INVALID_REQUEST_ERROR", "errors[].code": "IDEMPOTENCY_KEY_REUSED"}},
	},
	"aws-cloudcontrol": {
		Name: "aws-cloudcontrol", KeyField: "ClientToken", MaxKeyLength: 128, Retention: 36 * time.Hour, UnmarkedReplays: true,
		Mismatch: Reply{Status: http.StatusBadRequest, Fields: map[string]string{"__type": "ClientTokenConflictException"}},
	},
	"checkout": {
		Name: "checkout", KeyHeader: "Cko-Idempotency-Key", Retention: 24 * time.Hour, UnmarkedReplays: true,
		InFlight: Reply{Status: http.StatusTooManyRequests},
	},
	"mercadopago": {Name: "mercadopago", KeyHeader: "X-Idempotency-Key", UnmarkedReplays: true},
	"primer": {
		Name: "primer", KeyHeader: "X-Idempotency-Key", UnmarkedReplays: true,
		Applied: Reply{Status: http.StatusBadRequest, Fields: map[string]string{"error.errorId": "TransactionRequestIdempotencyKeyAlreadyExists"},
			IDField: "error.paymentId"},
	},
	"picpay": {
		Name: "picpay", KeyHeader: "X-Idempotency-Key", UnmarkedReplays: true,
		InFlight: Reply{Status: http.StatusAlreadyReported},
	},
}

// DialectNamed returns the built-in dialect of that name (one of
// DialectNames), a copy the caller may change.
func DialectNamed(name string) (Dialect, bool) {
	d, ok := dialects[name]
	for _, a := range []*Reply{&d.InFlight, &d.Mismatch, &d.Applied} {
		a.Fields = maps.Clone(a.Fields)
	}
	return d, ok
}

// DialectNames returns the names of the built-in dialects, sorted.
func DialectNames() []string {
	return slices.Sorted(maps.Keys(dialects))
}

// InFlightResponse returns the status, header and body of the dialect's
// answer to a request whose key's first request still runs, without its
// Retry-After: what a fault proxy in front of the server sends in its
// place (chaos.InFlight).
func (d Dialect) InFlightResponse() (status int, header http.Header, body []byte) {
	r := d.InFlight.render(problem(http.StatusConflict, ProblemInFlight, "Request in flight", inFlightDetail(d)), inFlightDetail(d), "")
	return r.Status, r.Header, r.Body
}

// inFlightDetail says what an in-flight answer means.
func inFlightDetail(d Dialect) string {
	return "a request with this " + d.keyTitle() + " is still being processed; retry after the time given in Retry-After"
}

// keyHeader is the header the dialect reads the key from.
func (d Dialect) keyHeader() string {
	if d.KeyHeader == "" {
		return HeaderIdempotencyKey
	}
	return d.KeyHeader
}

// keyTitle names the key in the titles of problems: its header or its
// body member.
func (d Dialect) keyTitle() string {
	if d.KeyField != "" {
		return d.KeyField
	}
	return d.keyHeader()
}

// check reports what makes d unusable, wrapped in ErrInvalidConfig.
func (d Dialect) check() error {
	bad := func(what string) error { return fmt.Errorf("%w: dialect %q: %s", ErrInvalidConfig, d.Name, what) }
	switch {
	case d.MaxKeyLength < 0:
		return bad("negative MaxKeyLength")
	case d.Retention < 0:
		return bad("negative Retention")
	case d.KeyHeader != "" && d.KeyField != "":
		return bad("KeyHeader and KeyField cannot both be set")
	case d.KeyHeader != "" && !validHeaderName(d.KeyHeader):
		return bad(fmt.Sprintf("KeyHeader %q is no header name", d.KeyHeader))
	}
	for _, a := range []Reply{d.InFlight, d.Mismatch, d.Applied} {
		if a.Status != 0 && (a.Status < 200 || a.Status > 599) {
			return bad(fmt.Sprintf("answer status %d is not 2xx to 5xx", a.Status))
		}
	}
	if d.Applied.Status == 0 && (d.Applied.Fields != nil || d.Applied.IDField != "") {
		return bad("an Applied answer needs a Status")
	}
	return nil
}

// validHeaderName reports whether s is an RFC 9110 token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// render returns a as a response: its status (or def's when a has none)
// and its body; detail says what happened, id is what the first request
// created (for IDField).
func (a Reply) render(def *Problem, detail, id string) response {
	if a.Status == 0 {
		return def.response()
	}
	if a.Fields == nil && a.IDField == "" {
		p := *def
		p.Status = a.Status
		return p.response()
	}
	body := map[string]any{}
	paths := slices.Sorted(maps.Keys(a.Fields))
	for _, p := range paths {
		setPath(body, p, a.Fields[p])
	}
	if a.IDField != "" {
		setPath(body, a.IDField, id)
	}
	first := a.IDField
	if len(paths) > 0 {
		first = paths[0]
	}
	setPath(body, joinPath(parentPath(first), "message"), detail)
	b, _ := json.Marshal(body) // strings in maps cannot fail
	return response{
		Status: a.Status,
		Header: http.Header{"Content-Type": {"application/json"}},
		Body:   append(b, '\n'),
	}
}

// parentPath returns the dotted path p without its last element: "a.b.c"
// gives "a.b", "c" gives "".
func parentPath(p string) string {
	if i := strings.LastIndexByte(p, '.'); i >= 0 {
		return p[:i]
	}
	return ""
}

// joinPath joins a parent path and a member name.
func joinPath(parent, name string) string {
	if parent == "" {
		return name
	}
	return parent + "." + name
}

// setPath sets the member at the dotted path p of obj to v, making the
// objects (and one-object arrays) on the way.
func setPath(obj map[string]any, p string, v string) {
	head, rest, nested := strings.Cut(p, ".")
	if !nested {
		obj[head] = v
		return
	}
	if name, ok := strings.CutSuffix(head, "[]"); ok {
		arr, ok := obj[name].([]any)
		if !ok {
			arr = []any{map[string]any{}}
			obj[name] = arr
		}
		setPath(arr[0].(map[string]any), rest, v)
		return
	}
	child, ok := obj[head].(map[string]any)
	if !ok {
		child = map[string]any{}
		obj[head] = child
	}
	setPath(child, rest, v)
}

// maxKeyLength is the longest key the dialect accepts.
func (d Dialect) maxKeyLength() int {
	if d.MaxKeyLength == 0 {
		return MaxKeyLength
	}
	return d.MaxKeyLength
}
