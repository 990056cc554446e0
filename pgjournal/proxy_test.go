package pgjournal_test

import (
	"net"
	"net/url"
	"sync"
	"testing"
	"time"
)

// proxy forwards TCP to the database; Freeze stops forwarding, without
// closing anything: a network partition between one machine and the
// database, or a database that stopped answering.
type proxy struct {
	ln       net.Listener
	upstream string
	mu       sync.Mutex
	cond     *sync.Cond
	frozen   bool
	delay    time.Duration // before each chunk forwarded
	answers  time.Duration // before each chunk forwarded from the server, after delay
	requests bool          // chunks to the server are held (FreezeRequests)
	conns    []net.Conn
}

// newProxy returns a proxy to dsn's server and the DSN through it.
func newProxy(t *testing.T, dsn string) (*proxy, string) {
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, upstream: u.Host}
	p.cond = sync.NewCond(&p.mu)
	go p.serve()
	t.Cleanup(p.close)
	u.Host = ln.Addr().String()
	return p, u.String()
}

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.upstream)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		go p.pipe(c, up, false)
		go p.pipe(up, c, true)
	}
}

// pipe forwards from to to: the server's answers, or the requests to it.
func (p *proxy) pipe(from, to net.Conn, answers bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.frozen || !answers && p.requests {
				p.cond.Wait()
			}
			delay := p.delay
			if answers {
				delay += p.answers
			}
			p.mu.Unlock()
			time.Sleep(delay)
			if _, werr := to.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			to.Close()
			return
		}
	}
}

// Freeze stops (on) or resumes forwarding.
func (p *proxy) Freeze(on bool) {
	p.mu.Lock()
	p.frozen = on
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Delay makes each chunk forwarded from now on wait d: a slow network, or
// a slow database.
func (p *proxy) Delay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// DelayAnswers makes each chunk the server sends from now on wait d: a
// statement runs at once, and its answer comes late.
func (p *proxy) DelayAnswers(d time.Duration) {
	p.mu.Lock()
	p.answers = d
	p.mu.Unlock()
}

// FreezeRequests stops (on) or resumes forwarding to the server, while
// its answers still come: a statement already sent is answered, none
// sent from now on arrives.
func (p *proxy) FreezeRequests(on bool) {
	p.mu.Lock()
	p.requests = on
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Cut closes every connection through the proxy and resumes forwarding
// for new ones: what a frozen connection had buffered is lost, as when the
// database restarts or the machine's connections are reset.
func (p *proxy) Cut() {
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.frozen = false
	p.cond.Broadcast()
	p.mu.Unlock()
}

func (p *proxy) close() {
	p.Freeze(false)
	p.FreezeRequests(false)
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
}
