package svc

type StartThingInput struct {

	// The token to enable idempotency for start requests.
	ClientToken *string

	// Unique, case-sensitive identifier that you provide to ensure the
	// idempotency of the request.
	Count *int32
}
