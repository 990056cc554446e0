package main

import (
	"context"
	"net/url"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/pgjournal"
)

// A journal location, wherever a command takes one, is a file path or a
// postgres:// (or postgresql://) URL naming a shared PostgreSQL journal.
// The URL's fragment, if any, is the journal's namespace:
// postgres://idem@db/jobs#nightly.

// openedJournal is a journal a command opened and must close.
type openedJournal interface {
	idem.Journal
	Close() error
}

// isShared reports whether loc names a PostgreSQL journal.
func isShared(loc string) bool {
	return strings.HasPrefix(loc, "postgres://") || strings.HasPrefix(loc, "postgresql://")
}

// openShared opens the PostgreSQL journal at loc, creating or upgrading its
// tables.
func openShared(ctx context.Context, e env, loc string, ttl time.Duration) (*pgjournal.Journal, error) {
	dsn, namespace, _ := strings.Cut(loc, "#")
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return pgjournal.Open(ctx, dsn, pgjournal.Options{
		Namespace: namespace,
		KeyTTL:    ttl,
		Logger:    warnLogger(e.stderr),
	})
}

// displayLocation returns loc as messages show it: a URL without its
// password.
func displayLocation(loc string) string {
	if !isShared(loc) {
		return loc
	}
	u, err := url.Parse(loc)
	if err != nil {
		return "the PostgreSQL URL given"
	}
	return u.Redacted()
}
