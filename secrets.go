package idem

import (
	"github.com/idemkit/idem/internal/redact"
)

// newSecrets returns the secrets rule with cfg's names (see Secrets).
func newSecrets(cfg Config) redact.Rules {
	return redact.New(cfg.UnrecordedHeaders, nil, cfg.RedactedParams)
}
