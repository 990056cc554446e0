package idemserver_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/idemserver"
)

// loggedErrs returns the err attribute of each JSON record in logs.
func loggedErrs(t *testing.T, logs string) []string {
	t.Helper()
	var errs []string
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var rec struct{ Err string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec.Err != "" {
			errs = append(errs, rec.Err)
		}
	}
	return errs
}

// L2.12: the error logged for a request whose work outlived
// Config.WorkTimeout names the deadline after what the handler left (an
// answer of 500, after the deadline); a request that failed before its
// deadline (a handler that wrote nothing) logs its error as it is, with
// no cause joined to it.
func TestL2ATimedOutRequestLogsTheDeadline(t *testing.T) {
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			var logs lockedBuffer
			e := newEnv(t, s, idemserver.Config{WorkTimeout: 100 * time.Millisecond, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
			late := e.keys.Handle(idemserver.Route{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				<-r.Context().Done()
				w.WriteHeader(http.StatusInternalServerError)
			}))
			if got := do(t, late, "POST", "/items", "late", "a"); got.status != http.StatusServiceUnavailable {
				t.Fatalf("a 500 after the deadline: %d, want 503", got.status)
			}
			if got, want := loggedErrs(t, logs.String()), "idemserver: rolled back: context deadline exceeded"; len(got) != 1 || got[0] != want {
				t.Fatalf("logged errors %q, want one: %q", got, want)
			}

			var quick lockedBuffer
			e = newEnv(t, s, idemserver.Config{WorkTimeout: time.Minute, Logger: slog.New(slog.NewJSONHandler(&quick, nil))})
			mute := e.keys.Handle(idemserver.Route{}, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			if got := do(t, mute, "POST", "/items", "mute", "b"); got.status != http.StatusInternalServerError {
				t.Fatalf("a handler that wrote nothing: %d, want 500", got.status)
			}
			got := loggedErrs(t, quick.String())
			if len(got) != 1 || !strings.HasPrefix(got[0], "idemserver: the handler wrote no answer, not even a status") ||
				!strings.HasSuffix(got[0], "use package idemecho)") {
				t.Fatalf("logged errors %q, want the handler's error alone", got)
			}
		})
	}
}
