package fileengine

import (
	"errors"
	"fmt"

	"github.com/idemkit/idem/internal/journalkit"
)

// Errors returned by the journal, wrapped with context (the journal's path,
// the operation ID). Package idem exports each under the same name, as the
// same value, and documents it for its callers.
var (
	// ErrLocked: another writer holds the journal file (J4).
	ErrLocked = errors.New("journal is locked by another writer")

	// ErrHardLinked: the journal file has more than one hard link (J4).
	ErrHardLinked = errors.New("journal file has more than one hard link")

	// ErrCorrupt: the file fails a check a torn write cannot explain (J3);
	// the concrete error is a *CorruptError.
	ErrCorrupt = journalkit.ErrCorrupt

	// ErrReadOnly: an append or compaction on a journal opened read-only.
	ErrReadOnly = errors.New("journal is read-only")

	// ErrClosed: a use of the journal after Close.
	ErrClosed = journalkit.ErrClosed

	// ErrInvalidOperation: a record the format cannot hold, or an append
	// that does not fit the operation; nothing is written.
	ErrInvalidOperation = journalkit.ErrInvalidOperation

	// ErrOperationExists: a Begin for an ID the journal holds.
	ErrOperationExists = journalkit.ErrOperationExists

	// ErrNoSuchOperation: a Complete for an ID the journal does not hold.
	ErrNoSuchOperation = journalkit.ErrNoSuchOperation
)

// CorruptError describes where and why a journal file failed a check (J3).
// It matches ErrCorrupt with errors.Is. Package idem exports it as
// filejournal.CorruptError.
type CorruptError struct {
	// Path is the journal file.
	Path string
	// Offset is the byte offset of the record that failed the check, or 0
	// for the file header.
	Offset int64
	// Reason says which check failed.
	Reason string
}

// Error describes the corruption with the file, the offset and the reason.
func (e *CorruptError) Error() string {
	return fmt.Sprintf("filejournal: %s is corrupt at offset %d: %s", e.Path, e.Offset, e.Reason)
}

// Is reports whether target is ErrCorrupt, so that errors.Is(err,
// ErrCorrupt) holds for every *CorruptError.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }
