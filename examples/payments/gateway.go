package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// errGatewayDown is what the fake gateway answers when told to fail.
var errGatewayDown = errors.New("payments: gateway unavailable")

// gateway is a fake card processor with Stripe-like idempotency: a capture
// names a key, and a second capture under that key returns the first one's
// ID without taking the money again. It counts the calls it got and the
// captures it really made, which is what the tests compare.
type gateway struct {
	mu       sync.Mutex
	captures map[string]string // downstream key -> capture ID
	calls    int
	fail     int // the next fail calls answer errGatewayDown, capturing nothing
}

func newGateway() *gateway { return &gateway{captures: map[string]string{}} }

// Capture takes amount under key, once per key.
func (g *gateway) Capture(ctx context.Context, key string, amount int64) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("payments: capturing: %w", err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls++
	if g.fail > 0 {
		g.fail--
		return "", errGatewayDown
	}
	if id, ok := g.captures[key]; ok {
		return id, nil
	}
	id := fmt.Sprintf("cap_%d", len(g.captures)+1)
	g.captures[key] = id
	return id, nil
}

// counts returns how often Capture was called and how many captures it made.
func (g *gateway) counts() (calls, captures int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls, len(g.captures)
}
