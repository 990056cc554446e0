package chaos

import (
	"net"
	"net/http"
	"strconv"
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
		"path", r.URL.Path, "idempotency_key", r.Header.Get("Idempotency-Key"))
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
