package sqlkit

import (
	"strconv"
	"strings"
	"sync"
)

// Placeholders is how a database spells a statement's parameters. The
// statements given to Bind are written with ? (the next argument) and ?N
// (argument N, counted from 1, for a value used twice), and hold no ?
// inside string literals.
type Placeholders uint8

const (
	// Numbered: ? and ?N as written (SQLite).
	Numbered Placeholders = iota
	// Dollar: $1, $2, ... (PostgreSQL).
	Dollar
	// Positional: ? only (MySQL); ?N becomes ? and its argument is
	// passed again in its place.
	Positional
)

// bound is a statement rewritten for its placeholders: its text and, for
// Positional, which argument goes in each place (nil: as given).
type bound struct {
	text  string
	order []int
}

// bind rewrites q for p.
func (p Placeholders) bind(q string) bound {
	if p == Numbered || !strings.Contains(q, "?") {
		return bound{text: q}
	}
	var b strings.Builder
	b.Grow(len(q) + 8)
	var order []int
	numbered := false
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] != '?' {
			b.WriteByte(q[i])
			continue
		}
		j := i + 1
		for j < len(q) && q[j] >= '0' && q[j] <= '9' {
			j++
		}
		arg := 0
		if j > i+1 {
			arg, _ = strconv.Atoi(q[i+1 : j])
			numbered = true
			i = j - 1
		} else {
			n++
			arg = n
		}
		if p == Dollar {
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(arg))
			continue
		}
		b.WriteByte('?')
		order = append(order, arg-1)
	}
	if !numbered {
		order = nil
	}
	return bound{text: b.String(), order: order}
}

// Rebind returns q with its placeholders rewritten for p. For
// Positional, q must not use ?N (Bind reorders the arguments).
func (p Placeholders) Rebind(q string) string { return p.bind(q).text }

// args returns the arguments in the order of b's places.
func (b bound) args(args []any) []any {
	if b.order == nil {
		return args
	}
	out := make([]any, len(b.order))
	for i, a := range b.order {
		if a >= 0 && a < len(args) {
			out[i] = args[a]
		}
	}
	return out
}

// Stmts rewrites statements for a flavour (its tokens and placeholders),
// each once: it keeps what it rewrote. It is safe for concurrent use.
type Stmts struct {
	flavor *Flavor
	repl   *strings.Replacer
	cache  sync.Map // statement as written -> bound
}

// NewStmts returns the statements of f, with extra tokens (such as the
// names of tables) besides the flavour's.
func NewStmts(f *Flavor, extra map[string]string) *Stmts {
	var pairs []string
	for k, v := range extra {
		pairs = append(pairs, k, v)
	}
	for k, v := range f.Tokens {
		pairs = append(pairs, k, v)
	}
	return &Stmts{flavor: f, repl: strings.NewReplacer(pairs...)}
}

// Text returns q with the tokens replaced and the placeholders
// rewritten, for a statement whose arguments need no reordering.
func (s *Stmts) Text(q string) string { return s.get(q).text }

// Bind returns q with the tokens replaced and the placeholders
// rewritten, and args in the order its placeholders take them.
func (s *Stmts) Bind(q string, args []any) (string, []any) {
	b := s.get(q)
	return b.text, b.args(args)
}

func (s *Stmts) get(q string) bound {
	if v, ok := s.cache.Load(q); ok {
		return v.(bound)
	}
	b := s.flavor.Placeholders.bind(s.repl.Replace(q))
	s.cache.Store(q, b)
	return b
}
