package chaos_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"

	"github.com/idemkit/idem/testserver/chaos"
)

// A proxy that loses every response to a mutating request: the server
// applies the charge, the client only sees the connection close. Reads pass
// through, so the test can ask the server what really happened.
func Example() {
	var charges atomic.Int64
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			charges.Add(1)
			w.WriteHeader(http.StatusCreated)
			return
		}
		fmt.Fprintf(w, "charges=%d", charges.Load())
	}))
	defer server.Close()
	upstream, err := url.Parse(server.URL)
	if err != nil {
		fmt.Println(err)
		return
	}

	proxy, err := chaos.Listen(chaos.Config{
		Upstream: upstream,
		Seed:     1,
		Rate:     1,
		Kinds:    []chaos.Kind{chaos.DropAfterCommit},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer proxy.Close()

	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport}

	req, _ := http.NewRequest(http.MethodPost, proxy.URL+"/charges", strings.NewReader(`{"amount":1200}`))
	req.Header.Set("Idempotency-Key", "8e0f3c52-1d2b-4c8e-9a57-0b6f2d7e4a10")
	_, err = client.Do(req)
	fmt.Println("POST /charges: EOF:", errors.Is(err, io.EOF))

	resp, err := client.Get(proxy.URL + "/stats")
	if err != nil {
		fmt.Println(err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println("GET /stats:", resp.Status, string(body))

	fmt.Println(proxy.Counts())
	// Output:
	// POST /charges: EOF: true
	// GET /stats: 200 OK charges=1
	// requests=2 forwarded=2 upstream-errors=0 faults=1 (drop-after-commit=1)
}
