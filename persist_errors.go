package idem

import (
	"errors"
	"fmt"
)

// Errors returned by the journal. Each is returned wrapped with context (the
// journal's path, the operation ID); test for them with errors.Is.
var (
	// ErrLocked reports that another Journal, in this process or another
	// one, holds the journal open for writing.
	ErrLocked = errors.New("idem: journal is locked by another writer")

	// ErrHardLinked reports a journal file with more than one hard link.
	// One writer per file is enforced through the file's path, and another
	// name of the same file would let a second writer in (J4). Remove the
	// other links; a symlink is fine, since the journal follows it.
	ErrHardLinked = errors.New("idem: journal file has more than one hard link")

	// ErrCorrupt reports that the journal file fails a check that a torn
	// write cannot explain. The concrete error is a *CorruptError.
	ErrCorrupt = errors.New("idem: journal is corrupt")

	// ErrReadOnly reports an append or compaction on a journal opened with
	// JournalOptions.ReadOnly.
	ErrReadOnly = errors.New("idem: journal is read-only")

	// ErrClosed reports a use of a Journal after Close.
	ErrClosed = errors.New("idem: journal is closed")

	// ErrInvalidOperation reports an Operation that Begin or Complete
	// refuses: an empty or over-long ID or key, a state that does not fit
	// the call, a time outside the representable range, or a record larger
	// than the journal's record limit. Nothing is written.
	ErrInvalidOperation = errors.New("idem: invalid journal operation")

	// ErrOperationExists reports a Begin for an operation ID the journal
	// already holds. An operation's intent is recorded once; its key is
	// reused, never replaced.
	ErrOperationExists = errors.New("idem: operation already in the journal")

	// ErrNoSuchOperation reports a Complete for an operation ID the journal
	// does not hold: an outcome is only recorded after its intent.
	ErrNoSuchOperation = errors.New("idem: operation not in the journal")
)

// CorruptError describes where and why a journal file failed a check. It
// matches ErrCorrupt with errors.Is. The journal never skips or truncates
// the damaged region: the file is left as found for a person to inspect.
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
	return fmt.Sprintf("idem: journal %s is corrupt at offset %d: %s", e.Path, e.Offset, e.Reason)
}

// Is reports whether target is ErrCorrupt, so that errors.Is(err,
// ErrCorrupt) holds for every *CorruptError.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }
