package svc

type RequestThingInput struct {

	// Unique, case-sensitive identifier that you provide to ensure the
	// idempotency of the request. Client tokens time out after eight hours.
	//
	// Constraints: Maximum 40 ASCII characters
	ClientToken *string

	noSmithyDocumentSerde
}

type RequestThingOutput struct {

	// Unique, case-sensitive identifier that you provide to ensure the
	// idempotency of the request.
	ClientToken *string
}
