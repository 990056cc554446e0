package idemserver_test

import (
	"bytes"
	"net/http"
	"sync"
)

// frameworkWriter is a framework's own writer, as gin's: it says whether
// anything was written on it (Written), and a handler of the framework
// writes on it rather than on the writer idemserver gives.
type frameworkWriter struct {
	http.ResponseWriter
	written bool
}

func (w *frameworkWriter) WriteHeader(status int) {
	w.written = true
	w.ResponseWriter.WriteHeader(status)
}
func (w *frameworkWriter) Write(b []byte) (int, error) {
	w.written = true
	return w.ResponseWriter.Write(b)
}
func (w *frameworkWriter) Written() bool { return w.written }

// Unwrap gives the server's writer, as gin's and echo's writers do.
func (w *frameworkWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// opaqueWriter is a framework's writer that hides the server's: no
// Unwrap, so that nothing can reach the connection through it.
type opaqueWriter struct{ fw *frameworkWriter }

func (w opaqueWriter) Header() http.Header         { return w.fw.Header() }
func (w opaqueWriter) WriteHeader(status int)      { w.fw.WriteHeader(status) }
func (w opaqueWriter) Write(b []byte) (int, error) { return w.fw.Write(b) }
func (w opaqueWriter) Written() bool               { return w.fw.Written() }
