package journal

import (
	"testing"

	"github.com/idemkit/idem/internal/journalkit"
)

// The marks are spelled once: the engine packages below this one use
// journalkit's names for the same fields.
func TestMarksAreJournalkits(t *testing.T) {
	for _, m := range [][2]string{
		{HeaderAlreadyApplied, journalkit.AppliedHeader},
		{HeaderKeyReused, journalkit.KeyReusedHeader},
		{HeaderSettled, journalkit.SettledHeader},
		{HeaderSettledNote, journalkit.SettledNoteHeader},
		{HeaderUnrecorded, journalkit.UnrecordedHeadersField},
	} {
		if m[0] != m[1] {
			t.Errorf("journal names the mark %q, journalkit %q", m[0], m[1])
		}
	}
}
