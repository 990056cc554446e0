package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/pgjournal"
)

// A journal location, wherever a command takes one, is a file path or a
// postgres:// (or postgresql://) URL naming a shared PostgreSQL journal.
// The URL's fragment, if any, is the journal's namespace, percent-encoded
// as a URL's fragment is: postgres://idem@db/jobs#nightly%20charges.

// openedJournal is a journal a command opened and must close.
type openedJournal interface {
	idem.Journal
	Close() error
}

// isShared reports whether loc names a PostgreSQL journal.
func isShared(loc string) bool {
	return strings.HasPrefix(loc, "postgres://") || strings.HasPrefix(loc, "postgresql://")
}

// openShared opens the PostgreSQL journal at loc. With migrate it creates
// or upgrades the journal's tables; without, it changes nothing in the
// database and fails with pgjournal.ErrNotMigrated where they are missing.
func openShared(ctx context.Context, e env, loc string, ttl time.Duration, migrate bool) (*pgjournal.Journal, error) {
	dsn, namespace, err := splitShared(loc)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return pgjournal.Open(ctx, dsn, pgjournal.Options{
		Namespace: namespace,
		KeyTTL:    ttl,
		NoMigrate: !migrate,
		Logger:    warnLogger(e.stderr),
	})
}

// errBadNamespace is the error of a location whose fragment does not
// decode.
var errBadNamespace = errors.New("the namespace after # is not a valid percent-encoded fragment")

// splitShared returns the DSN and the namespace, decoded, of the shared
// journal location loc.
func splitShared(loc string) (dsn, namespace string, err error) {
	dsn, fragment, _ := strings.Cut(loc, "#")
	namespace, err = url.PathUnescape(fragment)
	if err != nil {
		return "", "", fmt.Errorf("%w: %w", errBadNamespace, err)
	}
	return dsn, namespace, nil
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
