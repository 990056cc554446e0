package idem

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Dialect says how an API speaks idempotency: where the key goes, which
// keys it accepts, how long it keeps them, and how to read its answers.
// Config.Dialect selects one.
//
// The zero Dialect is the IETF idempotency-key draft with Stripe's
// Idempotent-Replayed header: the bare key in Idempotency-Key, no key limits,
// and the retry rule for every answer. To adapt a built-in dialect, change
// the value a function such as Stripe returns: it is the caller's own.
type Dialect struct {
	// Name names the dialect in errors and for idem send --dialect.
	Name string

	// KeyHeader is the request header that carries the key, unless
	// KeyField is set. Default "Idempotency-Key".
	KeyHeader string
	// QuotedKey sends the key as a structured-field string ("…").
	QuotedKey bool
	// KeyField, when set, is the top-level field of the JSON object body
	// that carries the key, in place of a header. The field is inserted
	// first; the fingerprint covers the caller's body without it.
	KeyField string

	// MaxKeyLength is the longest key, in bytes, the API accepts; 0 for
	// no limit. New refuses limits a minted key would not fit.
	MaxKeyLength int
	// KeyChars, when set, is the bytes a key may be made of.
	KeyChars string

	// Retention is how long the API keeps a key; zero if unpublished.
	Retention time.Duration

	// Signals are the API's answers, tried in order after the replay signals;
	// an answer that matches none is read by the retry rule.
	Signals []Signal
}

// Answer is what an API's answer says about its key: what a Signal means.
type Answer uint8

// The answers a Signal can mean.
const (
	AnswerInFlight  Answer = iota + 1 // the key is being processed: retried, unknown when retrying stops
	AnswerReplay                      // the stored answer, replayed: read by its status; tried first
	AnswerApplied                     // applied before, said without a replay: done (AlreadyApplied)
	AnswerKeyReused                   // the key is held for another request: unknown (ErrKeyReused)
	AnswerRefused                     // nothing applied: rejected, whatever the status
)

// String returns "in flight", "replay", "applied", "key reused" or
// "refused".
func (a Answer) String() string {
	switch a {
	case AnswerInFlight:
		return "in flight"
	case AnswerReplay:
		return "replay"
	case AnswerApplied:
		return "applied"
	case AnswerKeyReused:
		return "key reused"
	case AnswerRefused:
		return "refused"
	}
	return fmt.Sprintf("Answer(%d)", uint8(a))
}

// Signal is one answer of a dialect: a response that matches every
// condition set in it means Answer. At least one condition must be set.
// A value (HeaderValue, Value) matches text equal to it; a * at its start or
// end matches any text there.
type Signal struct {
	// Status is the response status code; 0 for any.
	Status int
	// Header names a response header field that must be present; with
	// HeaderValue, one of its values must match, ignoring case and space.
	Header, HeaderValue string
	// Field is a dotted path into a JSON response body ("error.code"); an
	// array matches when one element does. Its scalar value must match Value.
	// A body too long or not JSON matches no Field.
	Field, Value string
	// Answer is what a matching response means.
	Answer Answer
}

// AlreadyApplied reports whether resp, returned by a Client, is an
// AnswerApplied, live or recorded: the operation is done, whatever resp's
// status.
func AlreadyApplied(resp *http.Response) bool {
	return resp != nil && resp.Request != nil && resp.Request.Context().Value(appliedKey{}) != nil
}

// appliedKey marks the context of the Request of a response that is an
// AnswerApplied. A mark in the response's header would reach the caller as
// a field the server never sent.
type appliedKey struct{}

// markApplied marks resp as an AnswerApplied (see AlreadyApplied).
func markApplied(resp *http.Response) {
	req := resp.Request
	if req == nil {
		req = new(http.Request)
	}
	resp.Request = req.WithContext(context.WithValue(req.Context(), appliedKey{}, true))
}

// The built-in dialects, as read from the documentation each cites (see the
// source). Each call returns a fresh value, its Signals a slice of its own.

// IETFDraft is the IETF draft -07: a quoted Idempotency-Key, 409 in flight.
func IETFDraft() Dialect { return ietfDraft.clone() }

// Stripe is Stripe's: Idempotency-Key, kept 24h, replays flagged.
func Stripe() Dialect { return stripe.clone() }

// Adyen is Adyen's: Idempotency-Key, kept 31 days.
func Adyen() Dialect { return adyen.clone() }

// PayPal is PayPal's: PayPal-Request-Id, kept 6h.
func PayPal() Dialect { return payPal.clone() }

// Square is Square's: the idempotency_key field of the body.
func Square() Dialect { return square.clone() }

// AWSCloudControl is Cloud Control's: the ClientToken field, kept 36h.
func AWSCloudControl() Dialect { return awsCloudControl.clone() }

// CheckoutCom is Checkout.com's: Cko-Idempotency-Key, kept 24h.
func CheckoutCom() Dialect { return checkoutCom.clone() }

// MercadoPago is Mercado Pago's: X-Idempotency-Key, 409 in flight.
func MercadoPago() Dialect { return mercadoPago.clone() }

// Primer is Primer's: X-Idempotency-Key, a processed key read as applied.
func Primer() Dialect { return primer.clone() }

// PicPay is PicPay's: x-idempotency-key, 208 in flight.
func PicPay() Dialect { return picPay.clone() }

// clone returns d with Signals of its own.
func (d Dialect) clone() Dialect {
	d.Signals = slices.Clone(d.Signals)
	return d
}

// builtinDialects are the built-in dialects, in the order Dialects returns
// them.
var builtinDialects = []*Dialect{&ietfDraft, &stripe, &adyen, &payPal, &square, &awsCloudControl, &checkoutCom, &mercadoPago, &primer, &picPay}

// Dialects returns the built-in dialects, in a new slice.
func Dialects() []Dialect {
	out := make([]Dialect, len(builtinDialects))
	for i, d := range builtinDialects {
		out[i] = d.clone()
	}
	return out
}

// DialectNamed returns the built-in dialect of that name, ignoring case.
func DialectNamed(name string) (Dialect, bool) {
	for _, d := range builtinDialects {
		if strings.EqualFold(d.Name, name) {
			return d.clone(), true
		}
	}
	return Dialect{}, false
}
