package testserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strings"
)

// checkJSONMediaType accepts no Content-Type, application/json, or any
// +json type.
func checkJSONMediaType(ct string) *Problem {
	if ct == "" {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json")) {
		return nil
	}
	return problem(http.StatusUnsupportedMediaType, ProblemUnsupportedMedia, "Unsupported media type",
		fmt.Sprintf("the request body must be application/json, not %q", ct))
}

// decodeRequest decodes a mutation's JSON body into in (see decodeJSON) and
// validates it. It runs as the layer's Route.Check: after the layer took
// the key out of the body of a dialect that carries it there
// (Dialect.KeyField), before it looks the key up.
func (s *Server) decodeRequest(body []byte, in interface{ validate() *Problem }) *Problem {
	if p := decodeJSON(body, in); p != nil {
		return p
	}
	return in.validate()
}

// decodeJSON decodes body, which must hold exactly one JSON object with no
// fields other than those of v, into v. Its problems name the field at fault.
//
// encoding/json matches field names case-insensitively and keeps the last
// of duplicate names, so {"Amount": 5} and {"amount": -5, "amount": 5}
// would both pass for an amount of 5; checkFieldNames refuses both, since
// another reader of the same bytes might see them differently.
func decodeJSON(body []byte, v any) *Problem {
	switch string(bytes.TrimSpace(body)) {
	case "":
		return badRequest("the request body is empty; send a JSON object")
	case "null":
		return badRequest("the request body must be a JSON object, not null")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case err == nil:
	case errors.As(err, &syntax):
		return badRequest(fmt.Sprintf("malformed JSON at byte %d: %v", syntax.Offset, syntax))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("malformed JSON: the body ends in the middle of a value")
	case errors.As(err, &typ):
		if typ.Field == "" {
			return badRequest(fmt.Sprintf("the request body must be a JSON object, not %s", typ.Value))
		}
		return badRequest(fmt.Sprintf("field %q must be %s, not %s", typ.Field, jsonTypeName(typ.Type.Kind().String()), typ.Value))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return badRequest("unknown field " + strings.TrimPrefix(err.Error(), "json: unknown field "))
	default:
		return badRequest("malformed JSON: " + err.Error())
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("the request body must hold a single JSON object and nothing after it")
	}
	return checkFieldNames(body, jsonFieldNames(v))
}

// checkFieldNames walks the members of the JSON object in body, which has
// decoded already, and refuses a name that is not exactly one of names
// and a name given twice.
func checkFieldNames(body []byte, names map[string]bool) *Problem {
	dec := json.NewDecoder(bytes.NewReader(body))
	if _, err := dec.Token(); err != nil { // the opening brace
		return badRequest("malformed JSON: " + err.Error())
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return badRequest("malformed JSON: " + err.Error())
		}
		name, _ := tok.(string) // an object's member name is a string
		switch {
		case seen[name]:
			return badRequest(fmt.Sprintf("field %q is given twice", name))
		case !names[name]:
			for want := range names {
				if strings.EqualFold(want, name) {
					return badRequest(fmt.Sprintf("unknown field %q; field names are case-sensitive: %q", name, want))
				}
			}
			return badRequest(fmt.Sprintf("unknown field %q", name))
		}
		seen[name] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return badRequest("malformed JSON: " + err.Error())
		}
	}
	return nil
}

// jsonFieldNames returns the JSON names of the fields of the struct v
// points to, from their json tags.
func jsonFieldNames(v any) map[string]bool {
	t := reflect.TypeOf(v).Elem()
	names := make(map[string]bool, t.NumField())
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			names[name] = true
		}
	}
	return names
}

// jsonTypeName says a Go kind the way a JSON author thinks of it.
func jsonTypeName(kind string) string {
	switch kind {
	case "int", "int64", "int32", "uint", "uint64":
		return "an integer"
	case "string":
		return "a string"
	}
	return "a " + kind
}
