package testserver

import (
	"net/http"
	"strings"
	"testing"
)

func TestPostReservation(t *testing.T) {
	tests := []struct {
		name      string
		body      string
		status    int
		problem   string // problem type, for errors
		wantStock int64  // sku-1 after the request; it starts at 5
	}{
		{"reserves", `{"item_id":"sku-1","quantity":2,"reference":"order-1"}`, 201, "", 3},
		{"reserves all", `{"item_id":"sku-1","quantity":5}`, 201, "", 0},
		{"insufficient stock", `{"item_id":"sku-1","quantity":6}`, 409, ProblemInsufficientStock, 5},
		{"unknown item", `{"item_id":"sku-404","quantity":1}`, 404, ProblemUnknownItem, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := start(t, Config{})
			stock(t, in, "sku-1", 5)
			rep := send(t, in, req{method: "POST", path: "/reservations", key: "k1", body: tt.body})
			if tt.problem != "" {
				wantProblem(t, rep, tt.status, tt.problem)
			} else {
				wantStatus(t, rep, tt.status)
				rsv := decode[Reservation](t, rep)
				if !strings.HasPrefix(rsv.ID, "rsv_") || rsv.ItemID != "sku-1" || rsv.CreatedAt == "" {
					t.Fatalf("reservation %+v", rsv)
				}
				if loc := rep.header.Get("Location"); loc != "/reservations/"+rsv.ID {
					t.Fatalf("Location %q", loc)
				}
				got := send(t, in, req{method: "GET", path: loc(rep)})
				wantStatus(t, got, 200)
				if string(got.body) != string(rep.body) {
					t.Fatalf("GET %s = %s, want the POST's body %s", loc(rep), got.body, rep.body)
				}
			}
			if got := available(t, in, "sku-1"); got != tt.wantStock {
				t.Fatalf("stock %d, want %d", got, tt.wantStock)
			}
			// Every final answer, success or business refusal, is stored.
			again := send(t, in, req{method: "POST", path: "/reservations", key: "k1", body: tt.body})
			if again.status != rep.status || string(again.body) != string(rep.body) || again.header.Get(HeaderReplayed) != "true" {
				t.Fatalf("retry: %d %s (replayed %q), want the stored %d %s", again.status, again.body,
					again.header.Get(HeaderReplayed), rep.status, rep.body)
			}
			if got := available(t, in, "sku-1"); got != tt.wantStock {
				t.Fatalf("stock after retry %d, want %d", got, tt.wantStock)
			}
			checkConsistent(t, in.Server)
		})
	}
}

func loc(rep reply) string { return rep.header.Get("Location") }

func TestInsufficientStockStaysTheAnswerForItsKey(t *testing.T) {
	in := start(t, Config{})
	stock(t, in, "sku-1", 1)
	body := `{"item_id":"sku-1","quantity":2}`
	first := send(t, in, req{method: "POST", path: "/reservations", key: "k1", body: body})
	wantProblem(t, first, 409, ProblemInsufficientStock)
	if first.header.Get("Retry-After") != "" {
		t.Fatal("a business conflict must not carry Retry-After: it is not the in-flight 409")
	}
	stock(t, in, "sku-1", 10)
	again := send(t, in, req{method: "POST", path: "/reservations", key: "k1", body: body})
	wantProblem(t, again, 409, ProblemInsufficientStock)
	if again.header.Get(HeaderReplayed) != "true" || string(again.body) != string(first.body) {
		t.Fatalf("retry after restocking: %s replayed=%q; want the stored refusal", again.body, again.header.Get(HeaderReplayed))
	}
	wantStatus(t, send(t, in, req{method: "POST", path: "/reservations", key: "k2", body: body}), 201)
	if got := available(t, in, "sku-1"); got != 8 {
		t.Fatalf("stock %d, want 8", got)
	}
}

func TestGetReservation(t *testing.T) {
	in := start(t, Config{})
	stock(t, in, "sku-1", 5)
	rep := send(t, in, req{method: "POST", path: "/reservations", key: "k1", client: "alice", body: `{"item_id":"sku-1","quantity":1}`})
	wantStatus(t, rep, 201)
	tests := []struct {
		name   string
		path   string
		client string
		status int
	}{
		{"own", loc(rep), "alice", 200},
		{"another client's", loc(rep), "bob", 404},
		{"anonymous", loc(rep), "", 404},
		{"unknown", "/reservations/rsv_nope", "alice", 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := send(t, in, req{method: "GET", path: tt.path, client: tt.client})
			if tt.status == 200 {
				wantStatus(t, got, 200)
				if string(got.body) != string(rep.body) {
					t.Fatalf("GET = %s, want %s", got.body, rep.body)
				}
				return
			}
			wantProblem(t, got, tt.status, ProblemNotFound)
		})
	}
}

func TestReservationsNeverOversell(t *testing.T) {
	in := start(t, Config{})
	stock(t, in, "sku-1", 10)
	const n = 16
	statuses := make(chan int, n)
	for i := range n {
		go func() {
			statuses <- (<-sendAsync(t, in, req{method: "POST", path: "/reservations", key: "k" + itoa(i), body: `{"item_id":"sku-1","quantity":1}`})).status
		}()
	}
	count := map[int]int{}
	for range n {
		count[<-statuses]++
	}
	if count[201] != 10 || count[409] != 6 {
		t.Fatalf("statuses %v, want 10 x 201 and 6 x 409", count)
	}
	if got := available(t, in, "sku-1"); got != 0 {
		t.Fatalf("stock %d, want 0", got)
	}
	checkConsistent(t, in.Server)
}

func TestPutInventory(t *testing.T) {
	in := start(t, Config{})
	tests := []struct {
		name    string
		key     string
		body    string
		status  int
		replay  bool
		problem string
		want    int64
	}{
		{"creates", "i1", `{"available": 7}`, 200, false, "", 7},
		{"replays", "i1", `{"available": 7}`, 200, true, "", 7},
		{"sets", "i2", `{"available": 3}`, 200, false, "", 3},
		{"zero", "i3", `{"available": 0}`, 200, false, "", 0},
		{"key reused for another value", "i1", `{"available": 9}`, 422, false, ProblemKeyMismatch, 0},
		{"negative", "i4", `{"available": -1}`, 400, false, ProblemInvalidRequest, 0},
		{"missing", "i5", `{}`, 400, false, ProblemInvalidRequest, 0},
		{"too many", "i6", `{"available": 1000000001}`, 400, false, ProblemInvalidRequest, 0},
	}
	for _, tt := range tests {
		rep := send(t, in, req{method: "PUT", path: "/inventory/sku-1", key: tt.key, body: tt.body})
		if tt.problem != "" {
			wantProblem(t, rep, tt.status, tt.problem)
		} else {
			wantStatus(t, rep, tt.status)
			if it := decode[Item](t, rep); it.ItemID != "sku-1" || it.Available != tt.want {
				t.Fatalf("%s: item %+v, want %d available", tt.name, it, tt.want)
			}
			if got := rep.header.Get(HeaderReplayed) == "true"; got != tt.replay {
				t.Fatalf("%s: replayed %v, want %v", tt.name, got, tt.replay)
			}
		}
		if got := available(t, in, "sku-1"); got != tt.want {
			t.Fatalf("%s: stock %d, want %d", tt.name, got, tt.want)
		}
	}
	wantProblem(t, send(t, in, req{method: "GET", path: "/inventory/sku-404"}), http.StatusNotFound, ProblemUnknownItem)
	long := strings.Repeat("x", 256)
	wantProblem(t, send(t, in, req{method: "PUT", path: "/inventory/" + long, key: "i9", body: `{"available": 1}`}), 400, ProblemInvalidRequest)
}
