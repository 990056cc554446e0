package testserver

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/idemkit/idem/idemserver"
)

// HeaderClientID names the calling client's account: the scope of its
// keys and of the resources it creates.
const HeaderClientID = "X-Client-ID"

// AnonymousClient is the scope of requests that carry no X-Client-ID
// header. All such requests share one key space.
const AnonymousClient = "anonymous"

// errUnauthorized marks a scope error answered with 401 rather than 400;
// it is idemserver.ErrUnauthorized for the layer.
var errUnauthorized error = unauthorized{}

type unauthorized struct{}

func (unauthorized) Error() string        { return "unauthorized" }
func (unauthorized) Is(target error) bool { return target == idemserver.ErrUnauthorized }

// clientScope returns the scope that keys (and stored resources) belong to
// (rule S2): "client:<id>" for X-Client-ID: <id>, the client's account,
// else AnonymousClient. A credential never scopes: a client that refreshes
// or rotates its bearer token keeps its keys, and its retry is a replay.
// An Authorization header is accepted only as Bearer <token> (another
// scheme is refused with 401), and its token is not read further.
func clientScope(h http.Header) (string, error) {
	if auth := h.Get("Authorization"); auth != "" {
		scheme, token, ok := strings.Cut(auth, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || strings.Trim(token, " \t") == "" {
			return "", fmt.Errorf("%w: only Authorization: Bearer <token> is supported", errUnauthorized)
		}
	}
	if id := h.Get(HeaderClientID); id != "" {
		if len(id) > 255 {
			return "", fmt.Errorf("the %s header is longer than 255 characters", HeaderClientID)
		}
		for i := 0; i < len(id); i++ {
			if id[i] < 0x21 || id[i] > 0x7e {
				return "", fmt.Errorf("the %s header must be printable ASCII without spaces", HeaderClientID)
			}
		}
		return "client:" + id, nil
	}
	return AnonymousClient, nil
}
