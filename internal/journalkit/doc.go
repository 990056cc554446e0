// Package journalkit holds what every journal of package idem shares and
// no journal owns: the errors the contract names, the limits of an
// operation ID, a key and a status, the encoding of a recorded header and
// body, the quoting of an ID in a message, and a set of locks named by
// operation ID. Package idem exports the errors and documents them for
// its callers; the journals import this package, never one another.
package journalkit
