package idemserver_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/idemkit/idem/idemserver"
	"github.com/idemkit/idem/idemserver/sqlite"
)

// A handler that records an order in the transaction of its key: the
// retry gets the stored answer, and the order exists once.
func ExampleKeys_Handle() {
	dir, _ := os.MkdirTemp("", "shop")
	defer os.RemoveAll(dir)
	db, _ := sqlite.Open(filepath.Join(dir, "shop.db"))
	defer db.Close()
	db.Exec(`CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL)`)

	keys, err := idemserver.New(context.Background(), idemserver.Config{DB: db})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer keys.Close()

	orders := keys.Handle(idemserver.Route{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		item, _ := io.ReadAll(r.Body)
		res, err := idemserver.Tx(r.Context()).ExecContext(r.Context(), `INSERT INTO orders (item) VALUES (?)`, string(item))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		id, _ := res.LastInsertId()
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "order %d: %s\n", id, item)
	}))

	for range 2 {
		r := httptest.NewRequest("POST", "/orders", strings.NewReader("book"))
		r.Header.Set("Idempotency-Key", "8e03978e-40d5-43e8-bc93-6894a57f9324")
		w := httptest.NewRecorder()
		orders.ServeHTTP(w, r)
		fmt.Print(w.Code, " replayed=", w.Header().Get(idemserver.HeaderReplayed), " ", w.Body.String())
	}
	var n int
	db.QueryRow(`SELECT COUNT(*) FROM orders`).Scan(&n)
	fmt.Println("orders:", n)
	// Output:
	// 201 replayed= order 1: book
	// 201 replayed=true order 1: book
	// orders: 1
}

// A phased route around a payment gateway: the capture is a Step with a
// downstream key, the charge row commits with the answer, and the retry
// neither captures again nor records a second charge.
func ExampleStep() {
	dir, _ := os.MkdirTemp("", "pay")
	defer os.RemoveAll(dir)
	db, _ := sqlite.Open(filepath.Join(dir, "pay.db"))
	defer db.Close()
	db.Exec(`CREATE TABLE charges (capture TEXT PRIMARY KEY)`)
	keys, err := idemserver.New(context.Background(), idemserver.Config{DB: db})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer keys.Close()

	captures := 0 // the gateway, idempotent by downstream key in real life
	capture := func(ctx context.Context, downstreamKey string) ([]byte, error) {
		captures++
		return []byte(fmt.Sprintf("cap_%d", captures)), nil
	}
	pay := keys.Handle(idemserver.Route{Phased: true}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		id, err := idemserver.Step(ctx, "capture", capture)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway) // releases the claim; the retry resumes
			return
		}
		if _, err := idemserver.Tx(ctx).ExecContext(ctx, `INSERT INTO charges (capture) VALUES (?)`, string(id)); err != nil {
			idemserver.Fail(ctx, err)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "captured %s\n", id)
	}))

	for range 2 {
		r := httptest.NewRequest("POST", "/payments", strings.NewReader(`{"amount":500}`))
		r.Header.Set("Idempotency-Key", "pay-1")
		w := httptest.NewRecorder()
		pay.ServeHTTP(w, r)
		fmt.Print(w.Code, " ", w.Body.String())
	}
	fmt.Println("captures:", captures)
	// Output:
	// 201 captured cap_1
	// 201 captured cap_1
	// captures: 1
}

// Route.Check refuses a bad body in the API's own words before the key is
// looked up: the key stays free, and the corrected request runs under it.
func ExampleRoute_check() {
	dir, _ := os.MkdirTemp("", "shop")
	defer os.RemoveAll(dir)
	db, _ := sqlite.Open(filepath.Join(dir, "shop.db"))
	defer db.Close()
	keys, err := idemserver.New(context.Background(), idemserver.Config{DB: db})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer keys.Close()

	route := idemserver.Route{Check: func(w http.ResponseWriter, r *http.Request, body []byte) bool {
		if strings.HasPrefix(string(body), "-") {
			http.Error(w, "the amount must not be negative", http.StatusBadRequest)
			return false
		}
		return true
	}}
	refunds := keys.Handle(route, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		amount, _ := io.ReadAll(r.Body)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "refunded %s\n", amount)
	}))

	for _, amount := range []string{"-5", "5"} {
		r := httptest.NewRequest("POST", "/refunds", strings.NewReader(amount))
		r.Header.Set("Idempotency-Key", "refund-1")
		w := httptest.NewRecorder()
		refunds.ServeHTTP(w, r)
		fmt.Print(w.Code, " ", w.Body.String())
	}
	// Output:
	// 400 the amount must not be negative
	// 201 refunded 5
}
