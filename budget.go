package idem

import "sync"

// RetryBudget bounds the retries of a Client's operations together, as
// gRPC's retry throttling does: a retryable failure spends one of MaxTokens,
// a final answer refunds Refund, and a retry needs over half the tokens. A
// retry stopped ends unknown (ErrRetryBudgetExhausted).
type RetryBudget struct {
	// MaxTokens is the size of the budget. Default 100.
	MaxTokens float64
	// Refund is what a final answer returns to the budget. Default 0.1.
	Refund float64
	// Disabled turns the budget off. Default false.
	Disabled bool
}

// budget is a RetryBudget in use. It is safe for concurrent use.
type budget struct {
	mu     sync.Mutex
	cfg    RetryBudget
	tokens float64
}

func newBudget(cfg RetryBudget) *budget {
	if cfg.MaxTokens <= 0 {
		cfg.MaxTokens = 100
	}
	if cfg.Refund <= 0 {
		cfg.Refund = 0.1
	}
	return &budget{cfg: cfg, tokens: cfg.MaxTokens}
}

// fail spends a token for a retryable failure.
func (b *budget) fail() {
	b.mu.Lock()
	b.tokens = max(b.tokens-1, 0)
	b.mu.Unlock()
}

// succeed refunds part of a token for a final answer.
func (b *budget) succeed() {
	b.mu.Lock()
	b.tokens = min(b.tokens+b.cfg.Refund, b.cfg.MaxTokens)
	b.mu.Unlock()
}

// allowRetry reports whether a retry may be sent now.
func (b *budget) allowRetry() bool {
	if b.cfg.Disabled {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tokens > b.cfg.MaxTokens/2
}

// available returns the tokens left.
func (b *budget) available() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tokens
}
