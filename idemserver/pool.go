package idemserver

import (
	"github.com/idemkit/idem/internal/sqlkit"
)

// poolWatch tells, for the log of a request whose work ran out of time,
// whether its handler may have waited for a connection of the pool: an
// acquire waits only when every connection the pool may open is in use,
// so acquires that waited while the handler ran mean the pool was
// exhausted then, rather than a lock the transaction waited for.
type poolWatch struct {
	k     *Keys
	start sqlkit.PoolStats // when the handler began its last run
}

// handlerRuns notes the pool as the handler begins a run, its
// transaction holding its connection already: an acquire that waits from
// now on is not the transaction's own.
func (p *poolWatch) handlerRuns() { p.start = p.k.db.Pool() }

// exhausted reports whether acquires waited for a connection since the
// handler began its last run, and how many. Only a bounded pool makes an
// acquire wait, and only when every connection it may open is in use.
func (p *poolWatch) exhausted() (bool, int64) {
	waited := p.k.db.Pool().Waited - p.start.Waited
	return waited > 0, waited
}
