package main

// The careful job of idem demo: the batch as a careful user writes it
// without idem. It charges through go-retryablehttp with one
// Idempotency-Key per charge, minted in memory (a UUIDv4, as stripe-go
// mints one per request) and reused by every retry of that charge while the
// process lives, also in later rounds. It records each finished row in a
// done file, fsync'd, after the row's answer arrived; started again, it
// skips the rows the done file holds and runs the others under new keys,
// since the old ones died with the process that minted them. The demo
// kills it at the same point as the idem batch and starts it again; it
// reports on stdout as it goes (see demo_careful_protocol.go).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"sync"

	"github.com/google/uuid"
	"github.com/hashicorp/go-retryablehttp"
	"github.com/idemkit/idem/testserver"
)

// demoBatchCareful, as the value of demoBatchEnv, makes the process the
// demo's careful job.
const demoBatchCareful = "careful"

// carefulJobArgs returns the arguments that start the careful job on the
// done file at path, charging n invoices through url.
func carefulJobArgs(url, path string, n int) []string {
	return []string{"demo", "-url", url, "-done", path, "-ops", fmt.Sprint(n)}
}

// runCarefulJob is the careful job: it charges every invoice its done file
// does not hold, in rounds, until each is recorded done, and exits 0, or
// exits 1 after demoMaxRounds rounds, when the done file cannot be written,
// or when ctx ends.
func runCarefulJob(ctx context.Context, e env, args []string) int {
	const cmd = "idem demo (careful job)"
	fs := newFlagSet(cmd)
	url := fs.String("url", "", "base URL of the server")
	path := fs.String("done", "", "done file path")
	n := fs.Int("ops", 0, "number of invoices")
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "Usage: %s=%s idem demo -url URL -done PATH -ops N\n\nThe careful job of idem demo, which starts it.\n", demoBatchEnv, demoBatchCareful)
		writeFlags(w, fs)
	}
	pos, code, ok := parseFlags(fs, e, args, usage)
	if !ok {
		return code
	}
	if len(pos) != 0 || *url == "" || *path == "" || *n < 1 {
		return usageError(e, cmd, "want -url, -done and a positive -ops, and no arguments")
	}
	fail := func(err error) int {
		fmt.Fprintf(e.stderr, "%s: %v\n", cmd, err)
		return exitFailure
	}

	done, recorded, err := openDoneFile(*path)
	if err != nil {
		return fail(err)
	}
	defer done.close()
	rep := &carefulReport{w: e.stdout}
	rep.start(len(recorded))
	var left []*carefulRow
	for _, ch := range demoCharges(*n) {
		if !recorded[ch.ID] {
			left = append(left, &carefulRow{charge: ch})
		}
	}

	tr := newTransport()
	defer tr.CloseIdleConnections()
	c := newCarefulClient(&http.Client{Transport: tr, Timeout: demoAttemptTimeout}, rep)
	total := len(recorded)
	for round := 1; len(left) > 0; round++ {
		failed, n, err := carefulRound(ctx, c, *url, left, done, rep)
		total += n
		if err != nil {
			return fail(err)
		}
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		rep.round(total, len(failed))
		if len(failed) > 0 && round == demoMaxRounds {
			return fail(fmt.Errorf("%d invoices still not charged after %d rounds", len(failed), round))
		}
		left = failed
	}
	if err := rep.err(); err != nil {
		return fail(err)
	}
	return exitOK
}

// carefulRow is an invoice the careful job has to charge, and the key it
// minted for it: in memory, so for this process only.
type carefulRow struct {
	charge demoCharge
	key    string // minted before the first attempt; "" until then
}

// carefulRound charges the rows demoConcurrency at a time, records each
// one that got its 201 in the done file, and returns the rows that did not
// and how many it recorded. It stops at the first error of the done file.
func carefulRound(ctx context.Context, c *retryablehttp.Client, url string, rows []*carefulRow, done *doneFile, rep *carefulReport) (failed []*carefulRow, recorded int, err error) {
	var mu sync.Mutex
	var errs []error
	work := make(chan *carefulRow)
	var wg sync.WaitGroup
	for range min(demoConcurrency, len(rows)) {
		wg.Go(func() {
			for row := range work {
				if row.key == "" {
					row.key = uuid.NewString()
				}
				cerr := chargeCareful(ctx, c, url, row)
				if cerr == nil {
					rep.answer(row.charge.ID)
					cerr = done.record(row.charge.ID)
					if cerr != nil {
						mu.Lock()
						errs = append(errs, cerr)
						mu.Unlock()
						continue
					}
					rep.recorded(row.charge.ID)
				} else {
					rep.gaveUp(row.charge.ID)
				}
				mu.Lock()
				if cerr == nil {
					recorded++
				} else {
					failed = append(failed, row)
				}
				mu.Unlock()
			}
		})
	}
feed:
	for _, row := range rows {
		mu.Lock()
		stop := len(errs) > 0
		mu.Unlock()
		if stop {
			break
		}
		select {
		case work <- row:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	return failed, recorded, errors.Join(errs...)
}

// carefulInvoice is the context key of the invoice a request charges, for
// the report of its attempts.
type carefulInvoice struct{}

// newCarefulClient returns a go-retryablehttp client with the demo's
// attempt timeout (hc's Timeout), attempts and waits. It retries what
// go-retryablehttp retries, and 409 too, as stripe-go does: the server's
// answer while another attempt under the same key is still running. Before
// each attempt it reports the invoice and the key.
func newCarefulClient(hc *http.Client, rep *carefulReport) *retryablehttp.Client {
	c := retryablehttp.NewClient()
	c.HTTPClient = hc
	c.Logger = nil
	c.RetryMax = demoMaxAttempts - 1
	c.RetryWaitMin = demoInitialWait
	c.RetryWaitMax = demoMaxWait
	c.CheckRetry = func(ctx context.Context, resp *http.Response, err error) (bool, error) {
		if err == nil && resp.StatusCode == http.StatusConflict && ctx.Err() == nil {
			return true, nil
		}
		return retryablehttp.DefaultRetryPolicy(ctx, resp, err)
	}
	c.RequestLogHook = func(_ retryablehttp.Logger, req *http.Request, _ int) {
		id, _ := req.Context().Value(carefulInvoice{}).(string)
		rep.sent(id, req.Header.Get(testserver.HeaderIdempotencyKey))
	}
	return c
}

// chargeCareful sends the row's charge under the row's key, with retries.
// The response body is read inside the retry loop, so that a body cut
// short is retried like any other failed attempt.
func chargeCareful(ctx context.Context, c *retryablehttp.Client, url string, row *carefulRow) error {
	ctx = context.WithValue(ctx, carefulInvoice{}, row.charge.ID)
	req, err := retryablehttp.NewRequestWithContext(ctx, http.MethodPost, url+"/charges", row.charge.Body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(testserver.HeaderClientID, demoClientID)
	req.Header.Set(testserver.HeaderIdempotencyKey, row.key)
	req.SetResponseHandler(func(resp *http.Response) error {
		defer resp.Body.Close()
		_, err := io.Copy(io.Discard, resp.Body)
		return err
	})
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("%s: status %s", row.charge.ID, resp.Status)
	}
	return nil
}

// doneFile is the careful job's record of finished rows: one invoice ID a
// line, each line written with one write and fsync'd before the job
// reports the row recorded.
type doneFile struct {
	mu sync.Mutex
	f  *os.File
}

// openDoneFile opens the done file at path, creating it if need be, and
// returns it with the rows it holds. A last line without its newline (a
// write the kill cut short) holds no row, and is cut off.
func openDoneFile(path string) (*doneFile, map[string]bool, error) {
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("reading the done file: %w", err)
	}
	rows, n := parseDoneFile(data)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("opening the done file: %w", err)
	}
	if n < len(data) {
		if err := errors.Join(f.Truncate(int64(n)), f.Sync()); err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("cutting a torn line off the done file: %w", err)
		}
	}
	return &doneFile{f: f}, rows, nil
}

// readDoneFile returns the rows the done file at path holds, as the job
// would read them when it starts.
func readDoneFile(path string) (map[string]bool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the done file: %w", err)
	}
	rows, _ := parseDoneFile(data)
	return rows, nil
}

// parseDoneFile returns the rows of a done file's bytes, and how many of
// the bytes are whole lines.
func parseDoneFile(data []byte) (map[string]bool, int) {
	rows := map[string]bool{}
	n := bytes.LastIndexByte(data, '\n') + 1
	for line := range bytes.Lines(data[:n]) {
		if id := string(bytes.TrimSuffix(line, []byte("\n"))); id != "" {
			rows[id] = true
		}
	}
	return rows, n
}

// record appends id to the done file and fsyncs it.
func (d *doneFile) record(id string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.f.WriteString(id + "\n"); err != nil {
		return fmt.Errorf("recording %s in the done file: %w", id, err)
	}
	if err := d.f.Sync(); err != nil {
		return fmt.Errorf("recording %s in the done file: %w", id, err)
	}
	return nil
}

func (d *doneFile) close() error { return d.f.Close() }
