// Package filejournal is the journal.Journal in one file on one machine's
// disk, written by one process at a time:
//
//	j, err := filejournal.Open("charges.journal", filejournal.Options{})
//	...
//	defer j.Close()
//	c, err := idem.New(idem.Config{Journal: j})
//
// Every record carries a checksum. A torn last record, from a crash
// mid-write, is cut on open. Any other damage is a *CorruptError, and the
// file is left as found: idem journal verify lists the damage, idem
// journal salvage copies what still reads. A second writer of the file, in
// this process or another, gets ErrLocked. Compaction rewrites the file
// with its live operations on its own once garbage outweighs them.
//
// The journal keeps an index of every operation in memory, rebuilt from
// the file on open; keys, URLs and responses stay in the file, and are
// read and checked when an operation is looked up or listed. A journal
// meant to hold many millions of operations, or to be shared by machines,
// is pgjournal's.
package filejournal
