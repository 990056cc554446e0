package fileengine

// Read-ahead for recovery: a goroutine reads the file's next chunks while
// recovery checks and decodes the current one, so that on a large journal
// the copying of the file's bytes by the kernel and recovery's own work
// overlap.

import (
	"io"
)

// Read-ahead sizes: chunks of readAheadChunk bytes, readAheadBuffers of
// them in flight. Each buffer has readAheadRoom bytes before its chunk,
// where the end of the previous chunk (a record it holds only the start
// of) is copied, so that the two read as one. Variables, so that tests
// can make chunks small enough for a small file to cross many.
var (
	readAheadChunk   = 4 << 20
	readAheadRoom    = 256 << 10
	readAheadBuffers = 3
)

// readAhead is the goroutine's side of a fileReader's read-ahead.
type readAhead struct {
	chunks chan aheadChunk // read chunks, in file order
	free   chan []byte     // buffers for the goroutine to fill
	stop   chan struct{}   // closed to stop the goroutine
	done   chan struct{}   // closed when it has stopped
	next   int64           // file offset of the next chunk to receive
	cur    []byte          // the buffer fr.buf lies in, or nil
}

// aheadChunk is a buffer holding the file's bytes from off, its chunk
// starting at readAheadRoom, or the read's error.
type aheadChunk struct {
	buf []byte
	off int64
	n   int
	err error
}

// startReadAhead starts reading the file ahead from where fr's buffer
// ends. stopReadAhead must be called before fr is dropped, and before the
// file is written.
func (fr *fileReader) startReadAhead() {
	off := fr.start + int64(fr.n)
	if fr.size-off <= int64(readAheadChunk) {
		return // one read does
	}
	a := &readAhead{
		chunks: make(chan aheadChunk, readAheadBuffers),
		free:   make(chan []byte, readAheadBuffers),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
		next:   off,
	}
	for range readAheadBuffers {
		a.free <- make([]byte, readAheadRoom+readAheadChunk)
	}
	fr.ahead = a
	go a.run(fr.r, off, fr.size)
}

// run reads chunks from off to size into free buffers until stopped or a
// read fails.
func (a *readAhead) run(r io.ReaderAt, off, size int64) {
	defer close(a.done)
	for off < size {
		var buf []byte
		select {
		case buf = <-a.free:
		case <-a.stop:
			return
		}
		want := int(min(int64(readAheadChunk), size-off))
		n, err := r.ReadAt(buf[readAheadRoom:readAheadRoom+want], off)
		if n == want {
			err = nil
		} else if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		select {
		case a.chunks <- aheadChunk{buf: buf, off: off, n: n, err: err}:
		case <-a.stop:
			return
		}
		if err != nil {
			return
		}
		off += int64(n)
	}
}

// stopReadAhead stops the goroutine and waits for it; fr goes on reading
// on demand.
func (fr *fileReader) stopReadAhead() {
	a := fr.ahead
	if a == nil {
		return
	}
	close(a.stop)
	<-a.done
	fr.ahead = nil
	if a.cur != nil {
		// fr.buf lies in a read-ahead buffer: keep it, it is no longer
		// shared.
		fr.buf = fr.buf[:fr.n:fr.n]
	}
}

// fromAhead serves [off, off+n) from the read-ahead when off continues
// where fr's buffer ends or lies in it: the bytes from off to the buffer's
// end are moved in front of the next chunk, or, when they or the range do
// not fit there, the bytes and as many chunks as the range needs are
// joined in a buffer of their own. It reports false when the read-ahead
// cannot serve the range, and stops it: fr reads on demand from then on.
func (fr *fileReader) fromAhead(off int64, n int) ([]byte, bool, error) {
	a := fr.ahead
	end := fr.start + int64(fr.n)
	if a.next != end || off < fr.start || off > end {
		fr.stopReadAhead()
		return nil, false, nil
	}
	tail := fr.buf[int(off-fr.start):fr.n]
	c, err := a.receive()
	if err != nil {
		fr.stopReadAhead()
		return nil, false, err
	}
	if len(tail) <= readAheadRoom && n <= len(tail)+c.n {
		at := readAheadRoom - len(tail)
		copy(c.buf[at:readAheadRoom], tail)
		a.release()
		a.cur = c.buf
		fr.buf = c.buf[at : readAheadRoom+c.n]
	} else {
		joined := make([]byte, 0, max(n, len(tail)+c.n)+readAheadChunk)
		joined = append(joined, tail...)
		a.release()
		for {
			joined = append(joined, c.buf[readAheadRoom:readAheadRoom+c.n]...)
			a.free <- c.buf
			if len(joined) >= n || a.next >= fr.size {
				break
			}
			if c, err = a.receive(); err != nil {
				fr.stopReadAhead()
				return nil, false, err
			}
		}
		fr.buf = joined
	}
	fr.start, fr.n = off, len(fr.buf)
	if a.next >= fr.size {
		fr.stopReadAhead() // all read
	}
	return fr.buf[:min(n, fr.n)], true, nil
}

// receive returns the next chunk, and moves next past it.
func (a *readAhead) receive() (aheadChunk, error) {
	c := <-a.chunks
	if c.err != nil {
		return c, c.err
	}
	a.next = c.off + int64(c.n)
	return c, nil
}

// release gives the buffer fr.buf lay in back to the goroutine.
func (a *readAhead) release() {
	if a.cur != nil {
		a.free <- a.cur
		a.cur = nil
	}
}
