package svc

import (
	"context"

	"github.com/aws/smithy-go/middleware"
)

type CreateThingInput struct {

	// The name.
	Name *string

	// A token.
	Token *string

	noSmithyDocumentSerde
}

type validateOpCreateThing struct{}

func (m *validateOpCreateThing) HandleInitialize(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (
	out middleware.InitializeOutput, metadata middleware.Metadata, err error,
) {
	input, _ := in.Parameters.(*CreateThingInput)
	input.Name = nil
	return next.HandleInitialize(ctx, in)
}

type idempotencyToken_initializeOpCreateThing struct{}

func (m *idempotencyToken_initializeOpCreateThing) HandleInitialize(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (
	out middleware.InitializeOutput, metadata middleware.Metadata, err error,
) {
	input, ok := in.Parameters.(*CreateThingInput)
	if !ok {
		return out, metadata, nil
	}
	if input.Token == nil {
		t := "t"
		input.Token = &t
	}
	return next.HandleInitialize(ctx, in)
}
