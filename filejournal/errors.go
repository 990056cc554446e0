package filejournal

import "github.com/idemkit/idem/internal/fileengine"

// Errors of a file journal, beside the ones every journal returns (package
// idem). Each is returned wrapped with context (the journal's path, the
// operation ID); test for them with errors.Is.
var (
	// ErrLocked reports that another Journal, in this process or another
	// one, holds the journal open for writing.
	ErrLocked = fileengine.ErrLocked

	// ErrHardLinked reports a journal file with more than one hard link.
	// One writer per file is enforced through the file's path, and another
	// name of the same file would let a second writer in. Remove the
	// other links; a symlink is fine, since the journal follows it.
	ErrHardLinked = fileengine.ErrHardLinked

	// ErrReadOnly reports an append or compaction on a journal opened with
	// Options.ReadOnly.
	ErrReadOnly = fileengine.ErrReadOnly
)

// CorruptError describes where and why a journal file failed a check: the
// journal file (Path), the byte offset of the record that failed the check,
// or 0 for the file header (Offset), and which check failed (Reason). It
// matches journal.ErrCorrupt with errors.Is. The journal never skips or truncates
// the damaged region: the file is left as found for a person to inspect.
type CorruptError = fileengine.CorruptError
