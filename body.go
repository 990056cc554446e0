package idem

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/idemkit/idem/journal"
)

// Bodies. A request body must go out byte-identical on every attempt, and
// its bytes are part of the operation's fingerprint. go-retryablehttp
// rewinds it between attempts, through attempts.openBody; this file only
// decides what it rewinds:
//
//   - a request with GetBody is read through GetBody, once to fingerprint
//     and once per attempt, and never held in memory;
//   - any other body is read into memory, up to Config.MaxBufferedBody
//     (ErrBodyTooLarge beyond), because go-retryablehttp would otherwise read
//     an io.Reader of any size in full.
//
// GetBody must return the same bytes each time it is called.

// requestBody is what each attempt sends (nil, a []byte or the request's
// getBody), the length to send (-1 or 0 for unknown), the request's
// fingerprint, and its URL as the fingerprint covers it.
type requestBody struct {
	rewind      any
	length      int64
	fingerprint journal.Fingerprint
	url         string
}

// getBody is a request's GetBody, which open calls.
type getBody func() (io.ReadCloser, error)

// open returns a new reader of the body: an error matching
// ErrInvalidRequest when GetBody fails or returns none.
func (g getBody) open() (io.ReadCloser, error) {
	body, err := g()
	if err == nil && body == nil {
		err = errors.New("returned no body")
	}
	if err != nil {
		return nil, fmt.Errorf("%w: request GetBody: %w", ErrInvalidRequest, err)
	}
	return body, nil
}

// captureBody takes the body out of req. It closes req.Body, as
// http.Client.Do would.
func captureBody(req *http.Request, limit int64) (requestBody, error) {
	url := req.URL.String()
	if req.Body == nil || req.Body == http.NoBody {
		return requestBody{fingerprint: journal.FingerprintOf(req.Method, url, nil), url: url}, nil
	}
	if req.GetBody != nil {
		req.Body.Close()
		get := getBody(req.GetBody)
		body, err := get.open()
		if err != nil {
			return requestBody{}, err
		}
		fp := newFingerprintWriter(req.Method, url)
		_, err = io.Copy(fp, body)
		body.Close()
		if err != nil {
			return requestBody{}, fmt.Errorf("reading request body: %w", err)
		}
		return requestBody{get, req.ContentLength, fp.Sum(), url}, nil
	}
	defer req.Body.Close()
	length := req.ContentLength
	if length == 0 {
		length = -1 // a client request's 0 is "unknown" when it has a body
	}
	buf, complete, err := readPrefix(req.Body, limit, length)
	if err != nil {
		return requestBody{}, fmt.Errorf("reading request body: %w", err)
	}
	if !complete {
		return requestBody{}, fmt.Errorf("%w (%d bytes; set Request.GetBody to stream it)", ErrBodyTooLarge, limit)
	}
	return requestBody{buf, int64(len(buf)), journal.FingerprintOf(req.Method, url, buf), url}, nil
}

// object returns b with its bytes in memory (read through GetBody, up to
// limit), for a dialect that puts the key in the body's field: an error
// matching ErrBodyNotObject unless they are a JSON object without it.
func (b requestBody) object(field string, limit int64) (requestBody, error) {
	if get, ok := b.rewind.(getBody); ok {
		r, err := get.open()
		if err != nil {
			return requestBody{}, err
		}
		buf, complete, err := readPrefix(r, limit, b.length)
		r.Close()
		switch {
		case err != nil:
			return requestBody{}, fmt.Errorf("reading request body: %w", err)
		case !complete:
			return requestBody{}, fmt.Errorf("%w (%d bytes; a body that carries the key is held in memory)", ErrBodyTooLarge, limit)
		}
		b.rewind, b.length = buf, int64(len(buf))
	}
	content, _ := b.rewind.([]byte)
	if err := checkBodyObject(content, field); err != nil {
		return requestBody{}, err
	}
	return b, nil
}

// readPrefix reads up to limit+1 bytes of a body, to record it or to
// report it. It returns the bytes read and whether the body ended within
// the limit. On a read error the body is left for the caller to close.
// length is the length the body announced, or -1: a body that announces
// it is read into one allocation, sized to see its end.
func readPrefix(body io.Reader, limit, length int64) ([]byte, bool, error) {
	probe := limit + 1
	if probe < 0 { // limit is math.MaxInt64: no limit
		probe = limit
	}
	size := int64(512) // io.ReadAll's first size
	if length >= 0 && length < readPrefixFirstMax {
		size = length + 1 // the byte past the announced length: where EOF shows
	}
	buf := make([]byte, 0, min(size, probe))
	for int64(len(buf)) < probe {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)] // grown as append grows it
		}
		room := int(min(int64(cap(buf)), probe))
		n, err := body.Read(buf[len(buf):room])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, false, err
		}
	}
	return buf, int64(len(buf)) <= limit, nil
}

// readPrefixFirstMax bounds the first buffer readPrefix sizes by a body's
// announced length, which a server may overstate.
const readPrefixFirstMax = 1 << 20

// drain discards what is left of a response body, up to a bound, so the
// connection can be reused, and closes it.
func drain(body io.ReadCloser) {
	io.Copy(io.Discard, io.LimitReader(body, drainLimit))
	body.Close()
}

// drainLimit bounds how much of a discarded response body is read to keep
// its connection; beyond it the connection is closed instead.
const drainLimit = 64 << 10

// bytesBody is a body read whole into memory.
type bytesBody struct{ bytes.Reader }

func (*bytesBody) Close() error { return nil }

// prefixedBody serves bytes already read from a body, then the rest of it.
type prefixedBody struct {
	io.Reader
	io.Closer
}

func withPrefix(prefix []byte, rest io.ReadCloser) io.ReadCloser {
	return prefixedBody{io.MultiReader(bytes.NewReader(prefix), rest), rest}
}

// recordedBody is the body of a response returned from the journal. When
// the original body was not kept, reading it fails with notRecorded, an
// error matching ErrBodyNotRecorded that says why.
type recordedBody struct {
	r           *bytes.Reader
	notRecorded error
}

func (b *recordedBody) Read(p []byte) (int, error) {
	if b.notRecorded != nil {
		return 0, b.notRecorded
	}
	return b.r.Read(p)
}

// Why a recorded body is missing, as reading it says.
var (
	errBodyOverLimit  = fmt.Errorf("idem: %w: it was larger than the client's recording limit (Config.MaxRecordedBody) when received", ErrBodyNotRecorded)
	errBodySummarized = fmt.Errorf("idem: %w: compaction summarized the operation once its outcome was KeyTTL old, keeping its status only", ErrBodyNotRecorded)
)

// whyNotRecorded returns the error reading op's recorded body fails with,
// or nil when the body was kept.
func whyNotRecorded(op journal.Operation) error {
	switch {
	case !op.BodyTruncated:
		return nil
	case op.Summarized:
		return errBodySummarized
	}
	return errBodyOverLimit
}

func (b *recordedBody) Close() error { return nil }

// Recorded reports whether resp was answered from the journal, without a
// network call.
func Recorded(resp *http.Response) bool {
	if resp == nil {
		return false
	}
	_, ok := resp.Body.(*recordedBody)
	return ok
}

// recordedResponse rebuilds the response an operation completed with.
func recordedResponse(op journal.Operation, req *http.Request) *http.Response {
	body := &recordedBody{r: bytes.NewReader(op.Body), notRecorded: whyNotRecorded(op)}
	length := int64(len(op.Body))
	if op.BodyTruncated {
		length = -1
	}
	header := op.Header.Clone()
	if header == nil {
		header = make(http.Header)
	}
	resp := &http.Response{
		Status:        fmt.Sprintf("%d %s", op.Status, http.StatusText(op.Status)),
		StatusCode:    op.Status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        header,
		Body:          body,
		ContentLength: length,
		Request:       req,
	}
	if op.Applied {
		markApplied(resp)
	}
	return resp
}
