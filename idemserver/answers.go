package idemserver

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Response is an answer as it is stored under a key and replayed.
type Response struct {
	Status int
	Header http.Header // the stored headers only: Content-Type, Location, Answers.StoredHeaders
	Body   []byte
}

// Answers writes the answers the layer gives itself, in the words of an
// API. A nil field writes the default: an RFC 9457 problem document
// (application/problem+json) with the status of the IETF draft.
type Answers struct {
	MissingKey func(w http.ResponseWriter, r *http.Request, detail string) // default 400
	InvalidKey func(w http.ResponseWriter, r *http.Request, detail string) // default 400
	Mismatch   func(w http.ResponseWriter, r *http.Request, detail string) // default 422
	InFlight   func(w http.ResponseWriter, r *http.Request, detail string) // default 409; Retry-After is set before

	// Replay writes a stored answer; default: the stored status, headers
	// and body, with Idempotent-Replayed: true.
	Replay func(w http.ResponseWriter, r *http.Request, stored Response)

	// Refused writes a refusal made before any look-up (status 400, 401,
	// 408, 413); Failed one made after (500, or 503 with Retry-After set
	// before). Default: a problem document.
	Refused func(w http.ResponseWriter, r *http.Request, status int, detail string)
	Failed  func(w http.ResponseWriter, r *http.Request, status int, detail string)

	// StoredHeaders are response headers stored and replayed besides
	// Content-Type and Location.
	StoredHeaders []string
}

// ProblemTypeBase prefixes the type of the problem documents the layer
// writes by default.
const ProblemTypeBase = "https://idemkit.github.io/problems/"

// problemDoc is an RFC 9457 problem document.
type problemDoc struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// writeProblem writes a problem document.
func writeProblem(w http.ResponseWriter, status int, typ, title, detail string) {
	body, _ := json.Marshal(problemDoc{Type: ProblemTypeBase + typ, Title: title, Status: status, Detail: detail}) // cannot fail
	body = append(body, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	w.Write(body)
}

// problemOf names the default problem of a status the layer writes.
func problemOf(status int) (typ, title string) {
	switch status {
	case http.StatusUnauthorized:
		return "unauthorized", "Unauthorized"
	case http.StatusRequestTimeout:
		return "request-timeout", "Request body too slow"
	case http.StatusRequestEntityTooLarge:
		return "body-too-large", "Request body too large"
	case http.StatusUnsupportedMediaType:
		return "unsupported-media-type", "Unsupported media type"
	case http.StatusServiceUnavailable:
		return "unavailable", "Service unavailable"
	case http.StatusInternalServerError:
		return "internal-error", "Internal error"
	}
	return "invalid-request", "Invalid request"
}

func (a *Answers) missingKey(w http.ResponseWriter, r *http.Request, detail string) {
	if a.MissingKey != nil {
		a.MissingKey(w, r, detail)
		return
	}
	writeProblem(w, http.StatusBadRequest, "missing-idempotency-key", "Idempotency key missing", detail)
}

func (a *Answers) invalidKey(w http.ResponseWriter, r *http.Request, detail string) {
	if a.InvalidKey != nil {
		a.InvalidKey(w, r, detail)
		return
	}
	writeProblem(w, http.StatusBadRequest, "invalid-idempotency-key", "Invalid idempotency key", detail)
}

func (a *Answers) mismatch(w http.ResponseWriter, r *http.Request, detail string) {
	if a.Mismatch != nil {
		a.Mismatch(w, r, detail)
		return
	}
	writeProblem(w, http.StatusUnprocessableEntity, "idempotency-key-mismatch", "Idempotency key reused", detail)
}

func (a *Answers) inFlight(w http.ResponseWriter, r *http.Request, detail string) {
	if a.InFlight != nil {
		a.InFlight(w, r, detail)
		return
	}
	writeProblem(w, http.StatusConflict, "request-in-flight", "Request in flight", detail)
}

func (a *Answers) replay(w http.ResponseWriter, r *http.Request, stored Response) {
	if a.Replay != nil {
		a.Replay(w, r, stored)
		return
	}
	stored.write(w, true)
}

func (a *Answers) refused(w http.ResponseWriter, r *http.Request, status int, detail string) {
	if a.Refused != nil {
		a.Refused(w, r, status, detail)
		return
	}
	typ, title := problemOf(status)
	writeProblem(w, status, typ, title, detail)
}

func (a *Answers) failed(w http.ResponseWriter, r *http.Request, status int, detail string) {
	if a.Failed != nil {
		a.Failed(w, r, status, detail)
		return
	}
	typ, title := problemOf(status)
	writeProblem(w, status, typ, title, detail)
}

// write sends resp; replayed marks it as an answer from a stored key.
func (resp Response) write(w http.ResponseWriter, replayed bool) {
	h := w.Header()
	for k, v := range resp.Header {
		h[k] = v
	}
	if replayed {
		h.Set(HeaderReplayed, "true")
	}
	h.Set("Content-Length", strconv.Itoa(len(resp.Body)))
	w.WriteHeader(resp.Status)
	w.Write(resp.Body)
}
