package idem

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkit/idem/journal"
)

// CallOptions override, for the calls whose request context carries them,
// the Config fields of the same names; a zero field keeps the Config's.
type CallOptions struct {
	// MaxAttempts bounds the attempts of the call, the first included.
	MaxAttempts int
	// MaxElapsed bounds the time the call spends retrying.
	MaxElapsed time.Duration
	// Resend, when set, is asked about a recorded refusal that
	// RefusedWithoutEffect allows: true sends it again under a new key.
	Resend func(journal.Operation) bool
}

type callOptionsKey struct{}

// WithCallOptions returns a context that carries o for the calls of the
// requests built on it.
func WithCallOptions(ctx context.Context, o CallOptions) context.Context {
	return context.WithValue(ctx, callOptionsKey{}, o)
}

// limits are the bounds of one call's retrying.
type limits struct {
	attempts int
	elapsed  time.Duration
}

// callLimits returns the bounds of a call made with ctx: the Config's,
// overridden by the CallOptions ctx carries; ErrInvalidRequest for options
// out of range.
func (c *Client) callLimits(ctx context.Context) (limits, error) {
	o, _ := ctx.Value(callOptionsKey{}).(CallOptions)
	if o.MaxAttempts < 0 || o.MaxElapsed < 0 {
		return limits{}, fmt.Errorf("idem: %w: negative CallOptions", ErrInvalidRequest)
	}
	setDefault(&o.MaxAttempts, c.cfg.MaxAttempts)
	setDefault(&o.MaxElapsed, c.cfg.MaxElapsed)
	return limits{o.MaxAttempts, o.MaxElapsed}, nil
}
