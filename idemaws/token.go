package idemaws

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sync"

	"github.com/aws/smithy-go/middleware"
	"github.com/idemkit/idem"
)

// tokenFields remembers, per input type, which field holds the client
// token.
type tokenFields struct{ m sync.Map } // reflect.Type → int

// field returns the index of the client token field of input, a pointer to
// an SDK input struct. The SDK knows which member is the token (its model
// marks it), and its token middleware fills that member when it is unset;
// so the field is found by letting that middleware fill a zero input of
// the same type, whatever the member's name (ClientToken,
// ClientRequestToken, IdempotencyToken, CreationToken, …).
func (f *tokenFields) field(ctx context.Context, sdk middleware.InitializeMiddleware, input any) (int, error) {
	v := reflect.ValueOf(input)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return 0, fmt.Errorf("idemaws: %w: the input is a %T, not a pointer to an SDK input struct", idem.ErrInvalidRequest, input)
	}
	t := v.Elem().Type()
	if i, ok := f.m.Load(t); ok {
		return i.(int), nil
	}
	probe := reflect.New(t)
	_, _, err := sdk.HandleInitialize(ctx, middleware.InitializeInput{Parameters: probe.Interface()},
		middleware.InitializeHandlerFunc(func(context.Context, middleware.InitializeInput) (middleware.InitializeOutput, middleware.Metadata, error) {
			return middleware.InitializeOutput{}, middleware.Metadata{}, nil
		}))
	if err != nil {
		return 0, fmt.Errorf("idemaws: finding the client token of %s: %w", t, err)
	}
	found := -1
	for i := range t.NumField() {
		if isStringPointer(t.Field(i).Type) && !probe.Elem().Field(i).IsNil() {
			if found >= 0 {
				return 0, fmt.Errorf("idemaws: finding the client token of %s: the SDK fills both %s and %s",
					t, t.Field(found).Name, t.Field(i).Name)
			}
			found = i
		}
	}
	if found < 0 {
		return 0, fmt.Errorf("idemaws: %w: the SDK's token middleware filled no field of %s", ErrNoClientToken, t)
	}
	f.m.Store(t, found)
	return found, nil
}

func isStringPointer(t reflect.Type) bool {
	return t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.String
}

// token returns the client token input carries in field i, "" if none.
func token(input any, i int) string {
	p := reflect.ValueOf(input).Elem().Field(i)
	if p.IsNil() {
		return ""
	}
	return p.Elem().String()
}

// setToken sets the client token of input, in field i, to key.
func setToken(input any, i int, key string) {
	f := reflect.ValueOf(input).Elem().Field(i)
	p := reflect.New(f.Type().Elem())
	p.Elem().SetString(key)
	f.Set(p)
}

// fingerprint identifies what an operation asks of AWS: what it is (the
// service and the operation) and the input without its client token. The input is written
// as JSON (encoding/json writes a map's keys sorted, so the same input has
// the same fingerprint in every process); the SDK's own serialization
// would not do, as it writes maps in Go's random order.
func fingerprint(what string, input any, i int) (idem.Fingerprint, error) {
	v := reflect.ValueOf(input).Elem()
	c := reflect.New(v.Type())
	c.Elem().Set(v)
	c.Elem().Field(i).SetZero()
	b, err := json.Marshal(c.Interface())
	if err != nil {
		return idem.Fingerprint{}, fmt.Errorf("idemaws: %w: fingerprinting the input of %s: %w", idem.ErrInvalidRequest, what, err)
	}
	return idem.FingerprintOf("AWS", what, b), nil
}
