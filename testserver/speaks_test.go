package testserver

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// inBody returns body, a JSON object, with the member name set to key as
// its first member, as a client speaking a body-key dialect sends it.
func inBody(name, key, body string) string {
	return `{"` + name + `":"` + key + `",` + strings.TrimPrefix(body, "{")
}

// S1.5: a dialect's body member carries the key, and the server takes it
// out of the body, byte for byte, whatever the member's place.
func TestS1BodyKeyIsTakenOutOfTheBody(t *testing.T) {
	d := Dialect{KeyField: "idempotency_key"}
	tests := []struct {
		name, body, key, rest string
		err                   error
	}{
		{"first", `{"idempotency_key":"k1","a":1,"b":[1,2]}`, "k1", `{"a":1,"b":[1,2]}`, nil},
		{"middle", `{"a":1, "idempotency_key" : "k1" ,"b":2}`, "k1", `{"a":1 ,"b":2}`, nil},
		{"last", `{"a":{"idempotency_key":"nested"},"idempotency_key":"k1"}`, "k1", `{"a":{"idempotency_key":"nested"}}`, nil},
		{"alone", ` { "idempotency_key":"k,1" } `, "k,1", ` {  } `, nil},
		{"escaped", `{"idempotency_key":"k\"1","a":"x"}`, `k"1`, `{"a":"x"}`, nil},
		{"missing", `{"a":1}`, "", `{"a":1}`, errKeyMissing},
		{"twice", `{"idempotency_key":"k1","idempotency_key":"k1"}`, "", "", errKeyMany},
		{"empty", `{"idempotency_key":""}`, "", "", errKeyEmpty},
		{"too long", `{"idempotency_key":"` + strings.Repeat("k", 256) + `"}`, "", "", errKeyTooLong},
		{"not a string", `{"idempotency_key":42}`, "", "", nil},
		{"control byte", `{"idempotency_key":"a\u0001b"}`, "", "", nil},
		{"an array", `["idempotency_key"]`, "", "", errBodyNotObject},
		{"malformed", `{"idempotency_key":"k1",`, "", "", errBodyNotObject},
		{"empty body", ``, "", "", errBodyNotObject},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key, rest, err := d.bodyKey([]byte(tt.body))
			if tt.key != "" {
				if err != nil || key != tt.key || string(rest) != tt.rest {
					t.Fatalf("bodyKey = %q, %#q, %v; want %q, %#q", key, rest, err, tt.key, tt.rest)
				}
				return
			}
			if err == nil || (tt.err != nil && !errors.Is(err, tt.err)) {
				t.Fatalf("bodyKey = %q, %#q, %v; want error %v", key, rest, err, tt.err)
			}
			if errors.Is(err, errKeyMissing) && string(rest) != tt.rest {
				t.Fatalf("bodyKey kept %#q of a body without the key, want it whole", rest)
			}
		})
	}
}

// S1.5, S4.7: a server speaking Square's dialect reads the key from the
// idempotency_key member, which the endpoint never sees; the fingerprint
// covers the rest of the body, so a retry is a replay and another body
// under the key is refused in the dialect's words.
func TestS1BodyKeyDialectEndToEnd(t *testing.T) {
	d := dialects["square"]
	in := start(t, Config{Dialect: d})
	rsv := `{"item_id":"sku-1","quantity":1,"reference":"r1"}`
	post := func(body string, header map[string]string) reply {
		return send(t, in, req{method: "POST", path: "/reservations", body: body, header: header})
	}
	wantStatus(t, send(t, in, req{method: "PUT", path: "/inventory/sku-1", body: inBody(d.KeyField, "stock", `{"available":5}`)}), 200)

	first := post(inBody(d.KeyField, "k1", rsv), nil)
	wantStatus(t, first, 201)
	again := post(`{"item_id":"sku-1","quantity":1,"reference":"r1","idempotency_key":"k1"}`, nil)
	wantStatus(t, again, 201)
	if string(again.body) != string(first.body) || again.header.Get(HeaderReplayed) != "" {
		t.Fatalf("retry: %s (Idempotent-Replayed %q), want the first answer %s unmarked", again.body, again.header.Get(HeaderReplayed), first.body)
	}
	reused := post(inBody(d.KeyField, "k1", `{"item_id":"sku-1","quantity":2,"reference":"r1"}`), nil)
	wantStatus(t, reused, 400)
	var square struct {
		Errors []struct{ Category, Code, Message string }
	}
	if err := json.Unmarshal(reused.body, &square); err != nil || len(square.Errors) != 1 ||
		square.Errors[0].Code != "IDEMPOTENCY_KEY_REUSED" || square.Errors[0].Category != "INVALID_REQUEST_ERROR" || square.Errors[0].Message == "" {
		t.Fatalf("reused key answered %s, want Square's IDEMPOTENCY_KEY_REUSED error", reused.body)
	}
	// The header is not where this dialect's key goes.
	wantProblem(t, post(rsv, map[string]string{HeaderIdempotencyKey: "k2"}), 400, ProblemMissingKey)
	wantProblem(t, post(`{"idempotency_key":7,"item_id":"sku-1","quantity":1}`, nil), 400, ProblemInvalidKey)
	wantProblem(t, post(`[1]`, nil), 400, ProblemInvalidRequest)
	if n := available(t, in, "sku-1"); n != 4 {
		t.Fatalf("stock %d, want 4: one reservation", n)
	}
}

// S1.4: a dialect's header carries the key, bare or quoted, up to the
// dialect's length; Idempotency-Key is then no key.
func TestS1DialectKeyHeader(t *testing.T) {
	d := dialects["paypal"]
	in := start(t, Config{Dialect: d})
	put := func(header map[string]string, body string) reply {
		return send(t, in, req{method: "PUT", path: "/inventory/sku-1", header: header, body: body})
	}
	first := put(map[string]string{"PayPal-Request-Id": "k1"}, `{"available":5}`)
	wantStatus(t, first, 200)
	again := put(map[string]string{"PayPal-Request-Id": `"k1"`}, `{"available":5}`)
	if again.status != 200 || string(again.body) != string(first.body) || again.header.Get(HeaderReplayed) != "" {
		t.Fatalf("quoted retry: %d %s (Idempotent-Replayed %q), want the first answer unmarked", again.status, again.body, again.header.Get(HeaderReplayed))
	}
	if st := stats(t, in); st.Replays != 1 || st.Keys != 1 {
		t.Fatalf("stats %+v, want one key replayed once", st)
	}
	p := wantProblem(t, put(map[string]string{HeaderIdempotencyKey: "k2"}, `{"available":6}`), 400, ProblemMissingKey)
	if !strings.Contains(p.Detail, "PayPal-Request-Id") {
		t.Fatalf("problem %+v does not name the dialect's header", p)
	}
	wantProblem(t, put(map[string]string{"PayPal-Request-Id": strings.Repeat("k", 109)}, `{"available":6}`), 400, ProblemInvalidKey)
	wantStatus(t, put(map[string]string{"PayPal-Request-Id": strings.Repeat("k", 108)}, `{"available":6}`), 200)
}

// S4.6: while a charge is in flight, a retry gets the dialect's in-flight
// answer, with Retry-After; once it is done, the dialect's replay: marked
// with Idempotent-Replayed only in the dialects that mark replays.
func TestS4DialectInFlightAndReplayAnswers(t *testing.T) {
	tests := []struct {
		dialect string
		status  int
		field   string // dotted path in the JSON body, "" for a problem document
		value   string
		marked  bool
	}{
		{"", 409, "", "", true},
		{"ietf", 409, "", "", false},
		{"stripe", 409, "error.code", "idempotency_key_in_use", true},
		{"adyen", 409, "errorCode", "704", false},
		{"checkout", 429, "", "", false},
		{"mercadopago", 409, "", "", false},
		{"picpay", 208, "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.dialect, func(t *testing.T) {
			d := dialects[tt.dialect]
			in := start(t, Config{Dialect: d, LockTimeout: time.Minute})
			gw := blockGateway(in.Server)
			hdr := map[string]string{d.keyHeader(): "c1"}
			first := sendAsync(t, in, req{method: "POST", path: "/charges", header: hdr, body: chargeBody})
			<-gw.started
			rep := send(t, in, req{method: "POST", path: "/charges", header: hdr, body: chargeBody})
			wantStatus(t, rep, tt.status)
			if rep.header.Get("Retry-After") != "60" {
				t.Fatalf("in-flight answer without Retry-After: %v", rep.header)
			}
			if tt.field == "" {
				wantProblem(t, rep, tt.status, ProblemInFlight)
			} else if got := member(t, rep.body, tt.field); got != tt.value {
				t.Fatalf("in-flight answer %s: %s = %q, want %q", rep.body, tt.field, got, tt.value)
			}
			close(gw.release)
			done := <-first
			wantStatus(t, done, 201)
			again := send(t, in, req{method: "POST", path: "/charges", header: hdr, body: chargeBody})
			wantStatus(t, again, 201)
			if string(again.body) != string(done.body) || (again.header.Get(HeaderReplayed) == "true") != tt.marked {
				t.Fatalf("replay %s with Idempotent-Replayed %q; want the first answer %s, marked %v",
					again.body, again.header.Get(HeaderReplayed), done.body, tt.marked)
			}
			if st := stats(t, in); st.Effects.Charges != 1 || st.GatewayCaptures != 1 || st.Conflicts != 1 || st.Replays != 1 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// S4.7: a key reused for another request gets the dialect's mismatch
// answer, and changes nothing.
func TestS4DialectMismatchAnswers(t *testing.T) {
	tests := []struct {
		dialect      string
		status       int
		field, value string
	}{
		{"", 422, "", ""},
		{"stripe", 400, "error.type", "idempotency_error"},
		{"paypal", 422, "name", "DUPLICATE_REQUEST_ID"},
		{"aws-cloudcontrol", 400, "__type", "ClientTokenConflictException"},
	}
	for _, tt := range tests {
		t.Run(tt.dialect, func(t *testing.T) {
			d := dialects[tt.dialect]
			in := start(t, Config{Dialect: d})
			put := func(n string) reply {
				body := `{"available":` + n + `}`
				if d.KeyField != "" {
					return send(t, in, req{method: "PUT", path: "/inventory/sku-1", body: inBody(d.KeyField, "k1", body)})
				}
				return send(t, in, req{method: "PUT", path: "/inventory/sku-1", header: map[string]string{d.keyHeader(): "k1"}, body: body})
			}
			wantStatus(t, put("5"), 200)
			rep := put("6")
			if tt.field == "" {
				wantProblem(t, rep, tt.status, ProblemKeyMismatch)
			} else {
				wantStatus(t, rep, tt.status)
				if got := member(t, rep.body, tt.field); got != tt.value {
					t.Fatalf("mismatch answer %s: %s = %q, want %q", rep.body, tt.field, got, tt.value)
				}
			}
			if n := available(t, in, "sku-1"); n != 5 {
				t.Fatalf("stock %d after the refused reuse, want 5", n)
			}
		})
	}
}

// S4.8: in Primer's dialect a retry of an applied charge is not replayed:
// it gets 400 TransactionRequestIdempotencyKeyAlreadyExists naming the
// charge the first request made. A stored refusal is still replayed.
func TestS4DialectAlreadyAppliedAnswer(t *testing.T) {
	d := dialects["primer"]
	in := start(t, Config{Dialect: d})
	hdr := map[string]string{"X-Idempotency-Key": "c1"}
	first := send(t, in, req{method: "POST", path: "/charges", header: hdr, body: chargeBody})
	wantStatus(t, first, 201)
	charge := decode[Charge](t, first)
	again := send(t, in, req{method: "POST", path: "/charges", header: hdr, body: chargeBody})
	wantStatus(t, again, 400)
	if got := member(t, again.body, "error.errorId"); got != "TransactionRequestIdempotencyKeyAlreadyExists" {
		t.Fatalf("retry answered %s, want TransactionRequestIdempotencyKeyAlreadyExists", again.body)
	}
	if got := member(t, again.body, "error.paymentId"); got != charge.ID {
		t.Fatalf("already-applied answer %s names %q, want the charge %q", again.body, got, charge.ID)
	}
	// A refusal (no such item) is stored, and replayed as it was.
	rsv := `{"item_id":"none","quantity":1}`
	hdr = map[string]string{"X-Idempotency-Key": "r1"}
	refused := send(t, in, req{method: "POST", path: "/reservations", header: hdr, body: rsv})
	wantProblem(t, refused, 404, ProblemUnknownItem)
	if rep := send(t, in, req{method: "POST", path: "/reservations", header: hdr, body: rsv}); rep.status != 404 || string(rep.body) != string(refused.body) {
		t.Fatalf("retry of a refusal: %d %s, want the stored 404", rep.status, rep.body)
	}
	if st := stats(t, in); st.Effects.Charges != 1 || st.GatewayCaptures != 1 || st.Replays != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// S6.6: a dialect's retention is the server's unless Config.Retention
// says otherwise, and -dialect picks it on the command line.
func TestS6DialectRetention(t *testing.T) {
	for _, tt := range []struct {
		cfg  Config
		want time.Duration
	}{
		{Config{}, DefaultRetention},
		{Config{Dialect: dialects["adyen"]}, 31 * 24 * time.Hour},
		{Config{Dialect: dialects["paypal"]}, 6 * time.Hour},
		{Config{Dialect: dialects["square"]}, DefaultRetention},
		{Config{Dialect: dialects["adyen"], Retention: time.Minute}, time.Minute},
	} {
		c, err := tt.cfg.withDefaults()
		if err != nil || c.Retention != tt.want {
			t.Errorf("%q with Retention %v: retention %v, %v; want %v", tt.cfg.Dialect.Name, tt.cfg.Retention, c.Retention, err, tt.want)
		}
	}
	cfg, _, err := parseArgs([]string{"-dialect", "paypal"}, io.Discard, io.Discard)
	if err != nil || cfg.Dialect.Name != "paypal" || cfg.Retention != 0 {
		t.Fatalf("-dialect paypal: %q, retention %v, %v", cfg.Dialect.Name, cfg.Retention, err)
	}
	if _, _, err := parseArgs([]string{"-dialect", "klingon"}, io.Discard, io.Discard); !errors.Is(err, ErrUsage) {
		t.Fatalf("-dialect klingon: %v, want ErrUsage", err)
	}
}

// S6.6: a key kept for the dialect's retention is swept once it is older.
func TestS6DialectRetentionSweeps(t *testing.T) {
	clock := newFakeClock()
	d := dialects["paypal"]
	in := start(t, Config{Dialect: d, Now: clock.Now, SweepInterval: time.Hour})
	hdr := map[string]string{d.KeyHeader: "k1"}
	wantStatus(t, send(t, in, req{method: "PUT", path: "/inventory/sku-1", header: hdr, body: `{"available":5}`}), 200)
	clock.Advance(6*time.Hour - time.Second)
	if n, err := in.Server.Sweep(t.Context()); err != nil || n != 0 {
		t.Fatalf("sweep before the retention ended: %d, %v; want 0", n, err)
	}
	clock.Advance(time.Second)
	if n, err := in.Server.Sweep(t.Context()); err != nil || n != 1 {
		t.Fatalf("sweep at the retention's end: %d, %v; want 1", n, err)
	}
}

// A Dialect that cannot work is refused with ErrInvalidConfig.
func TestDialectIsChecked(t *testing.T) {
	for _, d := range []Dialect{
		{KeyHeader: "X-Key", KeyField: "key"},
		{KeyHeader: "Bad Header"},
		{MaxKeyLength: -1},
		{Retention: -time.Second},
		{InFlight: Reply{Status: 99}},
		{Applied: Reply{Fields: map[string]string{"a": "b"}}},
	} {
		if _, err := (Config{Dialect: d}).withDefaults(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%+v: %v, want ErrInvalidConfig", d, err)
		}
	}
	for _, name := range DialectNames() {
		if err := dialects[name].check(); err != nil || dialects[name].Name != name {
			t.Errorf("built-in %q: %v (named %q)", name, err, dialects[name].Name)
		}
	}
	d, _ := DialectNamed("stripe")
	d.InFlight.Fields["error.code"] = "changed"
	if again, _ := DialectNamed("stripe"); again.InFlight.Fields["error.code"] != "idempotency_key_in_use" {
		t.Error("a change to a dialect DialectNamed returned changed the built-in one")
	}
}

// member returns the string at the dotted path of a JSON body; a []
// element is the array's first.
func member(t *testing.T, body []byte, path string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("body %s: %v", body, err)
	}
	for _, name := range strings.Split(path, ".") {
		obj, _ := v.(map[string]any)
		v = obj[name]
	}
	s, _ := v.(string)
	return s
}
