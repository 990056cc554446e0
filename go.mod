module github.com/idemkit/idem

go 1.26.0

require (
	github.com/cenkalti/backoff/v4 v4.3.0
	github.com/gofrs/flock v0.13.2
	github.com/google/uuid v1.6.0
	github.com/hashicorp/go-cleanhttp v0.5.2
	github.com/hashicorp/go-retryablehttp v0.7.8
)

require (
	github.com/mattn/go-isatty v0.0.24 // indirect
	golang.org/x/sys v0.49.0 // indirect
)
