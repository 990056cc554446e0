// Package fileengine is the engine of idem's file journal: an append-only
// file holding, per operation, the intent (ID, key, fingerprint, method,
// URL, created time) and, once known, the outcome, with the index of every
// operation in it kept in memory and rebuilt from the file on open. The
// index holds each operation's Meta and where its records are; the rest,
// the recorded responses above all, is read from the file when asked for.
//
// Package filejournal wraps a Journal as its Journal, converting its
// Operations to and from the Records here. This package knows bytes and records: times are
// Unix nanoseconds, an outcome's response header and body stay encoded
// until DecodeHeaderBody is asked for them, and of net/http it knows only
// the Header type, which the codec encodes and decodes.
//
// The rules it keeps (J1 to J9, and the journal's side of C2 and C3) are
// stated in the repository's DESIGN.md. Each is explained in the file that
// keeps it, and pointed to elsewhere:
//
//   - J1, framing, and the on-disk format: frame.go (file header and record
//     envelope) and codec.go (the intent and completion payloads).
//   - J2, torn tails, and J3, corruption: recover.go.
//   - J4, one writer per file: lock.go.
//   - J5, group commit, J6, the failure latch, and the fsync rules behind
//     C2 (an intent is durable before Begin returns) and C3 (a completion
//     need not be): append.go.
//   - J7, creation and compaction: compact.go.
//   - J8, the index the reads answer from: index.go, and Lookup and List in
//     journal.go.
//   - J9, records read back from the file on demand, and checked: read.go.
package fileengine
