package testserver

import (
	"encoding/json"
	"net/http"
)

// ProblemTypeBase prefixes every problem type URI this server sends.
const ProblemTypeBase = "https://idemkit.github.io/problems/"

// Problem types, the "type" member of the problem documents this server
// sends. Clients tell problems apart by type, not by title or detail.
const (
	ProblemMissingKey        = ProblemTypeBase + "missing-idempotency-key"  // 400
	ProblemInvalidKey        = ProblemTypeBase + "invalid-idempotency-key"  // 400
	ProblemInvalidClient     = ProblemTypeBase + "invalid-client"           // 400
	ProblemUnauthorized      = ProblemTypeBase + "unauthorized"             // 401
	ProblemInvalidRequest    = ProblemTypeBase + "invalid-request"          // 400
	ProblemBodyTooLarge      = ProblemTypeBase + "body-too-large"           // 413
	ProblemRequestTimeout    = ProblemTypeBase + "request-timeout"          // 408
	ProblemUnsupportedMedia  = ProblemTypeBase + "unsupported-media-type"   // 415
	ProblemKeyMismatch       = ProblemTypeBase + "idempotency-key-mismatch" // 422
	ProblemInFlight          = ProblemTypeBase + "request-in-flight"        // 409, with Retry-After
	ProblemAlreadyApplied    = ProblemTypeBase + "already-applied"          // a Dialect's Applied status
	ProblemInsufficientStock = ProblemTypeBase + "insufficient-stock"       // 409, stored and replayed
	ProblemUnknownItem       = ProblemTypeBase + "unknown-item"             // 404, stored and replayed
	ProblemNotFound          = ProblemTypeBase + "not-found"                // 404
	ProblemMethodNotAllowed  = ProblemTypeBase + "method-not-allowed"       // 405
	ProblemGatewayFailed     = ProblemTypeBase + "gateway-unavailable"      // 502
	ProblemInjectedFault     = ProblemTypeBase + "injected-fault"           // 500, 502, 503
	ProblemInternal          = ProblemTypeBase + "internal-error"           // 500
	ProblemKeyLost           = ProblemTypeBase + "idempotency-key-lost"     // 500, do not retry: reconcile
	ProblemUnavailable       = ProblemTypeBase + "unavailable"              // 503
)

// ContentTypeProblem is the media type of problem documents (RFC 9457).
const ContentTypeProblem = "application/problem+json"

// Problem is an RFC 9457 problem document, the body of every error this
// server sends.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

func problem(status int, typ, title, detail string) *Problem {
	return &Problem{Type: typ, Title: title, Status: status, Detail: detail}
}

func badRequest(detail string) *Problem {
	return problem(http.StatusBadRequest, ProblemInvalidRequest, "Invalid request", detail)
}

// response renders the problem as a response.
func (p *Problem) response() response {
	body, _ := json.Marshal(p) // a struct of strings and an int cannot fail
	return response{
		Status: p.Status,
		Header: http.Header{"Content-Type": {ContentTypeProblem}},
		Body:   append(body, '\n'),
	}
}
