package testserver

import "github.com/idemkit/idem/idemserver"

// MaxKeyLength is the longest idempotency key accepted, in characters,
// unless the Dialect says otherwise.
const MaxKeyLength = idemserver.DefaultMaxKeyLength

// HeaderIdempotencyKey is the request header carrying the key, unless the
// Dialect says otherwise. The layer (package idemserver) reads it: a bare
// token of letters, digits and - _ . : + / = ~, or an RFC 8941
// structured-field string; both spell the same key.
const HeaderIdempotencyKey = idemserver.HeaderIdempotencyKey

// HeaderReplayed is set to "true" on a response replayed from a stored key.
const HeaderReplayed = idemserver.HeaderReplayed
