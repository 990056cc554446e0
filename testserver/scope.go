package testserver

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"

	"github.com/idemkit/idem/idemserver"
)

// HeaderClientID names the calling client when no Authorization is sent.
const HeaderClientID = "X-Client-ID"

// AnonymousClient is the scope of requests that carry neither an
// Authorization header nor an X-Client-ID header. All such requests share
// one key space.
const AnonymousClient = "anonymous"

// errUnauthorized marks a scope error answered with 401 rather than 400;
// it is idemserver.ErrUnauthorized for the layer.
var errUnauthorized error = unauthorized{}

type unauthorized struct{}

func (unauthorized) Error() string        { return "unauthorized" }
func (unauthorized) Is(target error) bool { return target == idemserver.ErrUnauthorized }

// clientScope returns the scope that keys (and stored resources) belong to
// (rule S2):
//
//   - Authorization: Bearer <token> scopes to "bearer:" and the SHA-256 of the
//     token (the token itself is never stored);
//   - otherwise X-Client-ID: <id> scopes to "client:<id>";
//   - otherwise the scope is AnonymousClient.
//
// Authorization wins over X-Client-ID: the credential is who the caller is,
// a client-ID header is only who it says it is. An Authorization header of
// another scheme is refused with 401.
func clientScope(h http.Header) (string, error) {
	if auth := h.Get("Authorization"); auth != "" {
		scheme, token, ok := strings.Cut(auth, " ")
		token = strings.Trim(token, " \t")
		if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
			return "", fmt.Errorf("%w: only Authorization: Bearer <token> is supported", errUnauthorized)
		}
		sum := sha256.Sum256([]byte(token))
		return "bearer:" + hex.EncodeToString(sum[:16]), nil
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
