package types

// The configuration of a zone.
type ZoneConfig struct {

	// A unique value that ensures that the request can't be replayed.
	CallerReference *string

	// A comment.
	Comment *string
}
