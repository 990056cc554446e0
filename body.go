package idem

import (
	"bytes"
	"fmt"
	"io"
	"net/http"

	"github.com/hashicorp/go-retryablehttp"
)

// Bodies. A request body must go out byte-identical on every attempt, and
// its bytes are part of the operation's fingerprint. go-retryablehttp
// rewinds it between attempts; this file only decides what it rewinds:
//
//   - a request with GetBody is read through GetBody, once to fingerprint
//     and once per attempt, and never held in memory;
//   - any other body is read into memory, up to Config.MaxBufferedBody
//     (ErrBodyTooLarge beyond), because go-retryablehttp would otherwise read
//     an io.Reader of any size in full.
//
// GetBody must return the same bytes each time it is called.

// captureBody takes the body out of req, returning what go-retryablehttp
// rewinds (nil, a []byte or a ReaderFunc) and the request's fingerprint.
// It closes req.Body, as http.Client.Do would.
func captureBody(req *http.Request, limit int64) (any, Fingerprint, error) {
	url := req.URL.String()
	if req.Body == nil || req.Body == http.NoBody {
		return nil, fingerprintOf(req.Method, url, nil), nil
	}
	if req.GetBody != nil {
		req.Body.Close()
		fp := newFingerprintWriter(req.Method, url)
		body, err := req.GetBody()
		if err != nil {
			return nil, Fingerprint{}, fmt.Errorf("idem: request GetBody: %w", err)
		}
		_, err = io.Copy(fp, body)
		body.Close()
		if err != nil {
			return nil, Fingerprint{}, fmt.Errorf("idem: reading request body: %w", err)
		}
		get := req.GetBody
		return retryablehttp.ReaderFunc(func() (io.Reader, error) { return get() }), fp.sum(), nil
	}
	defer req.Body.Close()
	buf, err := io.ReadAll(io.LimitReader(req.Body, limit+1))
	if err != nil {
		return nil, Fingerprint{}, fmt.Errorf("idem: reading request body: %w", err)
	}
	if int64(len(buf)) > limit {
		return nil, Fingerprint{}, fmt.Errorf("%w (%d bytes)", ErrBodyTooLarge, limit)
	}
	return buf, fingerprintOf(req.Method, url, buf), nil
}

// readPrefix reads up to limit+1 bytes of a response body, to record it or
// to report it. It returns the bytes read and whether the body ended within
// the limit. On a read error the body is left for the caller to close.
func readPrefix(body io.Reader, limit int64) ([]byte, bool, error) {
	buf, err := io.ReadAll(io.LimitReader(body, limit+1))
	if err != nil {
		return nil, false, err
	}
	if int64(len(buf)) > limit {
		return buf, false, nil
	}
	return buf, true, nil
}

// drain discards what is left of a response body, up to a bound, so the
// connection can be reused, and closes it.
func drain(body io.ReadCloser) {
	io.Copy(io.Discard, io.LimitReader(body, drainLimit))
	body.Close()
}

// drainLimit bounds how much of a discarded response body is read to keep
// its connection; beyond it the connection is closed instead.
const drainLimit = 64 << 10

// prefixedBody serves bytes already read from a body, then the rest of it.
type prefixedBody struct {
	io.Reader
	io.Closer
}

func withPrefix(prefix []byte, rest io.ReadCloser) io.ReadCloser {
	return prefixedBody{io.MultiReader(bytes.NewReader(prefix), rest), rest}
}

// recordedBody is the body of a response returned from the journal. When
// the original body was not kept, reading it fails with ErrBodyNotRecorded.
type recordedBody struct {
	r           *bytes.Reader
	notRecorded bool
}

func (b *recordedBody) Read(p []byte) (int, error) {
	if b.notRecorded {
		return 0, ErrBodyNotRecorded
	}
	return b.r.Read(p)
}

func (b *recordedBody) Close() error { return nil }

// Recorded reports whether resp was returned from the journal's record of a
// completed operation, without a network call, rather than received from
// the server in this Do.
func Recorded(resp *http.Response) bool {
	_, ok := resp.Body.(*recordedBody)
	return ok
}

// recordedResponse rebuilds the response an operation completed with.
func recordedResponse(op Operation, req *http.Request) *http.Response {
	body := &recordedBody{r: bytes.NewReader(op.Body), notRecorded: op.BodyTruncated}
	length := int64(len(op.Body))
	if op.BodyTruncated {
		length = -1
	}
	return &http.Response{
		Status:        fmt.Sprintf("%d %s", op.Status, http.StatusText(op.Status)),
		StatusCode:    op.Status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        op.Header.Clone(),
		Body:          body,
		ContentLength: length,
		Request:       req,
	}
}
