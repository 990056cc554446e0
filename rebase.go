package idem

// Moving an API: resuming journaled operations against a new base URL.
//
// An operation's fingerprint covers its whole URL (keys.go), so a request
// sent to a new host or path prefix is, by default, a different request:
// Do refuses it with ErrMismatch rather than send it under a key minted
// for another URL. When the API itself moved (a new host name, a new
// version prefix that answers for the same resources and keeps the same
// keys), the operations pending in the journal must still resume under
// their keys, or a rerun could apply them twice. Config.BaseURLMoves says
// which moves are the same API:
//
//	idem.Config{BaseURLMoves: map[string]string{
//		"https://api.old.example/v1/": "https://api.example/v1/",
//	}}
//
// A journaled operation whose fingerprint differs from the request's is
// then admitted when the request's URL starts with a new prefix and the
// request, with that prefix replaced by the old one, has exactly the
// journaled fingerprint: same method, same rest of the URL (path and
// query), same body. Anything else is still refused with ErrMismatch. The
// journal keeps the operation's recorded URL; the attempts go to the new
// one. End prefixes with "/" so that a prefix cannot match another host
// ("https://api.old.example" also starts "https://api.old.example.evil/").

import (
	"io"
	"net/http"
	"strings"

	"github.com/idemkit/idem/journal"
)

// movedFrom reports whether req is op's request moved by one of the
// Config.BaseURLMoves: the fingerprint of req with the new prefix replaced
// by the old one is op's.
func (c *Client) movedFrom(op journal.Operation, req *http.Request, body requestBody) bool {
	moves := c.cfg.BaseURLMoves
	if len(moves) == 0 {
		return false
	}
	now := req.URL.String()
	for old, moved := range moves {
		rest, ok := strings.CutPrefix(now, moved)
		if !ok || old == moved {
			continue
		}
		fp, ok := fingerprintAt(req.Method, old+rest, body)
		if ok && fp == op.Fingerprint {
			c.log.Info("idem: resuming an operation at its moved URL",
				"op", op.ID, "key", op.Key, "from", old, "to", moved)
			return true
		}
	}
	return false
}

// fingerprintAt returns the fingerprint of the request of method with body
// had it been sent to url, and false if the body could not be read again.
func fingerprintAt(method, url string, body requestBody) (journal.Fingerprint, bool) {
	w := newFingerprintWriter(method, url)
	switch b := body.rewind.(type) {
	case nil:
	case []byte:
		w.Write(b)
	case getBody:
		r, err := b.open()
		if err != nil {
			return journal.Fingerprint{}, false
		}
		_, err = io.Copy(w, r)
		r.Close()
		if err != nil {
			return journal.Fingerprint{}, false
		}
	default:
		return journal.Fingerprint{}, false
	}
	return w.Sum(), true
}
