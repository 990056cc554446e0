// Command gentokens writes the table of AWS operations that take an
// idempotency token, read from AWS's Smithy models (the JSON AST files of
// aws/api-models-aws, or of aws-sdk-go-v2's codegen/sdk-codegen/aws-models)
// and, for a service whose model is not at hand, from the Go source of its
// aws-sdk-go-v2 service module, which the SDK generates from that model:
//
//	go run ./internal/gentokens -models DIR -source WHAT [-gomod PATH@VERSION]... [-o tokens_gen.go]
//
// A module named by -gomod is fetched through the Go module proxy (go mod
// download), and its path, version and checksum are written into the
// table's header with the models' source.
//
// An input member is an operation's token when the model marks it
// (smithy.api#idempotencyToken, which the SDK fills itself: in Go source,
// the member the operation's token middleware sets), or when its name is
// one AWS gives tokens (ClientToken, ClientRequestToken, IdempotencyToken,
// CreationToken, CallerReference, CreatorRequestId) and its documentation
// says it keeps a request from being applied twice (idempotent, retried,
// twice, duplicate, replayed, a unique string that identifies the
// request...). Members of the input are looked at, and for an operation
// whose name begins with Create, members of a structure the input holds
// (CloudFront's DistributionConfig.CallerReference). For each it keeps the
// model's length and pattern (from Go source, the bound its documentation
// states, else its service guide's, see guides), and the token's lifetime
// where the documentation states one.
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/format"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		log.Fatal(err)
	}
}

// run is the command with its arguments.
func run(args []string) error {
	flags := flag.NewFlagSet("gentokens", flag.ContinueOnError)
	models := flags.String("models", "", "the directory of Smithy JSON models, searched recursively")
	source := flags.String("source", "", "what the models are, for the generated file's header (a repository and its commit)")
	var gomods []string
	flags.Func("gomod", "an aws-sdk-go-v2 service module, path@version, whose Go source is read for a service the models lack (repeatable)",
		func(s string) error { gomods = append(gomods, s); return nil })
	out := flags.String("o", "tokens_gen.go", "the Go file to write")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if *models == "" || *source == "" {
		return errors.New("gentokens: -models and -source are required")
	}
	t := &table{}
	if err := t.readModels(*models); err != nil {
		return err
	}
	sources := []string{*source}
	for _, gomod := range gomods {
		m, err := download(gomod)
		if err != nil {
			return err
		}
		if err := t.readGo(m.Dir); err != nil {
			return err
		}
		sources = append(sources, fmt.Sprintf("%s@%s (%s, its Go source)", m.Path, m.Version, m.Sum))
	}
	if err := t.finish(); err != nil {
		return err
	}
	src, err := t.write(strings.Join(sources, "; "))
	if err != nil {
		return err
	}
	if err := os.WriteFile(*out, src, 0o644); err != nil {
		return err
	}
	log.Printf("gentokens: %d operations of %d services (%d marked by the model, %d by their documentation, %d with a lifetime); %d patterns dropped",
		len(t.rows), t.services, t.marked, len(t.rows)-t.marked, t.lifetimes, len(t.dropped))
	return nil
}

// model is the part of a Smithy JSON AST that gentokens reads.
type model struct {
	Shapes map[string]shape `json:"shapes"`
}

type shape struct {
	Type    string                     `json:"type"`
	Target  string                     `json:"target"`
	Members map[string]shape           `json:"members"`
	Input   *shape                     `json:"input"`
	Traits  map[string]json.RawMessage `json:"traits"`
}

// row is one operation of the table.
type row struct {
	key      string // "ServiceID.Operation"
	member   string // the Go field, "Outer.Inner" when nested
	min, max int
	pattern  string
	ttl      time.Duration
	said     string // the documentation's words on the lifetime
	filled   bool
	guide    bool // the format is the service guide's
}

type table struct {
	rows                        []row
	services, marked, lifetimes int
	dropped                     []string // patterns RE2 cannot take
}

// tokenNames are the names AWS gives idempotency tokens, lower case.
var tokenNames = []string{"clienttoken", "clientrequesttoken", "idempotencytoken", "creationtoken", "callerreference", "creatorrequestid"}

// saysIdempotent matches documentation that says a member keeps a request
// from being applied twice.
var saysIdempotent = regexp.MustCompile(`(?i)idempoten|retr(y|ied|ies|ying)\b|twice|duplicate|more than once|multiple times|only once|same (client )?token|replayed|previous request|already sent|unique string that identifies the request`)

// read returns the table of the models in dir.
func read(dir string) (*table, error) {
	t := &table{}
	if err := t.readModels(dir); err != nil {
		return nil, err
	}
	return t, t.finish()
}

// readModels adds the operations of the Smithy models in dir.
func (t *table) readModels(dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".json") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var m model
		if err := json.Unmarshal(b, &m); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		return t.add(path, m)
	})
}

// guide is a token format a service's guide states for all its
// operations.
type guide struct {
	max     int
	pattern string
	said    string // the guide's words, and where
}

// guides are the formats services' guides state, given to the operations
// of the service whose source states none (EC2's model states none; its
// Go source states one for a few operations).
var guides = map[string]guide{
	"EC2": {max: 64, pattern: asciiPattern,
		said: "A client token is a unique, case-sensitive string of up to 64 ASCII characters (Amazon EC2 Developer Guide, Ensuring idempotency in Amazon EC2 API requests)"},
}

// errTwice is a service read from two sources.
var errTwice = errors.New("is in two models")

// finish sorts the rows, refuses an operation read twice, and gives the
// rows whose source states no format their service guide's.
func (t *table) finish() error {
	slices.SortFunc(t.rows, func(a, b row) int { return strings.Compare(a.key, b.key) })
	for i := range t.rows {
		r := &t.rows[i]
		if i > 0 && r.key == t.rows[i-1].key {
			return fmt.Errorf("gentokens: %s %w", r.key, errTwice)
		}
		if g, ok := guides[r.key[:strings.IndexByte(r.key, '.')]]; ok && r.max == 0 && r.pattern == "" {
			r.max, r.pattern, r.guide = g.max, g.pattern, true
		}
	}
	return nil
}

// add adds the operations of one model that take a token.
func (t *table) add(path string, m model) error {
	sdkID := ""
	for _, s := range m.Shapes {
		if s.Type != "service" {
			continue
		}
		var svc struct {
			SDKID string `json:"sdkId"`
		}
		if raw, ok := s.Traits["aws.api#service"]; ok {
			if err := json.Unmarshal(raw, &svc); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
		}
		if sdkID != "" && svc.SDKID != sdkID {
			return fmt.Errorf("%s: two services, %s and %s", path, sdkID, svc.SDKID)
		}
		sdkID = svc.SDKID
	}
	if sdkID == "" {
		return nil // not a service model
	}
	t.services++
	for id, s := range m.Shapes {
		if s.Type != "operation" || s.Input == nil {
			continue
		}
		in, ok := m.Shapes[s.Input.Target]
		if !ok {
			continue
		}
		r, found := t.token(m, in, "")
		// A structure of the input is looked into for a creation only:
		// its update takes the same structure, whose token member must
		// then be the creation's.
		name := id[strings.IndexByte(id, '#')+1:]
		if !found && strings.HasPrefix(name, "Create") {
			for _, name := range sortedKeys(in.Members) {
				if nested, ok := m.Shapes[in.Members[name].Target]; ok && nested.Type == "structure" {
					if r, found = t.token(m, nested, goName(name)+"."); found {
						break
					}
				}
			}
		}
		if !found {
			continue
		}
		r.key = sdkID + "." + name
		t.count(r)
	}
	return nil
}

// count adds r to the table.
func (t *table) count(r row) {
	if r.filled {
		t.marked++
	}
	if r.ttl > 0 {
		t.lifetimes++
	}
	t.rows = append(t.rows, r)
}

// token finds the token member of structure s, its field path behind
// prefix.
func (t *table) token(m model, s shape, prefix string) (row, bool) {
	for _, name := range sortedKeys(s.Members) {
		mem := s.Members[name]
		target := m.Shapes[mem.Target]
		doc := text(mem.Traits["smithy.api#documentation"])
		if doc == "" {
			doc = text(target.Traits["smithy.api#documentation"])
		}
		_, marked := mem.Traits["smithy.api#idempotencyToken"]
		if !marked && (!slices.Contains(tokenNames, strings.ToLower(name)) || !saysIdempotent.MatchString(doc)) {
			continue
		}
		r := row{member: prefix + goName(name), filled: marked && prefix == ""}
		length := trait(mem, target, "smithy.api#length")
		if length != nil {
			var l struct{ Min, Max *int }
			json.Unmarshal(length, &l)
			if l.Min != nil {
				r.min = *l.Min
			}
			if l.Max != nil {
				r.max = *l.Max
			}
		}
		if raw := trait(mem, target, "smithy.api#pattern"); raw != nil {
			var p string
			json.Unmarshal(raw, &p)
			if re2, ok := translate(p); ok {
				r.pattern = re2
			} else {
				t.dropped = append(t.dropped, p)
			}
		}
		r.ttl, r.said = lifetime(doc)
		return r, true
	}
	return row{}, false
}

// trait returns a member's trait, or its target's.
func trait(mem, target shape, name string) json.RawMessage {
	if raw, ok := mem.Traits[name]; ok {
		return raw
	}
	return target.Traits[name]
}

// goName is the SDK's Go name of a member: its first letter upper case.
func goName(name string) string {
	r, n := utf8.DecodeRuneInString(name)
	return string(unicode.ToUpper(r)) + name[n:]
}

func sortedKeys(m map[string]shape) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

var (
	tags   = regexp.MustCompile(`<[^>]*>`)
	spaces = regexp.MustCompile(`\s+`)
)

// text is a documentation trait as plain text.
func text(raw json.RawMessage) string {
	var s string
	json.Unmarshal(raw, &s)
	return strings.TrimSpace(spaces.ReplaceAllString(tags.ReplaceAllString(s, " "), " "))
}

// lifetimeWords match a token's lifetime in its documentation.
var lifetimeWords = []*regexp.Regexp{
	regexp.MustCompile(`(?i)\btimes? out after (\w+)[ -](minute|hour|day)s?`),
	regexp.MustCompile(`(?i)\bvalid for (?:up to |at least )?(\w+)[ -](minute|hour|day)s?`),
	regexp.MustCompile(`(?i)\bactive for (\w+)[ -](minute|hour|day)s?`),
	regexp.MustCompile(`(?i)\bexpires? (?:after|in) (\w+)[ -](minute|hour|day)s?`),
	regexp.MustCompile(`(?i)\bremain in use for (\w+)[ -](minute|hour|day)s?`),
	regexp.MustCompile(`(?i)\brecognizes a \w+ for (\w+)[ -](minute|hour|day)s?`),
	regexp.MustCompile(`(?i)\bafter (\w+)[ -](minute|hour|day)s?, (?:any|the next) request with the same`),
	regexp.MustCompile(`(?i)\bresponses for idempotent requests for up to (\w+)[ -](minute|hour|day)s?`),
	regexp.MustCompile(`(?i)\breuse a client request token within (\w+)[ -](minute|hour|day)s?`),
}

var numbers = map[string]int{"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
	"ten": 10, "twelve": 12, "fifteen": 15, "twenty-four": 24, "thirty": 30}

// lifetime returns the shortest lifetime doc states, and the sentence
// that states it; 0 if it states none.
func lifetime(doc string) (time.Duration, string) {
	var best time.Duration
	said := ""
	for _, sentence := range strings.SplitAfter(doc, ". ") {
		for _, re := range lifetimeWords {
			for _, m := range re.FindAllStringSubmatch(sentence, -1) {
				n, err := strconv.Atoi(m[1])
				if err != nil {
					n = numbers[strings.ToLower(m[1])]
				}
				if n <= 0 {
					continue
				}
				d := time.Duration(n) * map[string]time.Duration{"minute": time.Minute, "hour": time.Hour, "day": 24 * time.Hour}[strings.ToLower(m[2])]
				if best == 0 || d < best {
					best, said = d, strings.TrimSpace(sentence)
				}
			}
		}
	}
	return best, said
}

// translate turns a Smithy pattern (ECMA 262) into RE2, or reports that
// RE2 cannot take it.
func translate(p string) (string, bool) {
	p = regexp.MustCompile(`\\u([0-9A-Fa-f]{4})`).ReplaceAllString(p, `\x{$1}`)
	p = strings.ReplaceAll(p, `\p{ASCII}`, `\x00-\x7F`)
	if strings.Contains(p, `\x00-\x7F`) && !strings.Contains(p, `[\x00-\x7F]`) && !inClass(p, `\x00-\x7F`) {
		p = strings.ReplaceAll(p, `\x00-\x7F`, `[\x00-\x7F]`)
	}
	if _, err := regexp.Compile(p); err != nil {
		return "", false
	}
	return p, true
}

// inClass reports whether s, in p, is inside a character class.
func inClass(p, s string) bool {
	i := strings.Index(p, s)
	return strings.LastIndexByte(p[:i], '[') > strings.LastIndexByte(p[:i], ']')
}

func (t *table) write(source string) ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, `// Code generated by gentokens from AWS's Smithy models and SDK source; DO NOT EDIT.

package idemaws

import "time"

// modelsSource names the models, and the SDK modules whose Go source was
// read, that sdkTokens was generated from.
const modelsSource = %q

// tableDigest is the SHA-256 of sdkTokens as generated, one operation a
// line (see the generator's digest):
// a table edited by hand no longer matches it.
const tableDigest = %q

`, source, digest(t.rows))
	fmt.Fprintf(&b, `// sdkTokens holds the idempotency token member of every operation of the
// models that takes one (see the rule in internal/gentokens), by
// "ServiceID.Operation": %d operations of %d services.
`, len(t.rows), t.services)
	var said []string
	for _, r := range t.rows {
		if g := guides[r.key[:strings.IndexByte(r.key, '.')]]; r.guide && !slices.Contains(said, g.said) {
			said = append(said, g.said)
		}
	}
	if len(said) > 0 {
		b.WriteString("//\n// The format of a token whose source states none is its service guide's:\n")
		for _, s := range said {
			fmt.Fprintf(&b, "//   - %s.\n", s)
		}
	}
	b.WriteString("var sdkTokens = map[string]tokenSpec{\n")
	for _, r := range t.rows {
		fmt.Fprintf(&b, "\t%q: {member: %q", r.key, r.member)
		if r.min != 0 {
			fmt.Fprintf(&b, ", min: %d", r.min)
		}
		if r.max != 0 {
			fmt.Fprintf(&b, ", max: %d", r.max)
		}
		if r.pattern != "" {
			fmt.Fprintf(&b, ", pattern: %s", quote(r.pattern))
		}
		if r.filled {
			b.WriteString(", filled: true")
		}
		if r.ttl != 0 {
			fmt.Fprintf(&b, ", ttl: %s", durationLiteral(r.ttl))
		}
		b.WriteString("},")
		if r.said != "" {
			fmt.Fprintf(&b, " // %q", r.said)
		}
		b.WriteByte('\n')
	}
	b.WriteString("}\n")
	if len(t.dropped) > 0 {
		b.WriteString("\n// Patterns the models give that RE2 cannot take, not checked:\n")
		seen := map[string]bool{}
		for _, p := range t.dropped {
			if !seen[p] {
				seen[p] = true
				fmt.Fprintf(&b, "//   %s\n", p)
			}
		}
	}
	return format.Source(b.Bytes())
}

// digest is the SHA-256, in hex, of the rows written one a line as
// "key|member|min|max|pattern|filled|ttl in nanoseconds", in key order:
// idemaws' tests write its table the same way.
func digest(rows []row) string {
	h := sha256.New()
	for _, r := range rows {
		fmt.Fprintf(h, "%s|%s|%d|%d|%s|%t|%d\n", r.key, r.member, r.min, r.max, r.pattern, r.filled, int64(r.ttl))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// quote writes s as a raw string literal when it can.
func quote(s string) string {
	if !strings.Contains(s, "`") {
		return "`" + s + "`"
	}
	return strconv.Quote(s)
}

func durationLiteral(d time.Duration) string {
	switch {
	case d%(24*time.Hour) == 0:
		return fmt.Sprintf("%d * 24 * time.Hour", d/(24*time.Hour))
	case d%time.Hour == 0:
		return fmt.Sprintf("%d * time.Hour", d/time.Hour)
	}
	return fmt.Sprintf("%d * time.Minute", d/time.Minute)
}
