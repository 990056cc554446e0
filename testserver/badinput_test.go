package testserver

import (
	"net/http"
	"strings"
	"testing"
)

// S7.1 and S7.2: bad input gets a clear problem and changes nothing.
func TestS7BadInputChangesNothing(t *testing.T) {
	onEachStore(t, func(t *testing.T, newDB func(testing.TB) string) {
		huge := `{"item_id":"sku-1","quantity":1,"reference":"` + strings.Repeat("x", DefaultMaxBodyBytes) + `"}`
		tests := []struct {
			name        string
			method      string
			path        string
			contentType string
			body        string
			status      int
			problem     string
			detail      string // a piece of the detail that tells the caller what to fix
		}{
			{"empty body", "POST", "/reservations", "", "", 400, ProblemInvalidRequest, "empty"},
			{"malformed JSON", "POST", "/reservations", "", `{"item_id":`, 400, ProblemInvalidRequest, "malformed"},
			{"syntax error", "POST", "/charges", "", `{"customer" "x"}`, 400, ProblemInvalidRequest, "malformed JSON at byte"},
			{"not an object", "POST", "/charges", "", `[1,2]`, 400, ProblemInvalidRequest, "JSON object"},
			{"null", "POST", "/charges", "", `null`, 400, ProblemInvalidRequest, "JSON object"},
			{"two objects", "POST", "/charges", "", chargeBody + chargeBody, 400, ProblemInvalidRequest, "single JSON object"},
			{"unknown field", "POST", "/reservations", "", `{"item_id":"sku-1","quantity":1,"qty":1}`, 400, ProblemInvalidRequest, `unknown field "qty"`},
			{"field names in another case", "POST", "/charges", "", `{"CUSTOMER":"c","Amount":5,"currency":"usd"}`, 400, ProblemInvalidRequest, `unknown field "CUSTOMER"; field names are case-sensitive: "customer"`},
			{"field name in another case", "POST", "/reservations", "", `{"item_id":"sku-1","Quantity":1}`, 400, ProblemInvalidRequest, `unknown field "Quantity"; field names are case-sensitive: "quantity"`},
			{"duplicate field", "POST", "/charges", "", `{"amount":-5,"amount":5,"customer":"c","currency":"usd"}`, 400, ProblemInvalidRequest, `field "amount" is given twice`},
			{"duplicate field in another case", "PUT", "/inventory/sku-1", "", `{"available":1,"Available":2}`, 400, ProblemInvalidRequest, `unknown field "Available"`},
			{"duplicate stock", "PUT", "/inventory/sku-1", "", `{"available":9,"available":1}`, 400, ProblemInvalidRequest, `field "available" is given twice`},
			{"quantity as string", "POST", "/reservations", "", `{"item_id":"sku-1","quantity":"1"}`, 400, ProblemInvalidRequest, `"quantity" must be an integer`},
			{"fractional quantity", "POST", "/reservations", "", `{"item_id":"sku-1","quantity":1.5}`, 400, ProblemInvalidRequest, `"quantity" must be an integer`},
			{"item as number", "POST", "/reservations", "", `{"item_id":7,"quantity":1}`, 400, ProblemInvalidRequest, `"item_id" must be a string`},
			{"zero quantity", "POST", "/reservations", "", `{"item_id":"sku-1","quantity":0}`, 400, ProblemInvalidRequest, "positive"},
			{"negative quantity", "POST", "/reservations", "", `{"item_id":"sku-1","quantity":-3}`, 400, ProblemInvalidRequest, "positive"},
			{"missing item", "POST", "/reservations", "", `{"quantity":1}`, 400, ProblemInvalidRequest, `"item_id" is required`},
			{"empty reference", "POST", "/reservations", "", `{"item_id":"sku-1","quantity":1,"reference":""}`, 400, ProblemInvalidRequest, "empty"},
			{"negative amount", "POST", "/charges", "", `{"customer":"c","amount":-100,"currency":"usd"}`, 400, ProblemInvalidRequest, `"amount" must be positive`},
			{"zero amount", "POST", "/charges", "", `{"customer":"c","amount":0,"currency":"usd"}`, 400, ProblemInvalidRequest, `"amount" must be positive`},
			{"huge amount", "POST", "/charges", "", `{"customer":"c","amount":100000000001,"currency":"usd"}`, 400, ProblemInvalidRequest, "at most"},
			{"amount overflows", "POST", "/charges", "", `{"customer":"c","amount":1e30,"currency":"usd"}`, 400, ProblemInvalidRequest, `"amount" must be an integer`},
			{"missing amount", "POST", "/charges", "", `{"customer":"c","currency":"usd"}`, 400, ProblemInvalidRequest, `"amount" is required`},
			{"bad currency", "POST", "/charges", "", `{"customer":"c","amount":1,"currency":"dollars"}`, 400, ProblemInvalidRequest, "ISO 4217"},
			{"long customer", "POST", "/charges", "", `{"customer":"` + strings.Repeat("c", 256) + `","amount":1,"currency":"usd"}`, 400, ProblemInvalidRequest, "at most 255"},
			{"negative stock", "PUT", "/inventory/sku-1", "", `{"available":-1}`, 400, ProblemInvalidRequest, "negative"},
			{"stock as bool", "PUT", "/inventory/sku-1", "", `{"available":true}`, 400, ProblemInvalidRequest, `"available" must be an integer`},
			{"huge body", "POST", "/reservations", "", huge, 413, ProblemBodyTooLarge, "limited to 65536 bytes"},
			{"form body", "POST", "/charges", "application/x-www-form-urlencoded", "customer=c", 415, ProblemUnsupportedMedia, "application/json"},
			{"text body", "PUT", "/inventory/sku-1", "text/plain", `{"available":1}`, 415, ProblemUnsupportedMedia, "application/json"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel() // each case has a database of its own
				in := start(t, Config{Path: newDB(t)})
				stock(t, in, "sku-1", 5)
				before := snap(t, in)
				r := req{method: tt.method, path: tt.path, key: "k", body: tt.body}
				if tt.contentType != "" {
					r.header = map[string]string{"Content-Type": tt.contentType}
				}
				p := wantProblem(t, send(t, in, r), tt.status, tt.problem)
				if !strings.Contains(p.Detail, tt.detail) {
					t.Fatalf("detail %q does not say %q", p.Detail, tt.detail)
				}
				if after := snap(t, in); after != before {
					t.Fatalf("state changed from %+v to %+v", before, after)
				}
				if st := stats(t, in); st.Invalid != 1 {
					t.Fatalf("invalid %d, want 1", st.Invalid)
				}
				// The key was not consumed: a good request may use it now.
				good := mutatingEndpoints[0]
				wantStatus(t, send(t, in, req{method: good.method, path: good.path, key: "k", body: good.body}), good.ok)
			})
		}
	})
}

func TestJSONContentTypesAreAccepted(t *testing.T) {
	in := start(t, Config{})
	for i, ct := range []string{"application/json", "application/json; charset=utf-8", "application/merge-patch+json"} {
		rep := send(t, in, req{method: "PUT", path: "/inventory/sku-1", key: "k" + itoa(i), body: `{"available":1}`,
			header: map[string]string{"Content-Type": ct}})
		wantStatus(t, rep, http.StatusOK)
	}
}
