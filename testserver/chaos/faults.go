package chaos

import (
	"context"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"sync"
	"time"
)

// hijack takes the client's connection over from net/http. Where that is
// impossible (HTTP/2) it aborts the handler instead, with the panic value
// net/http reserves for that purpose and recovers silently: the client's
// stream is reset, the nearest thing to a hang-up there.
func hijack(w http.ResponseWriter) net.Conn {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	return conn
}

// hangUp closes the client's connection in the ordinary way (FIN): the
// client reads EOF after whatever was already written.
func hangUp(w http.ResponseWriter) {
	_ = hijack(w).Close()
}

// reset closes the client's connection with SO_LINGER 0, which makes the
// kernel send RST instead of FIN: the client's next read fails with
// ECONNRESET. On a connection that is not TCP it closes normally.
func reset(w http.ResponseWriter) {
	conn := hijack(w)
	if tcp, ok := tcpConnOf(conn); ok {
		_ = tcp.SetLinger(0)
	}
	_ = conn.Close()
}

// tcpConnOf finds the TCP connection under c, looking through wrappers such
// as *tls.Conn that expose it with NetConn.
func tcpConnOf(c net.Conn) (*net.TCPConn, bool) {
	for range 8 { // wrappers nest a level or two; the bound only guards against cycles
		switch t := c.(type) {
		case *net.TCPConn:
			return t, true
		case interface{ NetConn() net.Conn }:
			c = t.NetConn()
		default:
			return nil, false
		}
	}
	return nil, false
}

// refuse answers status with the configured Retry-After, forwarding nothing.
func (p *Proxy) refuse(w http.ResponseWriter, kind Kind, status int) {
	w.Header().Set("Retry-After", p.retryAfter)
	http.Error(w, "chaos: injected fault "+kind.String(), status)
}

// stall holds the response back until the client gives up, MaxStall
// elapses or the proxy closes, then hangs up. It waits on channels only,
// so it leaves nothing running behind it whichever comes first.
func (p *Proxy) stall(w http.ResponseWriter, r *http.Request) {
	timer := time.NewTimer(p.maxStall)
	defer timer.Stop()
	select {
	case <-r.Context().Done():
	case <-timer.C:
	case <-p.closing:
	}
	// Close also closes the client's connection, which ends its request
	// context: when both happened, the proxy closing is the cause.
	reason := "max stall elapsed"
	select {
	case <-p.closing:
		reason = "proxy closed"
	default:
		if r.Context().Err() != nil {
			reason = "client gave up"
		}
	}
	p.log.Info("chaos: stall ended", "reason", reason, "method", r.Method,
		"path", r.URL.Path, "idempotency_key", r.Header.Get(p.keyHeader))
	hangUp(w)
}

// relayPart relays the upstream status and headers with a Content-Length
// for the whole body, then the first half of the body (rounded down), then
// hangs up. resp's header has already lost its hop-by-hop fields to the
// reverse proxy. An empty body has no shorter prefix: then nothing is
// relayed at all.
func relayPart(w http.ResponseWriter, resp *http.Response, body []byte) {
	if len(body) == 0 {
		hangUp(w)
		return
	}
	h := w.Header()
	for name, values := range resp.Header {
		h[name] = values
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(body[:len(body)/2]) // a client that is gone is hung up on anyway
	_ = http.NewResponseController(w).Flush()
	hangUp(w)
}

// answerInFlight is the InFlight fault: it forwards r to upstream i and,
// once the request is written there, answers the client with the
// configured in-flight answer while the upstream works on it; then it
// cancels the upstream exchange and waits for it to end. An upstream that
// fails before the request is written is answered 502, as for any
// forwarded request.
func (p *Proxy) answerInFlight(w http.ResponseWriter, r *http.Request, i int) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	wrote := make(chan struct{})
	var once sync.Once
	trace := &httptrace.ClientTrace{WroteRequest: func(info httptrace.WroteRequestInfo) {
		if info.Err == nil { // net/http may write a request again on a new connection
			once.Do(func() { close(wrote) })
		}
	}}
	done := make(chan error, 1)
	go func() {
		_, _, err := p.routes[i].forward.roundTrip(r.WithContext(httptrace.WithClientTrace(ctx, trace)))
		done <- err
	}()
	select {
	case <-wrote:
	case err := <-done:
		if err != nil {
			p.upstreamFailed(w, r, i, err)
			return
		}
		// Answered before the write was reported: it still gets the
		// in-flight answer, as a client may when the first request ends
		// as its retry is refused.
		done <- nil
	}
	p.injected(InFlight, r)
	h := w.Header()
	for name, values := range p.inFlight.Header {
		h[name] = values
	}
	if h.Get("Content-Type") == "" {
		h.Set("Content-Type", "text/plain; charset=utf-8")
	}
	h.Set("Retry-After", p.retryAfter)
	h.Set("Content-Length", strconv.Itoa(len(p.inFlightBody())))
	w.WriteHeader(p.inFlightStatus())
	_, _ = w.Write(p.inFlightBody()) // a client that is gone has gone
	_ = http.NewResponseController(w).Flush()
	cancel()
	<-done
}

// inFlightStatus is the status of the in-flight answer.
func (p *Proxy) inFlightStatus() int {
	if p.inFlight.Status == 0 {
		return http.StatusConflict
	}
	return p.inFlight.Status
}

// inFlightBody is the body of the in-flight answer.
func (p *Proxy) inFlightBody() []byte {
	if p.inFlight.Body == nil && p.inFlight.Header == nil {
		return []byte("chaos: injected fault in-flight\n")
	}
	return p.inFlight.Body
}
