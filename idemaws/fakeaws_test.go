package idemaws_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// fakeAWS is an AWS endpoint for two APIs with client tokens, Cloud
// Control's CreateResource (AWS JSON 1.0) and ECS's RunTask (AWS JSON 1.1),
// that keeps tokens as AWS documents: a token seen again with the same
// parameters gets the first answer again, and nothing is created twice; a
// token seen again with other parameters gets ClientTokenConflictException.
type fakeAWS struct {
	srv *httptest.Server

	mu      sync.Mutex
	fail    []int          // statuses to answer, one per request, before anything is applied
	reject  string         // when set, every request is refused with this 400 error code
	hang    chan string    // when set, a new creation is applied, its token sent here, and its answer never given
	tokens  []string       // the token of every request, in order
	targets []string       // the X-Amz-Target of every request, in order
	byToken map[string]run // what each token applied
	created int
	// seen is called with every request's token, before it is answered;
	// answered, after its answer was sent.
	seen, answered func(token string)
}

type run struct {
	params string // the request body without its token
	id     string // what it created
}

func newFakeAWS(t *testing.T) *fakeAWS {
	f := &fakeAWS{byToken: map[string]run{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// requests returns how many requests reached the endpoint.
func (f *fakeAWS) requests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.tokens)
}

func (f *fakeAWS) wire() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.tokens...)
}

func (f *fakeAWS) creations() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.created
}

func (f *fakeAWS) serve(w http.ResponseWriter, r *http.Request) {
	target := r.Header.Get("X-Amz-Target")
	var api struct{ tokenField, contentType, answer string }
	switch target {
	case "CloudApiService.CreateResource":
		api.tokenField, api.contentType = "ClientToken", "application/x-amz-json-1.0"
		api.answer = `{"ProgressEvent":{"Identifier":%q,"OperationStatus":"IN_PROGRESS","RequestToken":%q,"TypeName":"AWS::S3::Bucket"}}`
	case "AmazonEC2ContainerServiceV20141113.RunTask":
		api.tokenField, api.contentType = "clientToken", "application/x-amz-json-1.1"
		api.answer = `{"tasks":[{"taskArn":"arn:aws:ecs:us-east-1:123456789012:task/%s","startedBy":%q}],"failures":[]}`
	default:
		http.Error(w, "unknown target "+target, http.StatusBadRequest)
		return
	}
	if !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 ") {
		http.Error(w, "unsigned request", http.StatusForbidden)
		return
	}
	body, _ := io.ReadAll(r.Body)
	var fields map[string]any
	if err := json.Unmarshal(body, &fields); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	token, _ := fields[api.tokenField].(string)
	delete(fields, api.tokenField)
	params, _ := json.Marshal(fields) // sorted keys

	f.mu.Lock()
	f.tokens, f.targets = append(f.tokens, token), append(f.targets, target)
	seen := f.seen
	f.mu.Unlock()
	if seen != nil {
		seen(token)
	}

	f.mu.Lock()
	answer := func(status int, body string) {
		answered := f.answered
		n := len(f.tokens)
		f.mu.Unlock()
		w.Header().Set("Content-Type", api.contentType)
		w.Header().Set("X-Amzn-Requestid", fmt.Sprintf("req-%d", n))
		w.WriteHeader(status)
		io.WriteString(w, body)
		if answered != nil {
			w.(http.Flusher).Flush()
			answered(token)
		}
	}
	switch {
	case len(f.fail) > 0:
		status := f.fail[0]
		f.fail = f.fail[1:]
		answer(status, `{"__type":"InternalFailure","message":"the endpoint failed"}`)
	case f.reject != "":
		w.Header().Set("X-Amzn-Errortype", f.reject)
		answer(http.StatusBadRequest, fmt.Sprintf(`{"__type":%q,"Message":"refused"}`, f.reject))
	case token == "":
		answer(http.StatusBadRequest, `{"__type":"ValidationException","Message":"no client token"}`)
	default:
		prev, ok := f.byToken[token]
		switch {
		case ok && prev.params != string(params):
			w.Header().Set("X-Amzn-Errortype", "ClientTokenConflictException")
			answer(http.StatusBadRequest, `{"__type":"ClientTokenConflictException","Message":"the token was used with other parameters"}`)
		case ok:
			answer(http.StatusOK, fmt.Sprintf(api.answer, prev.id, token))
		default:
			f.created++
			id := fmt.Sprintf("res-%d", f.created)
			f.byToken[token] = run{string(params), id}
			if hang := f.hang; hang != nil {
				f.mu.Unlock()
				hang <- token
				<-r.Context().Done() // the caller is killed before it reads an answer
				return
			}
			answer(http.StatusOK, fmt.Sprintf(api.answer, id, token))
		}
	}
}
