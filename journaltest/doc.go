// Package journaltest is the conformance suite of journal.Journal. A journal
// that passes it keeps the rules a Client relies on a journal for, as far
// as one process can observe them. Every journal of this module runs it,
// and a journal written elsewhere (on Redis, DynamoDB, Spanner) can run it
// from its own tests.
//
// The suite checks that:
//   - Begin records an intent once, and it is read back whole at once;
//   - Complete records the outcome of an intent, read back whole;
//   - Begin and Complete refuse what journal.CheckIntent and journal.CheckOutcome
//     refuse, and an operation of an ID other than the claim's;
//   - Lookup, List and a claim's Operation read what was recorded, and the
//     listings select by state and by each operation's own KeyTTL, ordered
//     by created time and then
//     by the bytes of the ID;
//   - one claim of an ID is held at a time, and Claim waits for it within
//     its context;
//   - TryClaim does not wait;
//   - ClaimBegin, of a journal that is a journal.ClaimBeginner, claims as
//     Claim does and begins only a new operation;
//   - what was recorded survives reopening the journal;
//   - every outcome is kept, or, for a journal that keeps only its latest
//     ones (Backend.KeptOutcomes), an older one is refused as forgotten,
//     never read as absent.
//
// The suite fails a journal that breaks any one of its checks: its own
// tests run it against broken journals, each wrong in one field it reads
// back, one error it returns, its listing's order or selection, or its
// claims, and each fails the check it breaks. The suite cannot check what
// needs a crash or a second machine: that Begin is durable when it returns,
// that a lapsed claim is fenced off. A journal's own tests cover those.
//
// A journal's test runs the suite with Run, opening a fresh journal for
// each check:
//
//	func TestConforms(t *testing.T) {
//		journaltest.Run(t, func(t *testing.T) journaltest.Backend {
//			db := newTestDatabase(t)
//			j := myjournal.Open(db)
//			t.Cleanup(func() { j.Close() })
//			return journaltest.Backend{
//				Journal: j,
//				Reopen: func(t *testing.T) journal.Journal {
//					j.Close()
//					j = myjournal.Open(db)
//					return j
//				},
//			}
//		})
//	}
//
// The journal must be safe for concurrent use, keep each operation's
// KeyTTL as it was begun with, keep times to the nanosecond and read them back in UTC, and read
// an empty header or body back as nil (see journal.Operation). A journal
// that keeps nothing, such as one in memory, leaves Backend.Reopen nil.
// The check that reopens is then skipped, and so is the check of
// ClaimBegin for a journal that is not a journal.ClaimBeginner: each skip
// says why.
package journaltest
