package testserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// response is an answer as it is stored under a key and replayed: status,
// the headers that belong to the answer (Content-Type, Location), and body.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

// storedHeaders are the response headers kept with a key. Others (Date,
// Content-Length) belong to the exchange, not to the answer.
var storedHeaders = []string{"Content-Type", "Location"}

func jsonResponse(status int, v any) (response, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return response{}, fmt.Errorf("testserver: encoding response: %w", err)
	}
	return response{
		Status: status,
		Header: http.Header{"Content-Type": {"application/json"}},
		Body:   append(body, '\n'),
	}, nil
}

// encodeHeader returns the stored headers of r as JSON, for the database.
func (r response) encodeHeader() string {
	h := map[string]string{}
	for _, k := range storedHeaders {
		if v := r.Header.Get(k); v != "" {
			h[k] = v
		}
	}
	b, _ := json.Marshal(h) // a map of strings cannot fail
	return string(b)
}

func decodeHeader(s string) (http.Header, error) {
	var m map[string]string
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, fmt.Errorf("testserver: stored response header: %w", err)
	}
	h := http.Header{}
	for k, v := range m {
		h.Set(k, v)
	}
	return h, nil
}

// write sends r; replayed marks it as an answer from a stored key.
func (r response) write(w http.ResponseWriter, replayed bool) {
	h := w.Header()
	for k, v := range r.Header {
		h[k] = v
	}
	if replayed {
		h.Set(HeaderReplayed, "true")
	}
	h.Set("Content-Length", strconv.Itoa(len(r.Body)))
	w.WriteHeader(r.Status)
	w.Write(r.Body)
}

// writeProblem sends p (never stored).
func writeProblem(w http.ResponseWriter, p *Problem) {
	p.response().write(w, false)
}
