// Package stacks shows idemserver under the database layers Go services
// use, each a handler of POST /orders that stores one order: sqlc's
// pgx/v5 code on a pgxpool store, sqlc's database/sql code on a *sql.DB,
// and GORM opened on the request's transaction. Its tests run each
// against PostgreSQL. It is a module of its own, so that the root module
// requires none of them.
package stacks

//go:generate go run github.com/sqlc-dev/sqlc/cmd/sqlc@v1.31.1 generate

import (
	"encoding/json"
	"net/http"

	"github.com/idemkit/idem/examples/stacks/pgxdb"
	"github.com/idemkit/idem/examples/stacks/sqldb"
	"github.com/idemkit/idem/idemserver"
	"github.com/idemkit/idem/idemserver/postgres"
	gormpg "gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// orderIn is the body of POST /orders.
type orderIn struct {
	Item     string `json:"item"`
	Quantity int32  `json:"quantity"`
}

// CheckOrder is the routes' Route.Check: a body that is no order gets 400
// before its key is looked up, and the key stays free for a good one.
func CheckOrder(w http.ResponseWriter, r *http.Request, body []byte) bool {
	var in orderIn
	if err := json.Unmarshal(body, &in); err != nil || in.Item == "" || in.Quantity <= 0 {
		http.Error(w, "want {\"item\": a name, \"quantity\": a positive number}", http.StatusBadRequest)
		return false
	}
	return true
}

// decode reads the order CheckOrder let through.
func decode(r *http.Request) orderIn {
	var in orderIn
	json.NewDecoder(r.Body).Decode(&in) // checked by CheckOrder
	return in
}

func answer(w http.ResponseWriter, order any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(order)
}

// PgxOrders stores the order with sqlc's pgx/v5 code, on the request's
// pgx.Tx (a Keys on postgres.Pool).
func PgxOrders(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	in := decode(r)
	order, err := pgxdb.New(postgres.Tx(ctx)).CreateOrder(ctx, pgxdb.CreateOrderParams{Item: in.Item, Quantity: in.Quantity})
	if err != nil {
		idemserver.Fail(ctx, err)
		return
	}
	answer(w, order)
}

// SQLOrders stores the order with sqlc's database/sql code, on the
// request's *sql.Tx (a Keys on a *sql.DB).
func SQLOrders(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	in := decode(r)
	order, err := sqldb.New(idemserver.Tx(ctx)).CreateOrder(ctx, sqldb.CreateOrderParams{Item: in.Item, Quantity: in.Quantity})
	if err != nil {
		idemserver.Fail(ctx, err)
		return
	}
	answer(w, order)
}

// Order is the GORM model of a row of orders.
type Order struct {
	ID       int64  `gorm:"primaryKey" json:"id"`
	Item     string `json:"item"`
	Quantity int32  `json:"quantity"`
}

// GormOrders stores the order with GORM, opened on the request's *sql.Tx
// (a Keys on a *sql.DB): GORM must not begin transactions of its own
// (SkipDefaultTransaction), since the request's is the one that commits.
func GormOrders(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	in := decode(r)
	db, err := gorm.Open(gormpg.New(gormpg.Config{Conn: idemserver.Tx(ctx)}), &gorm.Config{SkipDefaultTransaction: true})
	if err != nil {
		idemserver.Fail(ctx, err)
		return
	}
	order := Order{Item: in.Item, Quantity: in.Quantity}
	if err := db.WithContext(ctx).Create(&order).Error; err != nil {
		idemserver.Fail(ctx, err)
		return
	}
	answer(w, order)
}
