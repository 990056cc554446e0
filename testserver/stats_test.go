package testserver

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
)

func TestStatsEndpoint(t *testing.T) {
	in := start(t, Config{})
	stock(t, in, "sku-1", 10)
	post := func(path, key, client, body string) reply {
		return send(t, in, req{method: "POST", path: path, key: key, client: client, body: body})
	}
	rsv := func(ref string) string { return `{"item_id":"sku-1","quantity":1,"reference":"` + ref + `"}` }
	chg := func(ref string) string {
		return `{"customer":"c","amount":5,"currency":"usd","reference":"` + ref + `"}`
	}

	post("/reservations", "k1", "a", rsv("order-1"))
	post("/reservations", "k1", "a", rsv("order-1")) // replay: no new effect
	post("/reservations", "k2", "a", rsv("order-1")) // a naive client: same operation, new key
	post("/reservations", "k3", "b", rsv("order-1")) // another client's order-1
	post("/reservations", "k4", "a", `{"item_id":"sku-1","quantity":1}`)
	post("/reservations", "k5", "a", `{"item_id":"sku-1","quantity":1}`) // no reference: never a duplicate
	post("/charges", "c1", "a", chg("inv-1"))
	post("/charges", "c2", "a", chg("inv-1"))
	post("/charges", "c3", "a", chg("inv-1"))
	post("/charges", "c4", "a", chg("inv-2"))
	post("/charges", "c4", "a", chg("inv-3")) // mismatch
	post("/charges", "c5", "a", `{}`)         // invalid

	rep := send(t, in, req{method: "GET", path: "/stats"})
	wantStatus(t, rep, http.StatusOK)
	var got map[string]any
	if err := json.Unmarshal(rep.body, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"requests":             float64(13), // 12 POSTs and the PUT
		"invalid":              float64(1),
		"replays":              float64(1),
		"conflicts":            float64(0),
		"mismatches":           float64(1),
		"resumed":              float64(0),
		"faults":               map[string]any{},
		"effects":              map[string]any{"charges": float64(4), "reservations": float64(5)},
		"gateway_captures":     float64(4),
		"duplicate_references": float64(2), // a's order-1 (twice), a's inv-1 (three times)
		"keys":                 float64(10),
		"in_flight":            float64(0),
		"abandoned":            float64(0),
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("GET /stats = %s\nwant %v", rep.body, want)
	}
}

func TestInMemoryServer(t *testing.T) {
	in := Start(t, Config{Path: ":memory:"})
	stock(t, in, "sku-1", 3)
	for i := range 3 {
		wantStatus(t, send(t, in, req{method: "POST", path: "/reservations", key: "k" + itoa(i), body: `{"item_id":"sku-1","quantity":1}`}), 201)
	}
	wantStatus(t, send(t, in, req{method: "POST", path: "/charges", key: "c", body: chargeBody}), 201)
	if st := stats(t, in); st.Effects.Reservations != 3 || st.Effects.Charges != 1 || st.GatewayCaptures != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestServerSurvivesRestart(t *testing.T) {
	path := dbPath(t)
	in := start(t, Config{Path: path})
	stock(t, in, "sku-1", 3)
	first := send(t, in, req{method: "POST", path: "/charges", key: "c", body: chargeBody})
	wantStatus(t, first, 201)
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	if err := in.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	in = start(t, Config{Path: path})
	again := send(t, in, req{method: "POST", path: "/charges", key: "c", body: chargeBody})
	if again.header.Get(HeaderReplayed) != "true" || string(again.body) != string(first.body) {
		t.Fatalf("after restart: %s, want the stored answer replayed", again.body)
	}
	if available(t, in, "sku-1") != 3 || stats(t, in).GatewayCaptures != 1 {
		t.Fatal("state lost across restart")
	}
}

func TestClosedServerAnswers503(t *testing.T) {
	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest("GET", "/stats", nil))
	wantProblem(t, reply{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}, http.StatusServiceUnavailable, ProblemUnavailable)
}

func TestSweepAndStatsAfterCloseReturnErrClosed(t *testing.T) {
	s, err := New(Config{Path: dbPath(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Sweep(context.Background()); n != 0 || !errors.Is(err, ErrClosed) {
		t.Fatalf("Sweep after Close = %d, %v; want ErrClosed", n, err)
	}
	if _, err := s.Stats(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Stats after Close: %v, want ErrClosed", err)
	}
}
