package chaos

import (
	"math/rand/v2"
	"sync"
)

// pcgStream is the second PCG seed word; the first is Config.Seed.
const pcgStream = 0x9e3779b97f4a7c15

// A chooser decides, once per matched request, which fault (if any) the
// request suffers. It draws one uniform number u in [0, 1) per request and
// lays the kinds' probabilities end to end on [0, 1) in Kind order: u
// falling in a kind's band picks that kind, u beyond the last band picks
// no fault. One draw per request, whatever the outcome, keeps the sequence
// of faults a function of the seed and the number of requests alone.
type chooser struct {
	mu    sync.Mutex
	rng   *rand.Rand // guarded by mu
	bands []band     // in Kind order; upTo strictly increasing
}

// band is the end of one kind's interval on [0, 1): the kind covers
// [previous band's upTo, upTo).
type band struct {
	kind Kind
	upTo float64
}

// newChooser builds the chooser for a Config that passed check.
func newChooser(c Config) *chooser {
	rates := c.Rates
	if rates == nil && c.Rate > 0 {
		kinds := c.Kinds
		if len(kinds) == 0 {
			kinds = AllKinds()
		}
		rates = make(map[Kind]float64, len(kinds))
		for _, k := range kinds {
			rates[k] = c.Rate / float64(len(kinds))
		}
	}
	var bands []band
	upTo := 0.0
	for k := Reset; k <= lastKind; k++ {
		if rates[k] > 0 {
			upTo += rates[k]
			bands = append(bands, band{kind: k, upTo: upTo})
		}
	}
	// Probabilities meant to add up to 1 may fall short of it by a rounding
	// error; let the last band cover the rest so such a chooser always
	// picks a fault.
	if n := len(bands); n > 0 && bands[n-1].upTo > 1-1e-9 {
		bands[n-1].upTo = 1
	}
	return &chooser{rng: rand.New(rand.NewPCG(uint64(c.Seed), pcgStream)), bands: bands}
}

// Faults returns the faults a proxy listening with c injects into the
// first n requests it matches, in the order it matches them; a request
// that suffers none gets the zero Kind. The sequence is fixed by c's seed
// and rates (see Config.Seed), so a test can choose a seed that draws the
// faults it needs. A Config that New refuses gets New's error, which
// wraps ErrInvalidConfig; n below zero gets no faults.
func Faults(c Config, n int) ([]Kind, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	ch := newChooser(c)
	out := make([]Kind, max(n, 0))
	for i := range out {
		out[i] = ch.next()
	}
	return out, nil
}

// next draws for one request and returns its fault, or noFault.
func (c *chooser) next() Kind {
	c.mu.Lock()
	u := c.rng.Float64()
	c.mu.Unlock()
	return c.pick(u)
}

// pick returns the kind whose band holds u, or noFault.
func (c *chooser) pick(u float64) Kind {
	for _, b := range c.bands {
		if u < b.upTo {
			return b.kind
		}
	}
	return noFault
}
