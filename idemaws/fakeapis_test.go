package idemaws_test

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeAPIs is an AWS endpoint for three APIs whose tokens the SDK leaves
// to the program or answers "already exists", each in its protocol, each
// applying a creation once per token as AWS documents it:
//
//   - ACM's RequestCertificate (AWS JSON 1.1): IdempotencyToken, a token
//     seen again answers the first certificate's ARN again;
//   - EFS's CreateFileSystem (REST-JSON): CreationToken, a token seen
//     again answers 409 FileSystemAlreadyExists with the file system's ID;
//   - Route 53's CreateHostedZone (REST-XML): CallerReference, a token
//     seen again answers 409 HostedZoneAlreadyExists, without the zone's
//     ID; ListHostedZonesByName lists the zones of a name, each with its
//     CallerReference;
//   - EC2's CreateVpcEndpoint (EC2 Query): ClientToken, which the SDK does
//     not fill for it, a token seen again answers the first endpoint again.
//
// Each creation is named by the operation it stands for (the domain name,
// the file system's "op" tag, or the endpoint's service name). With a fault rate, a request meets one
// fault in that share: a 500, a 503 or a throttle before anything is
// applied; a connection dropped, or an answer later than the client waits,
// after the creation was applied.
type fakeAPIs struct {
	srv *httptest.Server

	mu        sync.Mutex
	rng       *rand.Rand
	faultRate float64       // share of creation requests that meet a fault
	late      time.Duration // how late a late answer is
	faults    []string      // faults to meet first, one per request: "500", "503", "throttle", "drop", "late"
	requests  int           // creation requests
	onRequest func(n int)   // called with the count of creation requests, before each is answered
	byToken   map[string]made
	byOp      map[string][]made          // what each operation made
	tokensOf  map[string]map[string]bool // the tokens each operation was sent under
}

// made is what one token created.
type made struct {
	op, token, id string
}

func newFakeAPIs(t *testing.T, faultRate float64, seed uint64) *fakeAPIs {
	f := &fakeAPIs{rng: rand.New(rand.NewPCG(seed, seed)), faultRate: faultRate, late: 400 * time.Millisecond,
		byToken: map[string]made{}, byOp: map[string][]made{}, tokensOf: map[string]map[string]bool{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// creations returns how many resources operation op made.
func (f *fakeAPIs) creations(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.byOp[op])
}

// tokens returns the tokens operation op was sent under.
func (f *fakeAPIs) tokens(op string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ts []string
	for t := range f.tokensOf[op] {
		ts = append(ts, t)
	}
	return ts
}

func (f *fakeAPIs) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests
}

// protocol is how one API reads a creation and answers it.
type protocol struct {
	op, token string                               // the operation the request stands for, and its token
	created   func(id, token string) (int, string) // the answer to a new creation, or a replay of one
	again     func(m made) (int, string)           // the answer to a token seen again; nil: created's
	fail      func(status int, code string) string // an error body
	header    http.Header
	// typeHeader: an error's code goes in X-Amzn-Errortype too, from its
	// body's ErrorCode (EFS).
	typeHeader bool
}

func (f *fakeAPIs) serve(w http.ResponseWriter, r *http.Request) {
	if !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 ") {
		http.Error(w, "unsigned request", http.StatusForbidden)
		return
	}
	if r.Method == http.MethodGet && r.URL.Path == "/2013-04-01/hostedzonesbyname" {
		f.listHostedZones(w, r)
		return
	}
	body, _ := io.ReadAll(r.Body)
	var p protocol
	switch {
	case r.Header.Get("X-Amz-Target") == "CertificateManager.RequestCertificate":
		p = acmProtocol(body)
	case r.Method == http.MethodPost && r.URL.Path == "/2015-02-01/file-systems":
		p = efsProtocol(body)
	case r.Method == http.MethodPost && r.URL.Path == "/2013-04-01/hostedzone":
		p = route53Protocol(body)
	case r.Method == http.MethodPost && r.URL.Path == "/" && strings.Contains(string(body), "Action=CreateVpcEndpoint&"):
		p = ec2Protocol(body)
	default:
		http.Error(w, "unknown request "+r.Method+" "+r.URL.Path, http.StatusNotFound)
		return
	}
	if p.op == "" || p.token == "" {
		http.Error(w, "no operation or no token in "+string(body), http.StatusBadRequest)
		return
	}

	f.mu.Lock()
	f.requests++
	n, hook := f.requests, f.onRequest
	f.mu.Unlock()
	if hook != nil {
		hook(n)
	}
	f.mu.Lock()
	if f.tokensOf[p.op] == nil {
		f.tokensOf[p.op] = map[string]bool{}
	}
	f.tokensOf[p.op][p.token] = true
	fault := ""
	switch {
	case len(f.faults) > 0:
		fault, f.faults = f.faults[0], f.faults[1:]
	case f.rng.Float64() < f.faultRate:
		fault = []string{"500", "503", "throttle", "drop", "late"}[f.rng.IntN(5)]
	}
	answer := func(status int, body string) {
		for k, v := range p.header {
			w.Header()[k] = v
		}
		if p.typeHeader && status >= 400 {
			var e struct{ ErrorCode string }
			json.Unmarshal([]byte(body), &e)
			w.Header().Set("X-Amzn-Errortype", e.ErrorCode)
		}
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
	switch fault {
	case "500", "503":
		f.mu.Unlock()
		status := map[string]int{"500": 500, "503": 503}[fault]
		answer(status, p.fail(status, map[int]string{500: "InternalFailure", 503: "ServiceUnavailable"}[status]))
		return
	case "throttle":
		f.mu.Unlock()
		answer(http.StatusBadRequest, p.fail(http.StatusBadRequest, "ThrottlingException"))
		return
	}
	m, known := f.byToken[p.token]
	if !known {
		m = made{op: p.op, token: p.token, id: fmt.Sprintf("%d", len(f.byToken)+1)}
		f.byToken[p.token] = m
		f.byOp[p.op] = append(f.byOp[p.op], m)
	}
	f.mu.Unlock()
	status, out := p.created(m.id, m.token)
	if known && p.again != nil {
		status, out = p.again(m)
	}
	switch fault {
	case "drop": // applied, and the connection dropped before the answer
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	case "late": // applied, and answered after the client gave up
		select {
		case <-time.After(f.late):
		case <-r.Context().Done():
		}
	}
	answer(status, out)
}

func acmProtocol(body []byte) protocol {
	var in struct{ DomainName, IdempotencyToken string }
	json.Unmarshal(body, &in)
	return protocol{op: in.DomainName, token: in.IdempotencyToken,
		header: http.Header{"Content-Type": {"application/x-amz-json-1.1"}},
		created: func(id, _ string) (int, string) {
			return http.StatusOK, fmt.Sprintf(`{"CertificateArn":"arn:aws:acm:us-east-1:123456789012:certificate/%s"}`, id)
		},
		fail: func(_ int, code string) string { return fmt.Sprintf(`{"__type":%q,"message":"m"}`, code) },
	}
}

func efsProtocol(body []byte) protocol {
	var in struct {
		CreationToken string
		Tags          []struct{ Key, Value string }
	}
	json.Unmarshal(body, &in)
	op := ""
	for _, t := range in.Tags {
		if t.Key == "op" {
			op = t.Value
		}
	}
	return protocol{op: op, token: in.CreationToken, typeHeader: true,
		header: http.Header{"Content-Type": {"application/json"}},
		created: func(id, token string) (int, string) {
			return http.StatusCreated, fmt.Sprintf(`{"FileSystemId":"fs-%s","CreationToken":%q,"LifeCycleState":"creating","OwnerId":"123456789012",`+
				`"CreationTime":1.7e9,"NumberOfMountTargets":0,"PerformanceMode":"generalPurpose","SizeInBytes":{"Value":0},"Tags":[{"Key":"op","Value":%q}]}`, id, token, op)
		},
		again: func(m made) (int, string) {
			return http.StatusConflict, fmt.Sprintf(`{"ErrorCode":"FileSystemAlreadyExists","Message":"File system 'fs-%s' already exists with creation token '%s'","FileSystemId":"fs-%s"}`,
				m.id, m.token, m.id)
		},
		fail: func(_ int, code string) string { return fmt.Sprintf(`{"ErrorCode":%q,"Message":"m"}`, code) },
	}
}

func route53Protocol(body []byte) protocol {
	var in struct{ Name, CallerReference string }
	xml.Unmarshal(body, &in)
	return protocol{op: in.Name, token: in.CallerReference,
		header: http.Header{"Content-Type": {"text/xml"}},
		created: func(id, token string) (int, string) {
			return http.StatusCreated, fmt.Sprintf(`<?xml version="1.0" encoding="UTF-8"?>
<CreateHostedZoneResponse xmlns="https://route53.amazonaws.com/doc/2013-04-01/"><HostedZone><Id>/hostedzone/Z%s</Id><Name>%s.</Name><CallerReference>%s</CallerReference><ResourceRecordSetCount>2</ResourceRecordSetCount></HostedZone>`+
				`<ChangeInfo><Id>/change/C%s</Id><Status>PENDING</Status><SubmittedAt>2026-12-01T00:00:00Z</SubmittedAt></ChangeInfo>`+
				`<DelegationSet><NameServers><NameServer>ns-1.awsdns-01.org</NameServer></NameServers></DelegationSet></CreateHostedZoneResponse>`, id, in.Name, token, id)
		},
		again: func(made) (int, string) {
			return http.StatusConflict, route53Error("HostedZoneAlreadyExists")
		},
		fail: func(_ int, code string) string {
			if code == "ThrottlingException" {
				code = "Throttling"
			}
			return route53Error(code)
		},
	}
}

func ec2Protocol(body []byte) protocol {
	form, _ := url.ParseQuery(string(body))
	name := form.Get("ServiceName")
	return protocol{op: name, token: form.Get("ClientToken"),
		header: http.Header{"Content-Type": {"text/xml;charset=UTF-8"}},
		created: func(id, token string) (int, string) {
			return http.StatusOK, fmt.Sprintf(`<?xml version="1.0" encoding="UTF-8"?>
<CreateVpcEndpointResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>r</requestId>`+
				`<vpcEndpoint><vpcEndpointId>vpce-%s</vpcEndpointId><vpcEndpointType>Interface</vpcEndpointType><vpcId>%s</vpcId><serviceName>%s</serviceName><state>pending</state></vpcEndpoint>`+
				`<clientToken>%s</clientToken></CreateVpcEndpointResponse>`, id, form.Get("VpcId"), name, token)
		},
		fail: func(_ int, code string) string {
			if code == "ThrottlingException" {
				code = "RequestLimitExceeded"
			}
			return fmt.Sprintf(`<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>%s</Code><Message>m</Message></Error></Errors><RequestID>r</RequestID></Response>`, code)
		},
	}
}

func route53Error(code string) string {
	return fmt.Sprintf(`<?xml version="1.0"?>
<ErrorResponse xmlns="https://route53.amazonaws.com/doc/2013-04-01/"><Error><Type>Sender</Type><Code>%s</Code><Message>m</Message></Error><RequestId>r</RequestId></ErrorResponse>`, code)
}

// listHostedZones answers ListHostedZonesByName with the zones of a name.
func (f *fakeAPIs) listHostedZones(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimSuffix(r.URL.Query().Get("dnsname"), ".")
	f.mu.Lock()
	zones := append([]made(nil), f.byOp[name]...)
	f.mu.Unlock()
	w.Header().Set("Content-Type", "text/xml")
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?><ListHostedZonesByNameResponse xmlns="https://route53.amazonaws.com/doc/2013-04-01/"><HostedZones>`)
	for _, z := range zones {
		fmt.Fprintf(&b, `<HostedZone><Id>/hostedzone/Z%s</Id><Name>%s.</Name><CallerReference>%s</CallerReference></HostedZone>`, z.id, name, z.token)
	}
	b.WriteString(`</HostedZones><IsTruncated>false</IsTruncated><MaxItems>100</MaxItems></ListHostedZonesByNameResponse>`)
	io.WriteString(w, b.String())
}
