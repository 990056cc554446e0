package idemaws

import (
	"context"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/smithy-go/middleware"
	"github.com/idemkit/idem"
	"github.com/idemkit/idem/journal"
)

// tokenFields remembers, per input type, where the token member is.
type tokenFields struct {
	paths  sync.Map // fieldKey → tokenPath
	probed sync.Map // reflect.Type → string, the member the SDK fills
}

type fieldKey struct {
	t      reflect.Type
	member string
}

// path returns where member is in input, a pointer to an SDK input struct.
func (f *tokenFields) path(input any, member string) (tokenPath, error) {
	t, err := inputType(input)
	if err != nil {
		return nil, err
	}
	k := fieldKey{t, member}
	if p, ok := f.paths.Load(k); ok {
		return p.(tokenPath), nil
	}
	p, err := fieldPath(t, member)
	if err != nil {
		return nil, err
	}
	f.paths.Store(k, p)
	return p, nil
}

func inputType(input any) (reflect.Type, error) {
	v := reflect.ValueOf(input)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("idemaws: %w: the input is a %T, not a pointer to an SDK input struct", idem.ErrInvalidRequest, input)
	}
	return v.Elem().Type(), nil
}

// probe returns the member of input the SDK's token middleware fills: it
// lets that middleware fill a zero input of the same type, whatever the
// member's name (ClientToken, ClientRequestToken, IdempotencyToken, …).
func (f *tokenFields) probe(ctx context.Context, sdk middleware.InitializeMiddleware, input any) (string, error) {
	t, err := inputType(input)
	if err != nil {
		return "", err
	}
	if name, ok := f.probed.Load(t); ok {
		return name.(string), nil
	}
	probe := reflect.New(t)
	_, _, err = sdk.HandleInitialize(ctx, middleware.InitializeInput{Parameters: probe.Interface()},
		middleware.InitializeHandlerFunc(func(context.Context, middleware.InitializeInput) (middleware.InitializeOutput, middleware.Metadata, error) {
			return middleware.InitializeOutput{}, middleware.Metadata{}, nil
		}))
	if err != nil {
		return "", fmt.Errorf("idemaws: finding the client token of %s: %w", t, err)
	}
	found := -1
	for i := range t.NumField() {
		if isStringPointer(t.Field(i).Type) && !probe.Elem().Field(i).IsNil() {
			if found >= 0 {
				return "", fmt.Errorf("idemaws: finding the client token of %s: the SDK fills both %s and %s",
					t, t.Field(found).Name, t.Field(i).Name)
			}
			found = i
		}
	}
	if found < 0 {
		return "", fmt.Errorf("idemaws: %w: the SDK's token middleware filled no field of %s", ErrNoClientToken, t)
	}
	name := t.Field(found).Name
	f.probed.Store(t, name)
	return name, nil
}

func isStringPointer(t reflect.Type) bool {
	return t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.String
}

// token returns the client token input carries at p, "" if none.
func token(input any, p tokenPath) string {
	f, ok := p.field(input)
	if !ok || f.IsNil() {
		return ""
	}
	return f.Elem().String()
}

// setToken sets the client token of input, at p, to key; clearToken
// leaves it unset. The structure holding it must not be nil.
func setToken(input any, p tokenPath, key string) {
	f, _ := p.field(input)
	v := reflect.New(f.Type().Elem())
	v.Elem().SetString(key)
	f.Set(v)
}

func clearToken(input any, p tokenPath) {
	f, _ := p.field(input)
	f.SetZero()
}

// fingerprint identifies what an operation asks of AWS: what it is (the
// service, the operation and the region) and its input without its client
// token, written canonically (canonical): the same input has the same
// fingerprint in every process and under any later version of the SDK.
func fingerprint(what string, input any, p tokenPath) (journal.Fingerprint, error) {
	c := withoutToken(reflect.ValueOf(input).Elem(), p)
	var b []byte
	b, err := canonical(b, c)
	if err != nil {
		return journal.Fingerprint{}, fmt.Errorf("idemaws: %w: fingerprinting the input of %s: %w", idem.ErrInvalidRequest, what, err)
	}
	return journal.FingerprintOf("AWS", what, b), nil
}

// withoutToken returns a copy of the struct v with the field at p zero,
// the structures on its way copied, v left as it was.
func withoutToken(v reflect.Value, p tokenPath) reflect.Value {
	c := reflect.New(v.Type()).Elem()
	c.Set(v)
	f := c.Field(p[0])
	if len(p) == 1 {
		f.SetZero()
	} else if !f.IsNil() {
		inner := withoutToken(f.Elem(), p[1:])
		f.Set(inner.Addr())
	}
	return c
}

// canonical appends v written so that two inputs that ask the same of AWS
// write the same bytes, and two that ask differently do not:
//
//   - a field that is nil or zero is left out, as the SDK leaves it out of
//     the request, so that a field a later SDK adds changes nothing;
//   - fields go by name, map keys sorted;
//   - a value behind an interface (a union member, a document) is written
//     with its type's name, so that two members with one value differ;
//   - a time is its instant (Unix nanoseconds), whatever its zone;
//   - floats are written as text, NaN and infinities included.
//
// A stream (an io.Reader) cannot be fingerprinted, and is refused.
func canonical(b []byte, v reflect.Value) ([]byte, error) {
	if v.Type() == timeType {
		return strconv.AppendInt(append(b, 't'), v.Interface().(time.Time).UnixNano(), 10), nil
	}
	if v.Kind() != reflect.Interface && v.Kind() != reflect.Pointer && v.Type().Implements(readerType) {
		return nil, fmt.Errorf("a %s is a stream", v.Type())
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.Type().Implements(readerType) {
			return nil, fmt.Errorf("a %s is a stream", v.Type())
		}
		return canonical(b, v.Elem())
	case reflect.Interface:
		e := v.Elem()
		if e.Type().Implements(readerType) {
			return nil, fmt.Errorf("a %s is a stream", e.Type())
		}
		if d, ok := e.Interface().(interface{ MarshalSmithyDocument() ([]byte, error) }); ok {
			doc, err := d.MarshalSmithyDocument()
			if err != nil {
				return nil, err
			}
			return appendString(append(b, 'd'), string(doc)), nil
		}
		b = appendString(append(b, 'i'), e.Type().String())
		return canonical(b, e)
	case reflect.Struct:
		t := v.Type()
		names := make([]string, 0, t.NumField())
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() && !v.Field(i).IsZero() {
				names = append(names, f.Name)
			}
		}
		slices.Sort(names)
		b = strconv.AppendInt(append(b, '{'), int64(len(names)), 10)
		for _, name := range names {
			var err error
			if b, err = canonical(appendString(b, name), v.FieldByName(name)); err != nil {
				return nil, err
			}
		}
		return b, nil
	case reflect.Map:
		keys := v.MapKeys()
		slices.SortFunc(keys, func(x, y reflect.Value) int { return strings.Compare(fmt.Sprint(x), fmt.Sprint(y)) })
		b = strconv.AppendInt(append(b, 'm'), int64(len(keys)), 10)
		for _, k := range keys {
			var err error
			if b, err = canonical(appendString(b, fmt.Sprint(k)), v.MapIndex(k)); err != nil {
				return nil, err
			}
		}
		return b, nil
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return appendString(append(b, 'y'), string(v.Bytes())), nil
		}
		b = strconv.AppendInt(append(b, '['), int64(v.Len()), 10)
		for i := range v.Len() {
			var err error
			if b, err = canonical(b, v.Index(i)); err != nil {
				return nil, err
			}
		}
		return b, nil
	case reflect.String:
		return appendString(append(b, 's'), v.String()), nil
	case reflect.Bool:
		return strconv.AppendBool(append(b, 'b'), v.Bool()), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.AppendInt(append(b, 'n'), v.Int(), 10), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return strconv.AppendUint(append(b, 'n'), v.Uint(), 10), nil
	case reflect.Float32, reflect.Float64:
		return strconv.AppendFloat(append(b, 'f'), v.Float(), 'g', -1, 64), nil
	}
	return nil, fmt.Errorf("a %s cannot be fingerprinted", v.Type())
}

// appendString appends s with its length in front, so that no two
// sequences of strings write the same bytes.
func appendString(b []byte, s string) []byte {
	return append(append(strconv.AppendInt(b, int64(len(s)), 10), ':'), s...)
}

var (
	timeType   = reflect.TypeFor[time.Time]()
	readerType = reflect.TypeFor[io.Reader]()
)
