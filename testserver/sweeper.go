package testserver

import "context"

// Sweep deletes the finished keys at least Config.Retention old
// and returns how many it deleted: the layer's sweep (idemserver.Keys.Sweep).
// The business rows created under a deleted key keep everything but the
// key: their idempotency_key is set to NULL in the same transaction (see
// forget), so the UNIQUE constraint lets the key be used again, as a new
// request.
//
// A key whose request has not finished is never deleted, however old: its
// request may still be running (a live claim, or one that lapsed while
// the gateway was slow), or it may have crashed between the gateway's
// capture and the final commit. Forgetting it would turn the retry it
// invites into a new request with a new downstream key, and the gateway
// would capture the money a second time. Such keys are kept, and counted
// in Stats.Abandoned once no live claim holds them, for a person to
// reconcile.
//
// The background sweeper calls Sweep every Config.SweepInterval; tests may
// call it directly. After Close it returns ErrClosed.
func (s *Server) Sweep(ctx context.Context) (int64, error) {
	if !s.enter() {
		return 0, ErrClosed
	}
	defer s.inflight.Done()
	return s.keys.Sweep(ctx)
}
