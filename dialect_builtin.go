package idem

import (
	"net/http"
	"time"
)

// The built-in dialects, as read from each provider's documentation when
// they were written. The exported functions (IETFDraft, Stripe…) return
// copies of these values; here is what each follows, and why each signal reads as it does.
var (
	// ietfDraft is the IETF httpapi idempotency-key draft
	// (draft-ietf-httpapi-idempotency-key-header-07): the key as a
	// structured-field string in Idempotency-Key, 409 while a request with
	// the key is processed, 422 for the key reused with another payload.
	// The draft leaves retention to the server and defines no replay
	// signal. https://datatracker.ietf.org/doc/draft-ietf-httpapi-idempotency-key-header/
	ietfDraft = Dialect{
		Name: "ietf", KeyHeader: "Idempotency-Key", QuotedKey: true,
		Signals: []Signal{
			{Status: http.StatusConflict, Answer: AnswerInFlight},
			{Status: http.StatusUnprocessableEntity, Answer: AnswerKeyReused},
		},
	}

	// stripe follows https://docs.stripe.com/api/idempotent_requests and
	// https://docs.stripe.com/error-codes: keys of up to 255 characters
	// in Idempotency-Key, kept at least 24 hours; a stored answer replayed
	// with Idempotent-Replayed: true; 409 idempotency_key_in_use while a
	// request with the key runs; 400 of type idempotency_error for the
	// key reused with other parameters.
	stripe = Dialect{
		Name: "stripe", KeyHeader: "Idempotency-Key", MaxKeyLength: 255, Retention: 24 * time.Hour,
		Signals: []Signal{
			{Header: "Idempotent-Replayed", HeaderValue: "true", Answer: AnswerReplay},
			{Status: http.StatusConflict, Field: "error.code", Value: "idempotency_key_in_use", Answer: AnswerInFlight},
			{Status: http.StatusBadRequest, Field: "error.type", Value: "idempotency_error", Answer: AnswerKeyReused},
		},
	}

	// adyen follows https://docs.adyen.com/development-resources/api-idempotency:
	// keys of up to 64 characters in Idempotency-Key, valid at least 31
	// days; the first answer returned again for a key already processed.
	// Its errorCode 704, "request already processed or in progress", may
	// mean a payment still being authorized, so it is read in flight,
	// never as a refusal.
	adyen = Dialect{
		Name: "adyen", KeyHeader: "Idempotency-Key", MaxKeyLength: 64, Retention: 31 * 24 * time.Hour,
		Signals: []Signal{
			{Field: "errorCode", Value: "704", Answer: AnswerInFlight},
		},
	}

	// payPal follows https://developer.paypal.com/reference/guidelines/idempotency
	// and the Orders v2 reference (https://developer.paypal.com/docs/api/orders/v2/):
	// keys of up to 108 characters in PayPal-Request-Id, kept 6 hours by
	// the Orders API (up to 72 on request; other APIs differ); the latest
	// state of the first request returned for a key it holds; the error
	// DUPLICATE_REQUEST_ID for a key already used by another request.
	payPal = Dialect{
		Name: "paypal", KeyHeader: "PayPal-Request-Id", MaxKeyLength: 108, Retention: 6 * time.Hour,
		Signals: []Signal{
			{Field: "name", Value: "DUPLICATE_REQUEST_ID", Answer: AnswerKeyReused},
		},
	}

	// square follows https://developer.squareup.com/docs/working-with-apis/idempotency
	// and the Payments API reference: the key in the idempotency_key field
	// of the JSON body, of up to 45 characters (CreatePayment's bound, the
	// tightest); the first answer returned for the same request; the error
	// code IDEMPOTENCY_KEY_REUSED for the key reused with another request.
	// Square publishes no retention, so keys take DefaultKeyTTL.
	square = Dialect{
		Name: "square", KeyField: "idempotency_key", MaxKeyLength: 45,
		Signals: []Signal{
			{Field: "errors.code", Value: "IDEMPOTENCY_KEY_REUSED", Answer: AnswerKeyReused},
		},
	}

	// awsCloudControl is an AWS API with a ClientToken in its JSON body,
	// the AWS Cloud Control API
	// (https://docs.aws.amazon.com/cloudcontrolapi/latest/userguide/resource-operations.html#resource-operations-idempotency):
	// tokens of up to 128 characters of [-A-Za-z0-9+/=], valid 36 hours
	// once used; ClientTokenConflictException (or, in other AWS APIs,
	// IdempotentParameterMismatch) for a token reused with other
	// parameters. Other ClientToken APIs keep tokens from minutes to days:
	// copy this dialect with their Retention.
	awsCloudControl = Dialect{
		Name: "aws-cloudcontrol", KeyField: "ClientToken", MaxKeyLength: 128,
		KeyChars:  "-ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=",
		Retention: 36 * time.Hour,
		Signals: []Signal{
			{Field: "__type", Value: "*ClientTokenConflictException", Answer: AnswerKeyReused},
			{Field: "__type", Value: "*IdempotentParameterMismatch*", Answer: AnswerKeyReused},
			{Header: "X-Amzn-Errortype", HeaderValue: "ClientTokenConflictException*", Answer: AnswerKeyReused},
			{Header: "X-Amzn-Errortype", HeaderValue: "IdempotentParameterMismatch*", Answer: AnswerKeyReused},
		},
	}

	// checkoutCom follows https://www.checkout.com/docs/developer-resources/api/idempotency
	// and its support note on 409: the key in Cko-Idempotency-Key, kept 24
	// hours; a concurrent request with the key gets 409 (429 before, which
	// now means rate limiting only; both are retried); only a processed
	// request's answer is kept, so a 4xx applied nothing.
	checkoutCom = Dialect{
		Name: "checkout", KeyHeader: "Cko-Idempotency-Key", Retention: 24 * time.Hour,
		Signals: []Signal{
			{Status: http.StatusConflict, Answer: AnswerInFlight},
			{Status: http.StatusTooManyRequests, Answer: AnswerInFlight},
		},
	}

	// mercadoPago follows
	// https://www.mercadopago.com.br/developers/en/docs/wallet-connect/payment-flow/idempotency:
	// the key in X-Idempotency-Key; the payment returned for a key that
	// created one; 409 while the payment is being processed or once it is
	// paid, which cannot be told apart, so it is read in flight. It
	// publishes no retention.
	mercadoPago = Dialect{
		Name: "mercadopago", KeyHeader: "X-Idempotency-Key",
		Signals: []Signal{
			{Status: http.StatusConflict, Answer: AnswerInFlight},
		},
	}

	// primer follows https://primer.io/docs/api/introduction/idempotency-key:
	// the key in X-Idempotency-Key; a request whose key was already
	// processed is not replayed but answered 409 IdempotencyKeyAlreadyExists
	// (400 TransactionRequestIdempotencyKeyAlreadyExists in earlier
	// versions) with the payment's ID: done, and flagged. It publishes no
	// retention.
	primer = Dialect{
		Name: "primer", KeyHeader: "X-Idempotency-Key",
		Signals: []Signal{
			{Field: "error.errorId", Value: "IdempotencyKeyAlreadyExists", Answer: AnswerApplied},
			{Field: "error.errorId", Value: "TransactionRequestIdempotencyKeyAlreadyExists", Answer: AnswerApplied},
		},
	}

	// picPay follows
	// https://picpay.github.io/picpay-docs-digital-payments/en/one-click/guides/idempotency-key:
	// the key in x-idempotency-key; the first result repeated for a key
	// processed; 208 Already Reported while a payment or refund with the
	// key is processing, which idem would otherwise take for done. It
	// publishes no retention.
	picPay = Dialect{
		Name: "picpay", KeyHeader: "X-Idempotency-Key",
		Signals: []Signal{
			{Status: http.StatusAlreadyReported, Answer: AnswerInFlight},
		},
	}
)
