package fileengine

import "fmt"

// Forget drops operation id from the journal, whatever its state, by
// rewriting the journal as compaction does, with every other operation kept
// as it is (scrubbed as compaction scrubs it, never summarized or dropped).
// When Forget returns nil the operation is gone from the file, durably: the
// next Begin of id records a new intent, with a new key. It returns an
// error matching ErrNoSuchOperation if the journal does not hold id.
// Appends wait while it runs.
func (j *Journal) Forget(id string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.usable("forget"); err != nil {
		return err
	}
	// The file is about to be replaced: let a running group-commit fsync
	// finish on it first (as compactLocked does).
	for j.syncing {
		j.cond.Wait()
	}
	if err := j.usable("forget"); err != nil {
		return err // closed or failed while waiting
	}
	if _, ok := j.idx.get(id); !ok {
		return fmt.Errorf("filejournal: %s: forget %s: %w", j.path, QuoteID(id), ErrNoSuchOperation)
	}
	live := make([]keep, 0, j.idx.len())
	for e := range j.idx.all() {
		if e.ID != id {
			live = append(live, keep{e: e})
		}
	}
	if err := j.rewrite(live); err != nil {
		return fmt.Errorf("filejournal: %s: forget %s: %w", j.path, QuoteID(id), err)
	}
	j.log.Debug("filejournal: forgot operation", "path", j.path, "op", id)
	return nil
}
