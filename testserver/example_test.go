package testserver_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/idemkit/idem/testserver"
)

// A request retried under the same key is answered from the stored
// response: one reservation, two identical answers.
func ExampleListen() {
	in, err := testserver.Listen(testserver.Config{}, "127.0.0.1:0") // in memory, on a free port
	if err != nil {
		panic(err)
	}
	defer in.Close()

	post := func(path, key, body string) *http.Response {
		req, _ := http.NewRequest("POST", in.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("X-Client-ID", "shop")
		resp, err := in.Client().Do(req)
		if err != nil {
			panic(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	put, _ := http.NewRequest("PUT", in.URL+"/inventory/sku-1", strings.NewReader(`{"available": 5}`))
	put.Header.Set("Idempotency-Key", "stock-sku-1")
	if resp, err := in.Client().Do(put); err == nil {
		resp.Body.Close()
	}

	for range 2 {
		resp := post("/reservations", "8e03978e-40d5-43e8-bc93-6894a57f9324", `{"item_id": "sku-1", "quantity": 2}`)
		fmt.Println(resp.StatusCode, "replayed:", resp.Header.Get("Idempotent-Replayed") == "true")
	}
	resp := post("/reservations", "8e03978e-40d5-43e8-bc93-6894a57f9324", `{"item_id": "sku-1", "quantity": 3}`)
	fmt.Println(resp.StatusCode, resp.Header.Get("Content-Type"))

	st, _ := in.Server.Stats(put.Context())
	fmt.Println("reservations:", st.Effects.Reservations, "replays:", st.Replays, "mismatches:", st.Mismatches)
	// Output:
	// 201 replayed: false
	// 201 replayed: true
	// 422 application/problem+json
	// reservations: 1 replays: 1 mismatches: 1
}
