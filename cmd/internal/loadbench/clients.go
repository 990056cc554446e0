package loadbench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-retryablehttp"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/pgjournal"
)

// A driver sends one operation at a time for one worker; the workers of a
// cell share it.
type driver interface {
	// do sends the n-th operation of worker w and reads its answer whole.
	do(ctx context.Context, w int, n uint64) error
	// close releases what the driver holds.
	close() error
}

// newTransport returns the transport every client of a cell uses: pooled
// keep-alive connections, as many idle ones per host as there are callers
// (net/http's default of 2 would make the clients at higher concurrency
// measure connection setup instead of themselves).
func newTransport(concurrency int) *http.Transport {
	return &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        max(100, concurrency),
		MaxIdleConnsPerHost: concurrency,
		IdleConnTimeout:     90 * time.Second,
	}
}

// newDriver returns the driver for client c sending to ep, over tr. A
// journal goes in dir, named after seq.
func newDriver(c Client, ep *endpoint, tr *http.Transport, dir, pgDSN string, seq int) (driver, error) {
	hc := &http.Client{Transport: tr}
	switch c {
	case ClientNetHTTP:
		return &plainDriver{url: ep.url, keyed: ep.keyed, hc: hc}, nil
	case ClientNetHTTPFsync:
		f, err := os.OpenFile(filepath.Join(dir, "intents-"+strconv.Itoa(seq)), os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return nil, fmt.Errorf("loadbench: %w", err)
		}
		return &fsyncDriver{plainDriver: plainDriver{url: ep.url, keyed: ep.keyed, hc: hc}, f: f}, nil
	case ClientRetryable:
		rc := retryablehttp.NewClient()
		rc.HTTPClient = hc
		rc.Logger = nil
		return &retryableDriver{url: ep.url, keyed: ep.keyed, rc: rc}, nil
	case ClientIdem:
		ic, err := idem.New(idem.Config{HTTPClient: hc})
		if err != nil {
			return nil, fmt.Errorf("loadbench: %w", err)
		}
		return &idemDriver{url: ep.url, c: ic}, nil
	case ClientIdemJournal:
		j, err := filejournal.Open(filepath.Join(dir, "ops-"+strconv.Itoa(seq)+".journal"), filejournal.Options{})
		if err != nil {
			return nil, fmt.Errorf("loadbench: %w", err)
		}
		ic, err := idem.New(idem.Config{HTTPClient: hc, Journal: j})
		if err != nil {
			j.Close()
			return nil, fmt.Errorf("loadbench: %w", err)
		}
		return &idemDriver{url: ep.url, c: ic, journal: j}, nil
	case ClientIdemPostgres:
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		j, err := pgjournal.Open(ctx, pgDSN, pgjournal.Options{Namespace: "bench-" + strconv.Itoa(seq)})
		if err != nil {
			return nil, fmt.Errorf("loadbench: %w", err)
		}
		ic, err := idem.New(idem.Config{HTTPClient: hc, Journal: j})
		if err != nil {
			j.Close()
			return nil, fmt.Errorf("loadbench: %w", err)
		}
		return &idemDriver{url: ep.url, c: ic, pg: j, closer: j.Close}, nil
	}
	return nil, fmt.Errorf("loadbench: unknown client %q", c)
}

// finish reads an answer whole and checks that it is the 201 every request
// of the workload gets.
func finish(resp *http.Response, err error) error {
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusCreated {
		err = fmt.Errorf("status %s", resp.Status)
	}
	return err
}

// plainDriver sends with net/http: a new key per request.
type plainDriver struct {
	url   string
	keyed bool
	hc    *http.Client
}

func (d *plainDriver) do(ctx context.Context, _ int, _ uint64) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url, bytes.NewReader(requestBody))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if d.keyed {
		req.Header.Set("Idempotency-Key", uuid.NewString())
	}
	return finish(d.hc.Do(req))
}

func (d *plainDriver) close() error { return nil }

// fsyncDriver is plainDriver that makes a small record durable (write and
// fsync) before each request.
type fsyncDriver struct {
	plainDriver
	f *os.File
}

// intentRecord is about the size of a journal's intent record.
var intentRecord = make([]byte, fsyncWriteSize)

func (d *fsyncDriver) do(ctx context.Context, w int, n uint64) error {
	if _, err := d.f.Write(intentRecord); err != nil {
		return err
	}
	if err := d.f.Sync(); err != nil {
		return err
	}
	return d.plainDriver.do(ctx, w, n)
}

func (d *fsyncDriver) close() error {
	err := d.f.Close()
	if rerr := os.Remove(d.f.Name()); err == nil {
		err = rerr
	}
	return err
}

// retryableDriver sends with go-retryablehttp's defaults: a new key per
// request, reused by its retries.
type retryableDriver struct {
	url   string
	keyed bool
	rc    *retryablehttp.Client
}

func (d *retryableDriver) do(ctx context.Context, _ int, _ uint64) error {
	req, err := retryablehttp.NewRequestWithContext(ctx, http.MethodPost, d.url, requestBody)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if d.keyed {
		req.Header.Set("Idempotency-Key", uuid.NewString())
	}
	return finish(d.rc.Do(req))
}

func (d *retryableDriver) close() error { return nil }

// idemDriver sends each request as a new operation of an idem.Client,
// with or without a journal.
type idemDriver struct {
	url     string
	c       *idem.Client
	journal *filejournal.Journal // nil without one
	pg      *pgjournal.Journal   // nil without one
	closer  func() error         // closes another journal, if any
}

func (d *idemDriver) do(ctx context.Context, w int, n uint64) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url, bytes.NewReader(requestBody))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	return finish(d.c.Do(opID(w, n), req))
}

// opID names the n-th operation of worker w.
func opID(w int, n uint64) string {
	var b [40]byte
	id := append(b[:0], "op-"...)
	id = strconv.AppendInt(id, int64(w), 10)
	id = append(id, '-')
	id = strconv.AppendUint(id, n, 10)
	return string(id)
}

// syncs returns the file journal's fsync count, or the PostgreSQL
// journal's intent commits (each a WAL flush), or 0 without a journal.
func (d *idemDriver) syncs() uint64 {
	switch {
	case d.journal != nil:
		return d.journal.Stats().Syncs
	case d.pg != nil:
		return d.pg.Stats().IntentCommits
	}
	return 0
}

func (d *idemDriver) close() error {
	switch {
	case d.journal != nil:
		return d.journal.Close()
	case d.closer != nil:
		return d.closer()
	}
	return nil
}
