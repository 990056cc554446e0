package testserver

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
)

func TestGatewayIsIdempotentByKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gw.db")
	g, err := NewGateway(GatewayConfig{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, err := g.Capture(ctx, "k1", 100, "usd")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		key      string
		amount   int64
		currency string
		wantID   string // "" : a new ID
		wantErr  error
		captures int64
	}{
		{"same key replays", "k1", 100, "usd", a, nil, 1},
		{"new key captures", "k2", 100, "usd", "", nil, 2},
		{"same key, other amount", "k1", 101, "usd", "", ErrGatewayKeyReused, 2},
		{"same key, other currency", "k1", 100, "eur", "", ErrGatewayKeyReused, 2},
	}
	for _, tt := range tests {
		id, err := g.Capture(ctx, tt.key, tt.amount, tt.currency)
		switch {
		case tt.wantErr != nil:
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("%s: error %v, want %v", tt.name, err, tt.wantErr)
			}
		case err != nil:
			t.Fatalf("%s: %v", tt.name, err)
		case tt.wantID != "" && id != tt.wantID:
			t.Fatalf("%s: id %q, want %q", tt.name, id, tt.wantID)
		case tt.wantID == "" && (id == a || id == ""):
			t.Fatalf("%s: id %q, want a new one", tt.name, id)
		}
		if got := g.Captures(); got != tt.captures {
			t.Fatalf("%s: captures %d, want %d", tt.name, got, tt.captures)
		}
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Capture(ctx, "k3", 1, "usd"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Capture after Close: %v, want ErrClosed", err)
	}

	// Its state survives a restart, as an external system's would.
	g, err = NewGateway(GatewayConfig{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if g.Captures() != 2 {
		t.Fatalf("captures after reopening %d, want 2", g.Captures())
	}
	if id, err := g.Capture(ctx, "k1", 100, "usd"); err != nil || id != a {
		t.Fatalf("Capture after reopening = %q, %v; want %q", id, err, a)
	}
}

func TestGatewayCapturesOnceUnderConcurrency(t *testing.T) {
	g, err := NewGateway(GatewayConfig{Path: filepath.Join(t.TempDir(), "gw.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var wg sync.WaitGroup
	ids := make([]string, 8)
	for i := range ids {
		wg.Go(func() {
			id, err := g.Capture(context.Background(), "k", 5, "usd")
			if err != nil {
				t.Error(err)
			}
			ids[i] = id
		})
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("ids %v, want one", ids)
		}
	}
	if g.Captures() != 1 {
		t.Fatalf("captures %d, want 1", g.Captures())
	}
}

func TestGatewayFaults(t *testing.T) {
	ctx := context.Background()
	g, err := NewGateway(GatewayConfig{Faults: GatewayFaults{Failure: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Capture(ctx, "k", 1, "usd"); !errors.Is(err, ErrGatewayUnavailable) || g.Captures() != 0 {
		t.Fatalf("failure: %v, %d captures; want ErrGatewayUnavailable and none", err, g.Captures())
	}
	g.Close()

	g, err = NewGateway(GatewayConfig{Faults: GatewayFaults{LostResponse: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for range 2 {
		if _, err := g.Capture(ctx, "k", 1, "usd"); !errors.Is(err, ErrGatewayUnavailable) || g.Captures() != 1 {
			t.Fatalf("lost response: %v, %d captures; want ErrGatewayUnavailable and exactly one capture", err, g.Captures())
		}
	}
}
