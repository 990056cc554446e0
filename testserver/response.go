package testserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/idemkit/idem/idemserver"
)

// response is an answer: status, headers and body. It is
// idemserver.Response, the form the layer stores and replays answers in.
type response idemserver.Response

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
