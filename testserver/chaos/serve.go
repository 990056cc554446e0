package chaos

import (
	"fmt"
	"net"
	"net/http"
)

// Serve accepts HTTP connections on ln and serves the proxy on them until
// Close, which closes ln and the connections. Serve may run on several
// listeners at once. Like http.Server.Serve it always returns a non-nil
// error: after Close, http.ErrServerClosed.
func (p *Proxy) Serve(ln net.Listener) error {
	srv := &http.Server{Handler: p, ErrorLog: p.errorLog, ConnState: p.track}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = ln.Close()
		return http.ErrServerClosed
	}
	p.servers = append(p.servers, srv)
	p.serving.Add(1)
	p.mu.Unlock()
	defer p.serving.Done()
	// If Close ran since the lock was released, srv is already closed and
	// Serve returns at once, closing ln.
	return srv.Serve(ln)
}

// track keeps the set of open connections of the servers Serve runs, so
// that Close can wait for every one of them to end.
func (p *Proxy) track(c net.Conn, state http.ConnState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch state {
	case http.StateNew:
		p.conns[c] = struct{}{}
		p.connsOpen.Add(1)
	case http.StateHijacked, http.StateClosed:
		if _, ok := p.conns[c]; ok {
			delete(p.conns, c)
			p.connsOpen.Done()
		}
	}
}

// Server is a Proxy serving on a loopback address, for tests: the chaos
// counterpart of httptest.Server.
type Server struct {
	*Proxy

	// URL is the proxy's base URL, "http://127.0.0.1:port", with no
	// trailing slash. Requests to URL+path are forwarded to
	// Config.Upstream+path.
	URL string

	served chan struct{} // closed when Serve has returned
}

// Listen starts a Proxy for cfg on a fresh port of 127.0.0.1. Close the
// Server when done; that closes the Proxy too.
func Listen(cfg Config) (*Server, error) {
	p, err := New(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = p.Close()
		return nil, fmt.Errorf("chaos: listening on loopback: %w", err)
	}
	s := &Server{Proxy: p, URL: "http://" + ln.Addr().String(), served: make(chan struct{})}
	go func() {
		defer close(s.served)
		_ = p.Serve(ln) // ends with http.ErrServerClosed when Close runs
	}()
	return s, nil
}

// Close closes the proxy (see Proxy.Close) and returns once the server has
// stopped serving.
func (s *Server) Close() error {
	err := s.Proxy.Close()
	<-s.served
	return err
}
