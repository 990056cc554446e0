package faultsuite

import (
	"errors"
	"io/fs"
	"sync"

	"github.com/idemkit/idem/filejournal"
)

// inspector opens a journal read-only again and again while its writer
// runs, as a person inspecting a running batch job would: every open must
// succeed (a missing file aside, before the writer created it), whatever
// the writer is doing, compactions included.
type inspector struct {
	stop  chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	opens int
	err   error
}

// inspect starts inspecting the journal at path.
func inspect(path string) *inspector {
	in := &inspector{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(in.done)
		for {
			select {
			case <-in.stop:
				return
			default:
			}
			j, err := filejournal.Open(path, filejournal.Options{ReadOnly: true, Logger: quietLog})
			in.mu.Lock()
			switch {
			case errors.Is(err, fs.ErrNotExist):
			case err != nil:
				in.err = err
				in.mu.Unlock()
				return
			default:
				j.Close()
				in.opens++
			}
			in.mu.Unlock()
		}
	}()
	return in
}

// end stops inspecting and returns how many opens succeeded and the first
// that failed.
func (in *inspector) end() (int, error) {
	close(in.stop)
	<-in.done
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.opens, in.err
}
