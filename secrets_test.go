package idem_test

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/filejournal"
	"github.com/idemkit/idem/internal/journalhelp"
	"github.com/idemkit/idem/journal"
)

// TestNoSecretsAtRest is the secrets rule (secrets.go): a response that
// sets a session cookie, and a request URL with an access token and user
// info. The journal file, the logs and the errors hold none of the secret
// values; the operation still replays, saying which header it lacks, and a
// request with another token is still another request.
func TestNoSecretsAtRest(t *testing.T) {
	const cookie, token, password, signed = "session=c00k1e-s3cret", "t0k3n-s3cret", "pa55-s3cret", "s1gnature-s3cret"
	secretsIn := func(s string) []string {
		var found []string
		for _, v := range []string{"c00k1e-s3cret", token, password, signed} {
			if strings.Contains(s, v) {
				found = append(found, v)
			}
		}
		return found
	}
	fail := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if fail { // the first attempt breaks off: an error naming the URL
			fail = false
			hj, _ := w.(http.Hijacker)
			conn, _, _ := hj.Hijack()
			conn.Close()
			return
		}
		w.Header().Add("Set-Cookie", cookie)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"ch_1"}`)
	}))
	defer srv.Close()
	path := filepath.Join(t.TempDir(), "ops.journal")
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	j, err := filejournal.Open(path, filejournal.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	var attemptErrs []string
	c, err := idem.New(idem.Config{Journal: j, Logger: log, MaxAttempts: 1,
		OnAttempt: func(a idem.Attempt) {
			if a.Err != nil {
				attemptErrs = append(attemptErrs, a.Err.Error())
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	u := strings.Replace(srv.URL, "http://", "http://user:"+password+"@", 1) +
		"/charges?amount=5&access_token=" + token + "&X-Amz-Signature=" + signed + "&refresh_token=" + token + "&clientSecret=" + token
	post := func(u string) *http.Request {
		req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(`{"amount":5}`))
		if err != nil {
			t.Fatal(err)
		}
		return req
	}
	_, err = c.Do("charge", post(u))
	if !errors.Is(err, idem.ErrUnknown) {
		t.Fatalf("first Do: %v, want an unknown outcome", err)
	}
	if s := secretsIn(err.Error()); s != nil {
		t.Fatalf("the error %q holds %q", err, s)
	}
	resp, err := c.Do("charge", post(u))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get("Set-Cookie") != cookie {
		t.Fatalf("the caller got Set-Cookie %q, want the server's", resp.Header.Get("Set-Cookie"))
	}
	resp.Body.Close()

	replay, err := c.Do("charge", post(u))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(replay.Body)
	replay.Body.Close()
	if !idem.Recorded(replay) || replay.StatusCode != 201 || string(body) != `{"id":"ch_1"}` ||
		replay.Header.Get("Set-Cookie") != "" || replay.Header.Get("Idem-Unrecorded-Headers") != "" ||
		replay.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("replay: recorded %v, %d %q, header %v", idem.Recorded(replay), replay.StatusCode, body, replay.Header)
	}
	other := strings.Replace(u, "access_token="+token, "access_token=another", 1)
	if _, err := c.Do("charge", post(other)); !errors.Is(err, idem.ErrMismatch) {
		t.Fatalf("Do with another token: %v, want ErrMismatch", err)
	}
	op, _ := lookup(j, "charge")
	want := srv.URL + "/charges?amount=5&access_token=xxxxx&X-Amz-Signature=xxxxx&refresh_token=xxxxx&clientSecret=xxxxx"
	if op.URL != want {
		t.Fatalf("journaled URL %q, want %q", op.URL, want)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for what, text := range map[string]string{"the journal file": string(file), "the logs": logs.String(),
		"the attempts' errors": strings.Join(attemptErrs, "\n")} {
		if s := secretsIn(text); s != nil {
			t.Errorf("%s hold %q", what, s)
		}
	}
	if len(attemptErrs) == 0 || !strings.Contains(logs.String(), "access_token=xxxxx") {
		t.Fatalf("the test saw no attempt error (%d) or no log naming the URL: it proves nothing", len(attemptErrs))
	}
}

// TestExtraDenials: Config.UnrecordedHeaders adds to the fields never
// recorded; Config.RedactedParams adds parameters.
func TestExtraDenials(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Session", "s")
		w.Header().Set("X-Request-Id", "r")
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(201)
	}))
	defer srv.Close()
	for _, tc := range []struct {
		name     string
		cfg      idem.Config
		kept     []string
		withheld string
		url      string
	}{
		{"deny", idem.Config{UnrecordedHeaders: []string{"x-session"}, RedactedParams: []string{"session"}},
			[]string{"X-Request-Id", "Content-Type"}, "X-Session", "/c?session=xxxxx&n=1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Journal = openJournal(t, filepath.Join(t.TempDir(), "j"))
			c, err := idem.New(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			for range 2 {
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/c?session=s&n=1", nil)
				resp, err := c.Do("op", req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
			}
			op, _ := lookup(tc.cfg.Journal, "op")
			for _, name := range tc.kept {
				if op.Header.Get(name) == "" {
					t.Errorf("%s not recorded: %v", name, op.Header)
				}
			}
			if got := strings.Join(op.Unrecorded, ", "); got != tc.withheld || op.Header.Get("Idem-Unrecorded-Headers") != "" {
				t.Errorf("unrecorded %q (header %v), want %q", got, op.Header, tc.withheld)
			}
			if op.URL != srv.URL+tc.url {
				t.Errorf("URL %q, want %q", op.URL, srv.URL+tc.url)
			}
		})
	}
}

// TestCompactionScrubsWhatOlderVersionsRecorded: a journal whose records
// hold a cookie, a token and user info (as versions before the secrets rule
// wrote them) loses them at its next compaction, and keeps everything else.
func TestCompactionScrubsWhatOlderVersionsRecorded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.journal")
	j := openJournal(t, path)
	old := journal.Operation{ID: "charge", Key: "k-1", Method: "POST", KeyTTL: 24 * time.Hour, State: journal.StatePending,
		URL: "https://user:xxxxx@api.example/charges?access_token=t0k3n-s3cret&n=1"}
	old.Fingerprint[0] = 7
	if err := journalhelp.Begin(j, old); err != nil {
		t.Fatal(err)
	}
	done := old
	done.State, done.Status, done.Body = journal.StateDone, 201, []byte(`{"id":"ch_1"}`)
	done.Header = http.Header{"Set-Cookie": {"session=c00k1e-s3cret"}, "Content-Type": {"application/json"}}
	if err := journalhelp.Complete(j, done); err != nil {
		t.Fatal(err)
	}
	j = compactedAndReopened(t, j, path, "t0k3n-s3cret", "c00k1e-s3cret", "user")
	defer j.Close()
	got, _ := lookup(j, "charge")
	if got.URL != "https://api.example/charges?access_token=xxxxx&n=1" || got.Key != "k-1" || got.Fingerprint != old.Fingerprint ||
		got.Status != 201 || string(got.Body) != `{"id":"ch_1"}` || got.Header.Get("Set-Cookie") != "" ||
		got.Header.Get("Content-Type") != "application/json" || !slices.Equal(got.Unrecorded, []string{"Set-Cookie"}) || len(got.Header) != 1 {
		t.Fatalf("after compaction: %+v", got)
	}
	// A second compaction changes nothing more.
	before, _ := os.ReadFile(path)
	if err := j.Compact(); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(path)
	if !bytes.Equal(before, after) {
		t.Fatal("a second compaction rewrote the scrubbed records differently")
	}
}

// C14.8 for pending operations: compaction scrubs the URL of an operation
// still pending, as of a finished one, and keeps what a resume needs (its
// key, fingerprint and state) as it was.
func TestCompactionScrubsPendingOperations(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.journal")
	j := openJournal(t, path)
	old := journal.Operation{ID: "charge", Key: "k-1", Method: "POST", KeyTTL: 24 * time.Hour, State: journal.StatePending,
		URL: "https://user:pa55@api.example/charges?n=1&clientSecret=s3cret-v4lue"}
	old.Fingerprint[0] = 7
	if err := journalhelp.Begin(j, old); err != nil {
		t.Fatal(err)
	}
	j = compactedAndReopened(t, j, path, "s3cret-v4lue", "pa55", "user")
	defer j.Close()
	got, _ := lookup(j, "charge")
	if got.URL != "https://api.example/charges?n=1&clientSecret=xxxxx" || got.Key != "k-1" ||
		got.Fingerprint != old.Fingerprint || got.State != journal.StatePending {
		t.Fatalf("after compaction: %+v", got)
	}
}

// C14.2 at compaction: a record that named what it left out
// (Idem-Unrecorded-Headers: Set-Cookie) and kept a field a later rule
// leaves out (Authentication-Info, which an older version recorded) names
// both once scrubbed: the names it gave before are kept, not replaced.
func TestCompactionKeepsTheNamesARecordGaveBefore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.journal")
	j := openJournal(t, path)
	op := journal.Operation{ID: "charge", Key: "k-1", Method: "POST", KeyTTL: 24 * time.Hour, State: journal.StatePending, URL: "https://api.example/charges"}
	if err := journalhelp.Begin(j, op); err != nil {
		t.Fatal(err)
	}
	op.State, op.Status, op.Body = journal.StateDone, 201, []byte(`{"id":"ch_1"}`)
	op.Unrecorded = []string{"Set-Cookie"}
	op.Header = http.Header{"Authentication-Info": {"nextnonce=n0nce-s3cret"}, "Content-Type": {"application/json"}}
	if err := journalhelp.Complete(j, op); err != nil {
		t.Fatal(err)
	}
	j = compactedAndReopened(t, j, path, "n0nce-s3cret")
	defer j.Close()
	got, _ := lookup(j, "charge")
	if !slices.Equal(got.Unrecorded, []string{"Authentication-Info", "Set-Cookie"}) ||
		got.Header.Get("Content-Type") != "application/json" || len(got.Header) != 1 {
		t.Fatalf("after compaction the header is %v, unrecorded %q; want Content-Type, and Authentication-Info, Set-Cookie unrecorded",
			got.Header, got.Unrecorded)
	}
}

// compactedAndReopened compacts and closes j, whose file is path, fails
// the test if the file still holds one of secrets, and opens it again.
func compactedAndReopened(t *testing.T, j *filejournal.Journal, path string, secrets ...string) *filejournal.Journal {
	t.Helper()
	if err := j.Compact(); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range secrets {
		if bytes.Contains(file, []byte(secret)) {
			t.Errorf("the compacted file still holds %q", secret)
		}
	}
	return openJournal(t, path)
}

// C14.5: a query parameter whose name looks like a credential is redacted
// whatever its case and however its words are joined: a separator that is
// not a letter or digit, or a camelCase boundary. A name that only ends
// in the same letters, inside a word, is kept.
func TestRedactedParamSpellings(t *testing.T) {
	for _, tc := range []struct {
		name     string
		redacted bool
	}{
		{"access_token", true}, {"ACCESS_TOKEN", true}, {"Access_Token", true},
		{"refresh_token", true}, {"refresh-token", true}, {"auth.token", true}, {"auth~token", true},
		{"accessToken", true}, {"clientSecret", true}, {"sessionToken", true}, {"v2Signature", true},
		{"x-api-key", true}, {"X-API-KEY", true}, {"api.key", true}, {"apiKey", true},
		{"X-Amz-Signature", true}, {"token", true}, {"Token", true},
		{"monkey", false}, {"turkey", false}, {"tokens", false}, {"hotkey", false},
		{"keyboard", false}, {"amount", false}, {"Monkey", false},
		{"APIToken", true}, {"AWSSecret", true}, {"GHToken", true}, {"x0Token", true}, {"x9Token", true},
		{"APITOKEN", false}, {"xatoken", false}, {"xztoken", false},
		{"xAtoken", false}, {"xZtoken", false}, {"x0token", false}, {"x9token", false},
		{"aToken", true}, {"zToken", true}, {"AZToken", true}, {"userAuth", true}, {"APIPassword", true}, {"x@Token", true}, {"x[Token", true}, {"x`Token", true}, {"x{Token", true}, {"x/Token", true}, {"x:Token", true},
	} {
		u := mustParse(t, "https://api.example/c?"+url.QueryEscape(tc.name)+"=v4lue&n=1")
		got := idem.RedactURL(u)
		if redacted := !strings.Contains(got, "v4lue"); redacted != tc.redacted || !strings.HasSuffix(got, "&n=1") {
			t.Errorf("%s: written %q, redacted %v, want %v", tc.name, got, redacted, tc.redacted)
		}
	}
	// An acronym's end is told by the lower-case letter after the word's
	// first: any lower-case letter, through z.
	for _, tc := range []struct{ query, param, want string }{
		{"MYOzone=v4lue", "ozone", "MYOzone=xxxxx"},
		{"myZone=v4lue", "zone", "myZone=xxxxx"},
		{"AK=v4lue", "k", "AK=v4lue"},           // a one-letter word has no lower-case letter after its first
		{"APIX~y=v4lue", "x~y", "APIX~y=v4lue"}, // '~', just past z, is no lower-case letter
	} {
		u := mustParse(t, "https://api.example/c?"+tc.query)
		if got, want := idem.RedactURL(u, tc.param), "https://api.example/c?"+tc.want; got != want {
			t.Errorf("RedactURL with the extra parameter %s = %q, want %q", tc.param, got, want)
		}
	}
}

// C14.5 for a name written percent-encoded: a server decodes
// access%5Ftoken to access_token, so the value is a credential all the
// same and is replaced; the name keeps the spelling it was sent with.
func TestAPercentEncodedCredentialParameterIsRedacted(t *testing.T) {
	u := mustParse(t, "https://api.example/c?access%5Ftoken=v4lue&api%2Dkey=v4lue&%74oken=v4lue&n=1")
	if got, want := idem.RedactURL(u), "https://api.example/c?access%5Ftoken=xxxxx&api%2Dkey=xxxxx&%74oken=xxxxx&n=1"; got != want {
		t.Fatalf("RedactURL = %q, want %q", got, want)
	}
}

// C14: the default lists are copies; changing one changes neither what a
// Client redacts nor what compaction scrubs.
func TestDefaultSecretListsAreCopies(t *testing.T) {
	params := idem.DefaultRedactedParams()
	for i := range params {
		params[i] = "not-a-secret"
	}
	headers := idem.DefaultUnrecordedHeaders()
	for i := range headers {
		headers[i] = "X-Not-A-Secret"
	}
	u, _ := url.Parse("https://api.example.test/x?token=s3cret")
	if got, want := idem.RedactURL(u), "https://api.example.test/x?token=xxxxx"; got != want {
		t.Errorf("RedactURL = %q, want %q", got, want)
	}
	if got := idem.DefaultUnrecordedHeaders(); got[0] != "Set-Cookie" {
		t.Errorf("DefaultUnrecordedHeaders()[0] = %q after a caller changed its copy, want Set-Cookie", got[0])
	}
}
