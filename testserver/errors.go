package testserver

import "errors"

// Errors returned by this package, for errors.Is.
var (
	// ErrInvalidConfig reports a Config (or GatewayConfig) field that cannot
	// work, such as a negative duration or fault rates adding up to more
	// than one.
	ErrInvalidConfig = errors.New("testserver: invalid config")

	// ErrClosed is returned by methods of a Server or Gateway after Close.
	ErrClosed = errors.New("testserver: closed")

	// ErrGatewayUnavailable is returned by Gateway.Capture when an injected
	// gateway fault fires. The capture may or may not have happened; a
	// retry with the same key is safe either way.
	ErrGatewayUnavailable = errors.New("testserver: payment gateway unavailable")

	// ErrGatewayKeyReused is returned by Gateway.Capture when a key that
	// already captured one amount is presented with another.
	ErrGatewayKeyReused = errors.New("testserver: gateway key reused with different parameters")

	// ErrUsage is returned by Command for bad command-line arguments; the
	// problem has already been printed to its stderr.
	ErrUsage = errors.New("testserver: usage")
)
