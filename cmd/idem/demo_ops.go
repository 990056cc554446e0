package main

// The demo's batch: card charges for invoices, the same list in every
// process and for both clients, so that the server's database can count
// the effects of each operation.

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// demoClientID is the X-Client-ID both clients of the demo send: the
// server's key scope and the client the database rows belong to.
const demoClientID = "idem-demo"

// demoCharge is one operation of the demo's batch: an invoice to charge.
type demoCharge struct {
	ID     string // the operation ID and the charge's reference: "invoice-0001"
	Amount int64  // in cents
	Body   []byte // the JSON body of POST /charges
}

// demoCharges returns the n operations of the demo's batch. The operation
// ID doubles as the charge's reference, which the server stores with each
// charge: a reference with two charges is an invoice charged twice.
func demoCharges(n int) []demoCharge {
	width := max(4, len(strconv.Itoa(n)))
	charges := make([]demoCharge, n)
	for i := range charges {
		id := fmt.Sprintf("invoice-%0*d", width, i+1)
		amount := int64(500 + (i*7919)%9500)    // $5.00 to $99.99, spread
		body, _ := json.Marshal(map[string]any{ // cannot fail: strings and an int
			"customer":  fmt.Sprintf("cus_%03d", i%97+1),
			"amount":    amount,
			"currency":  "usd",
			"reference": id,
		})
		charges[i] = demoCharge{ID: id, Amount: amount, Body: body}
	}
	return charges
}
