package testserver

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// mutatingEndpoints are the endpoints under the key rules, each with a
// valid body.
var mutatingEndpoints = []struct {
	name   string
	method string
	path   string
	body   string
	other  string // another valid body
	ok     int
}{
	{"reservation", "POST", "/reservations", `{"item_id":"sku-1","quantity":1,"reference":"r1"}`, `{"item_id":"sku-1","quantity":2,"reference":"r1"}`, 201},
	{"charge", "POST", "/charges", chargeBody, `{"customer":"cus_1","amount":1300,"currency":"usd","reference":"invoice-42"}`, 201},
	{"stock", "PUT", "/inventory/sku-1", `{"available": 4}`, `{"available": 5}`, 200},
}

// snapshot is the state that a refused request must leave alone.
type snapshot struct {
	keys, reservations, charges, captures, stock int64
}

func snap(t *testing.T, in *Instance) snapshot {
	t.Helper()
	st := stats(t, in)
	return snapshot{st.Keys, st.Effects.Reservations, st.Effects.Charges, st.GatewayCaptures, available(t, in, "sku-1")}
}

// S1.1 to S1.3: every mutating endpoint requires a well-formed key.
func TestS1KeyIsRequired(t *testing.T) {
	onEachStore(t, func(t *testing.T, newDB func(testing.TB) string) {
		keys := []struct {
			name    string
			values  []string
			problem string
		}{
			{"missing", nil, ProblemMissingKey},
			{"empty", []string{""}, ProblemInvalidKey},
			{"malformed", []string{"not a token"}, ProblemInvalidKey},
			{"unterminated string", []string{`"abc`}, ProblemInvalidKey},
			{"256 characters", []string{strings.Repeat("k", 256)}, ProblemInvalidKey},
			{"two keys", []string{"a", "b"}, ProblemInvalidKey},
		}
		for _, ep := range mutatingEndpoints {
			for _, k := range keys {
				t.Run(ep.name+"/"+k.name, func(t *testing.T) {
					t.Parallel() // each case has a database of its own
					in := start(t, Config{Path: newDB(t)})
					stock(t, in, "sku-1", 5)
					before := snap(t, in)
					hr := req{method: ep.method, path: ep.path, body: ep.body}.build(t, in.URL)
					for _, v := range k.values {
						hr.Header.Add(HeaderIdempotencyKey, v)
					}
					rep, err := do(in.Client(), hr)
					if err != nil {
						t.Fatal(err)
					}
					wantProblem(t, rep, http.StatusBadRequest, k.problem)
					if after := snap(t, in); after != before {
						t.Fatalf("state changed from %+v to %+v", before, after)
					}
				})
			}
		}
		t.Run("255 characters and the quoted form are one key", func(t *testing.T) {
			in := start(t, Config{Path: newDB(t)})
			stock(t, in, "sku-1", 5)
			key := strings.Repeat("k", 255)
			first := send(t, in, req{method: "POST", path: "/reservations", key: key, body: mutatingEndpoints[0].body})
			wantStatus(t, first, 201)
			again := send(t, in, req{method: "POST", path: "/reservations", key: `"` + key + `"`, body: mutatingEndpoints[0].body})
			if again.header.Get(HeaderReplayed) != "true" || string(again.body) != string(first.body) {
				t.Fatalf("quoted key: %d %s, want a replay", again.status, again.body)
			}
		})
	})
}

// S2.1 and S2.2: keys are scoped per client.
func TestS2KeysAreScopedPerClient(t *testing.T) {
	onEachStore(t, func(t *testing.T, newDB func(testing.TB) string) {
		in := start(t, Config{Path: newDB(t)})
		stock(t, in, "sku-1", 100)
		body := `{"item_id":"sku-1","quantity":1}`
		post := func(h map[string]string) reply {
			return send(t, in, req{method: "POST", path: "/reservations", key: "shared-key", header: h, body: body})
		}
		tests := []struct {
			name   string
			header map[string]string
			replay bool
		}{
			{"anonymous", nil, false},
			{"anonymous again", nil, true},
			{"client alice", map[string]string{HeaderClientID: "alice"}, false},
			{"client bob", map[string]string{HeaderClientID: "bob"}, false},
			{"client alice again", map[string]string{HeaderClientID: "alice"}, true},
			{"a bearer token alone is anonymous", map[string]string{"Authorization": "Bearer t0ken"}, true},
			{"alice with a bearer token", map[string]string{"Authorization": "Bearer t0ken", HeaderClientID: "alice"}, true},
			{"alice with another token", map[string]string{"Authorization": "Bearer other", HeaderClientID: "alice"}, true},
		}
		for _, tt := range tests {
			rep := post(tt.header)
			wantStatus(t, rep, 201)
			if got := rep.header.Get(HeaderReplayed) == "true"; got != tt.replay {
				t.Fatalf("%s: replayed %v, want %v", tt.name, got, tt.replay)
			}
		}
		if st := stats(t, in); st.Effects.Reservations != 3 || st.Replays != 5 {
			t.Fatalf("stats %+v, want 3 reservations (anonymous, alice, bob) and 5 replays", st)
		}
		rep := send(t, in, req{method: "POST", path: "/reservations", key: "k", header: map[string]string{"Authorization": "Basic YTpi"}, body: body})
		wantProblem(t, rep, http.StatusUnauthorized, ProblemUnauthorized)
		if rep.header.Get("WWW-Authenticate") != "Bearer" {
			t.Fatalf("WWW-Authenticate %q", rep.header.Get("WWW-Authenticate"))
		}
		wantProblem(t, send(t, in, req{method: "POST", path: "/reservations", key: "k", client: "has space", body: body}), 400, ProblemInvalidClient)
	})
}

// S2.3: a client that refreshes its token keeps its keys: one key and
// one body, sent with a bearer token, then with a refreshed one, then
// with none, reserve once and replay the first answer twice, for the
// anonymous client and for a client by its ID.
func TestS2ARefreshedTokenKeepsTheClientsKeys(t *testing.T) {
	onEachStore(t, func(t *testing.T, newDB func(testing.TB) string) {
		in := start(t, Config{Path: newDB(t)})
		stock(t, in, "sku-1", 100)
		body := `{"item_id":"sku-1","quantity":1}`
		for _, client := range []string{"", "alice"} {
			var first reply
			for i, token := range []string{"token-0900", "token-0905", ""} {
				h := map[string]string{}
				if token != "" {
					h["Authorization"] = "Bearer " + token
				}
				if client != "" {
					h[HeaderClientID] = client
				}
				rep := send(t, in, req{method: "POST", path: "/reservations", key: "k1", header: h, body: body})
				wantStatus(t, rep, 201)
				if i == 0 {
					first = rep
					continue
				}
				if rep.header.Get(HeaderReplayed) != "true" || string(rep.body) != string(first.body) {
					t.Fatalf("client %q, token %q: %s, replayed %q; want the first answer %s replayed",
						client, token, rep.body, rep.header.Get(HeaderReplayed), first.body)
				}
			}
		}
		if st := stats(t, in); st.Effects.Reservations != 2 || st.Replays != 4 {
			t.Fatalf("stats %+v, want 2 reservations (the anonymous client's, alice's) and 4 replays", st)
		}
	})
}

// S3.2: the business tables carry the key under UNIQUE, a second line of
// defence behind the key row.
func TestS3BusinessTablesCarryTheKeyUnique(t *testing.T) {
	in := start(t, Config{})
	db := in.Server.db.write
	ctx := context.Background()
	for _, stmt := range []string{
		`INSERT INTO reservations (id, client_id, idempotency_key, item_id, quantity, created_at) VALUES (?, 'c', 'k', 'i', 1, 0)`,
		`INSERT INTO charges (id, client_id, idempotency_key, customer, amount, currency, gateway_charge_id, status, created_at)
		 VALUES (?, 'c', 'k', 'x', 1, 'usd', ?, 'succeeded', 0)`,
	} {
		if _, err := db.ExecContext(ctx, stmt, "id1", "gw1"); err != nil {
			t.Fatal(err)
		}
		_, err := db.ExecContext(ctx, stmt, "id2", "gw2")
		if err == nil || !strings.Contains(err.Error(), "UNIQUE") {
			t.Fatalf("second row under one key: %v, want a UNIQUE violation", err)
		}
	}
}

// S4.1 to S4.3: replay with the same fingerprint, 422 with another.
func TestS4ReplayAndMismatch(t *testing.T) {
	onEachStore(t, func(t *testing.T, newDB func(testing.TB) string) {
		for _, ep := range mutatingEndpoints {
			t.Run(ep.name, func(t *testing.T) {
				in := start(t, Config{Path: newDB(t)})
				stock(t, in, "sku-1", 5)
				first := send(t, in, req{method: ep.method, path: ep.path, key: "k", body: ep.body})
				wantStatus(t, first, ep.ok)
				if first.header.Get(HeaderReplayed) != "" {
					t.Fatalf("first answer has %s", HeaderReplayed)
				}
				before := snap(t, in)
				again := send(t, in, req{method: ep.method, path: ep.path, key: "k", body: ep.body})
				if again.status != first.status || string(again.body) != string(first.body) ||
					again.header.Get("Content-Type") != first.header.Get("Content-Type") ||
					again.header.Get("Location") != first.header.Get("Location") ||
					again.header.Get(HeaderReplayed) != "true" {
					t.Fatalf("replay %d %v %s\nwant %d %v %s", again.status, again.header, again.body, first.status, first.header, first.body)
				}
				mismatches := []req{
					{method: ep.method, path: ep.path, key: "k", body: ep.body + " "},             // same JSON, other bytes
					{method: ep.method, path: ep.path, key: "k", body: ep.other},                  // other values
					{method: "PUT", path: "/inventory/sku-9", key: "k", body: `{"available": 4}`}, // other path
					{method: ep.method, path: ep.path + "?x=1", key: "k", body: ep.body},          // other query
				}
				if ep.method == "PUT" {
					mismatches[2] = req{method: "POST", path: "/reservations", key: "k", body: mutatingEndpoints[0].body}
				}
				for _, m := range mismatches {
					wantProblem(t, send(t, in, m), http.StatusUnprocessableEntity, ProblemKeyMismatch)
				}
				if after := snap(t, in); after != before {
					t.Fatalf("state changed from %+v to %+v", before, after)
				}
				if st := stats(t, in); st.Replays != 1 || st.Mismatches != 4 {
					t.Fatalf("stats %+v, want 1 replay and 4 mismatches", st)
				}
			})
		}
	})
}

// S4.3: the query string is part of the request the key names, as the
// contract's fingerprint covers the whole URL.
func TestS4QueryIsPartOfTheFingerprint(t *testing.T) {
	onEachStore(t, func(t *testing.T, newDB func(testing.TB) string) {
		in := start(t, Config{Path: newDB(t)})
		post := func(path string) reply {
			return send(t, in, req{method: "POST", path: path, key: "k", body: chargeBody})
		}
		first := post("/charges?x=1")
		wantStatus(t, first, http.StatusCreated)
		again := post("/charges?x=1")
		if again.header.Get(HeaderReplayed) != "true" || string(again.body) != string(first.body) {
			t.Fatalf("same query: %d %s, want a replay", again.status, again.body)
		}
		for _, path := range []string{"/charges?x=2", "/charges", "/charges?x=1&y=2"} {
			wantProblem(t, post(path), http.StatusUnprocessableEntity, ProblemKeyMismatch)
		}
		if st := stats(t, in); st.Effects.Charges != 1 || st.GatewayCaptures != 1 || st.Mismatches != 3 {
			t.Fatalf("stats %+v, want one charge and three mismatches", st)
		}
	})
}

func TestRoutes(t *testing.T) {
	in := start(t, Config{})
	tests := []struct {
		method, path string
		status       int
		problem      string
		allow        string
	}{
		{"GET", "/", 404, ProblemNotFound, ""},
		{"GET", "/nope", 404, ProblemNotFound, ""},
		{"POST", "/charges/x/y", 404, ProblemNotFound, ""},
		{"DELETE", "/charges", 405, ProblemMethodNotAllowed, "GET, HEAD, POST"},
		{"GET", "/reservations", 405, ProblemMethodNotAllowed, "POST"},
		{"PATCH", "/reservations/x", 405, ProblemMethodNotAllowed, "GET, HEAD"},
		{"POST", "/inventory/sku-1", 405, ProblemMethodNotAllowed, "GET, HEAD, PUT"},
		{"POST", "/stats", 405, ProblemMethodNotAllowed, "GET, HEAD"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			rep := send(t, in, req{method: tt.method, path: tt.path, key: "k", body: "{}"})
			wantProblem(t, rep, tt.status, tt.problem)
			if got := rep.header.Get("Allow"); got != tt.allow {
				t.Fatalf("Allow %q, want %q", got, tt.allow)
			}
		})
	}
	if st := stats(t, in); st.Keys != 0 || st.Requests != 0 {
		t.Fatalf("stats %+v after unknown routes, want nothing counted or stored", st)
	}
}
