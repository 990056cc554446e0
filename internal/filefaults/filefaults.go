// Package filefaults reaches the file journal's fault-injection seam for
// this repository's tests: a function that wraps every file a journal
// opens, kept out of package filejournal's exported API.
package filefaults

import (
	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/internal/fileengine"
)

// WrapFiles returns o with wrap set on every file the journal opens (the
// journal, its compaction file, the file a read-only journal reads).
func WrapFiles(o filejournal.Options, wrap func(fileengine.File) fileengine.File) filejournal.Options {
	fileengine.SetWrapFile(&o, wrap)
	return o
}
