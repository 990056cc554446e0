// Package idemgin serves gin handlers under idemserver's keys, so that
// what a gin handler answers (c.JSON, c.String, c.Status, c.Stream…) is
// what idemserver stores and replays.
//
// gin's handlers write to c.Writer, gin's own writer, not to the writer an
// http middleware gives: under idemserver's Keys.Middleware, called by
// hand or through a generic adapter of net/http middleware, a gin handler
// would answer the client itself before the commit, and idemserver would
// see no answer: it rolls the work back, logs the cause and aborts the
// answer, so that every such request fails. Handle gives each run of the
// handler a c.Writer that writes to idemserver, and the request idemserver
// prepared (its Tx and its body), in c.Request. Behind gin's Recovery, a
// handler that panics leaves the client idemserver's 500, its work rolled
// back.
//
//	r.POST("/orders", idemgin.Handle(keys, idemserver.Route{}, createOrder))
//
// The handler may run more than once for one request: on PostgreSQL an
// atomic route runs it again after a serialization failure, and a phased
// route after its final transaction fails to serialize (see idemserver).
// Each run starts with a fresh c.Writer; the handler's work must go
// through idemserver.Tx(c.Request.Context()), as any idemserver handler's.
package idemgin

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/idemkit/idem/idemserver"
)

// Handle returns a gin handler that serves h as route of keys: a request
// with a key runs h at most as idemserver allows and gets the answer
// idemserver stores, sent after the commit; a retry gets it replayed
// without running h.
func Handle(keys *idemserver.Keys, route idemserver.Route, h gin.HandlerFunc) gin.HandlerFunc {
	return func(c *gin.Context) {
		outer, request := c.Writer, c.Request
		defer func() { c.Writer, c.Request = outer, request }()
		keys.Handle(route, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			run := &writer{w: w, status: http.StatusOK, size: noWritten}
			c.Writer, c.Request = run, r
			h(c)
			run.WriteHeaderNow() // as gin does once a handler returns
		})).ServeHTTP(outer, request)
	}
}

// noWritten is a writer's size before anything is written, as in gin.
const noWritten = -1

// writer is gin's ResponseWriter over the writer idemserver gives a run.
type writer struct {
	w      http.ResponseWriter
	status int
	size   int
}

var _ gin.ResponseWriter = (*writer)(nil)

func (w *writer) Header() http.Header { return w.w.Header() }

// WriteHeader sets the status, sent with the first byte, as gin's does.
func (w *writer) WriteHeader(status int) {
	if status > 0 && !w.Written() {
		w.status = status
	}
}

// WriteHeaderNow sends the status if nothing was sent yet.
func (w *writer) WriteHeaderNow() {
	if !w.Written() {
		w.size = 0
		w.w.WriteHeader(w.status)
	}
}

func (w *writer) Write(b []byte) (int, error) {
	w.WriteHeaderNow()
	n, err := w.w.Write(b)
	w.size += n
	return n, err
}

func (w *writer) WriteString(s string) (int, error) { return w.Write([]byte(s)) }

func (w *writer) Status() int   { return w.status }
func (w *writer) Size() int     { return w.size }
func (w *writer) Written() bool { return w.size != noWritten }

// Flush sends the status; the answer itself reaches the client once
// idemserver has stored it, so a stream is sent whole, after the commit.
func (w *writer) Flush() { w.WriteHeaderNow() }

// errHijack: idemserver stores and sends the answer; a connection cannot
// be taken over under it.
var errHijack = errors.New("idemgin: a connection cannot be hijacked under idemserver, which sends the answer once it is stored")

func (w *writer) Hijack() (net.Conn, *bufio.ReadWriter, error) { return nil, nil, errHijack }

// CloseNotify returns a channel that is never closed: idemserver does the
// work of a request whose client went away.
func (w *writer) CloseNotify() <-chan bool { return make(chan bool) }

func (w *writer) Pusher() http.Pusher { return nil }

var _ io.StringWriter = (*writer)(nil)
