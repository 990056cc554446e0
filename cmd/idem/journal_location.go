package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/idemkit/idem/journal"
	"github.com/idemkit/idem/pgjournal"
)

// A journal location, wherever a command takes one, is a file path or a
// postgres:// (or postgresql://) URL naming a shared PostgreSQL journal.
// The URL's fragment, if any, is the journal's namespace, percent-encoded
// as a URL's fragment is: postgres://idem@db/jobs#nightly%20charges. Its
// query parameter allow_async_replication=true is idem's (cutAllowAsync).

// openedJournal is a journal a command opened and must close.
type openedJournal interface {
	journal.Journal
	Close() error
}

// isShared reports whether loc names a PostgreSQL journal.
func isShared(loc string) bool {
	return strings.HasPrefix(loc, "postgres://") || strings.HasPrefix(loc, "postgresql://")
}

// openShared opens the PostgreSQL journal at loc. With migrate it creates
// or upgrades the journal's tables; without, it changes nothing in the
// database and fails with pgjournal.ErrNotMigrated where they are missing.
// A command that writes (writes) gets the journal's check of the
// replication (F12): a primary whose standbys are all asynchronous is
// refused, unless the URL says allow_async_replication=true, and then the
// journal warns. A command that only reads has no commit to lose, and
// neither checks nor warns.
func openShared(ctx context.Context, e env, loc string, migrate, writes bool) (*pgjournal.Journal, error) {
	dsn, namespace, err := splitShared(loc)
	if err != nil {
		return nil, err
	}
	dsn, allow := cutAllowAsync(dsn)
	log := warnLogger(e.stderr)
	if !writes {
		allow = true
		log = slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return pgjournal.Open(ctx, dsn, pgjournal.Options{
		Namespace:             namespace,
		NoMigrate:             !migrate,
		AllowAsyncReplication: allow,
		Logger:                log,
	})
}

// allowAsyncParam is the parameter of a journal URL that accepts a primary
// whose standbys are all asynchronous (pgjournal.Options.AllowAsyncReplication).
const allowAsyncParam = "allow_async_replication"

// cutAllowAsync returns dsn without its allow_async_replication parameter,
// which is idem's and not the database's, and whether it was true.
func cutAllowAsync(dsn string) (string, bool) {
	base, query, ok := strings.Cut(dsn, "?")
	if !ok {
		return dsn, false
	}
	var kept []string
	allow := false
	for _, p := range strings.Split(query, "&") {
		if k, v, _ := strings.Cut(p, "="); k == allowAsyncParam {
			allow = v == "true"
			continue
		}
		kept = append(kept, p)
	}
	if len(kept) == 0 {
		return base, allow
	}
	return base + "?" + strings.Join(kept, "&"), allow
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
