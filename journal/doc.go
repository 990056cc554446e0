// Package journal is the contract between a Client of package idem and
// the journal that keeps its operations: the Journal and Claim interfaces,
// the Operation a journal stores, its State, the Listing of operations, and
// the errors a journal returns.
//
// Programs that send requests need little of it: they open a journal
// (package filejournal or pgjournal), hand it to idem.New, and read an
// Operation when they list or look up what a journal holds. People who
// write a journal implement Journal and Claim, apply CheckIntent and
// CheckOutcome, and run package journaltest against their journal.
//
// # Stability
//
// This package is for journal authors, and it is not frozen: while the
// module's version is v0.x, a minor release may add a method to an
// interface or a field to Operation, and its release notes say so. What
// package journaltest checks is the contract: a journal that passes the
// journaltest release matching this package works with the Client of the
// same release.
package journal
