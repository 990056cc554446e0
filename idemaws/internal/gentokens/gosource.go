package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// module is a Go module as go mod download -json describes it.
type module struct {
	Path, Version, Dir, Sum, Error string
}

// download brings module path@version into the module cache and returns
// where its source is, and its checksum.
func download(pathAtVersion string) (module, error) {
	if !strings.Contains(pathAtVersion, "@") {
		return module{}, fmt.Errorf("gentokens: %q is not a module path@version", pathAtVersion)
	}
	var stderr bytes.Buffer
	cmd := exec.Command("go", "mod", "download", "-json", pathAtVersion)
	cmd.Stderr = &stderr
	out, runErr := cmd.Output()
	var m module
	if err := json.Unmarshal(out, &m); err != nil {
		return module{}, fmt.Errorf("gentokens: go mod download %s: %v: %w %s", pathAtVersion, runErr, err, stderr.Bytes())
	}
	if m.Error != "" || runErr != nil || m.Dir == "" {
		return module{}, fmt.Errorf("gentokens: go mod download %s: %v %s %s", pathAtVersion, runErr, m.Error, stderr.Bytes())
	}
	return m, nil
}

// goPackage is the part of an SDK service package's source gentokens
// reads: its ServiceID, its operations' input structs, the structures of
// its types package, and the member each operation's token middleware
// fills.
type goPackage struct {
	serviceID string
	inputs    map[string]*ast.StructType // by operation
	types     map[string]*ast.StructType // by name, of the types package
	filled    map[string]string          // by operation
}

// readGo adds the operations of the SDK service package in dir (an
// aws-sdk-go-v2 service module, generated from the same Smithy model) that
// take a token, by the rule the models are read by: a member the SDK's
// token middleware fills (which the model marks), or one named as AWS
// names tokens whose documentation says it keeps a request from being
// applied twice; for a creation, in a structure the input holds too. The
// Go source carries no length or pattern trait: a row keeps the format its
// documentation states ("Maximum 64 ASCII characters"), if any.
func (t *table) readGo(dir string) error {
	p, err := parseGo(dir)
	if err != nil {
		return err
	}
	t.services++
	for _, op := range sortedOps(p.inputs) {
		in := p.inputs[op]
		r, found := t.goToken(in, "", p.filled[op])
		if !found && strings.HasPrefix(op, "Create") {
			for _, f := range sortedFields(in) {
				name := f.Names[0].Name
				if nested, ok := p.types[typesStruct(f.Type)]; ok {
					if r, found = t.goToken(nested, name+".", ""); found {
						break
					}
				}
			}
		}
		if !found {
			continue
		}
		r.key = p.serviceID + "." + op
		t.count(r)
	}
	return nil
}

// goToken finds the token member of struct s, its field path behind
// prefix; filled names the member the SDK's middleware fills, if any.
func (t *table) goToken(s *ast.StructType, prefix, filled string) (row, bool) {
	for _, f := range sortedFields(s) {
		name := f.Names[0].Name
		if !isStringPointer(f.Type) {
			continue
		}
		doc := spaces.ReplaceAllString(strings.TrimSpace(f.Doc.Text()), " ")
		marked := name == filled
		if !marked && (!slices.Contains(tokenNames, strings.ToLower(name)) || !saysIdempotent.MatchString(doc)) {
			continue
		}
		r := row{member: prefix + name, filled: marked && prefix == ""}
		if m := asciiBound.FindStringSubmatch(doc); m != nil {
			r.max, _ = strconv.Atoi(m[1])
			r.pattern = asciiPattern
		}
		r.ttl, r.said = lifetime(doc)
		return r, true
	}
	return row{}, false
}

// asciiBound matches documentation that bounds a token to some ASCII
// characters, as EC2's does.
var asciiBound = regexp.MustCompile(`(?i)\b(?:maximum(?: of)?|up to) (\d+) ASCII characters`)

// asciiPattern is a token of ASCII characters, in RE2.
const asciiPattern = `^[\x00-\x7F]+$`

// parseGo reads the SDK service package in dir.
func parseGo(dir string) (*goPackage, error) {
	p := &goPackage{inputs: map[string]*ast.StructType{}, types: map[string]*ast.StructType{}, filled: map[string]string{}}
	fset := token.NewFileSet()
	client, err := parser.ParseFile(fset, filepath.Join(dir, "api_client.go"), nil, 0)
	if err != nil {
		return nil, fmt.Errorf("gentokens: %s is not an SDK service package: %w", dir, err)
	}
	for _, d := range client.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
			for _, spec := range g.Specs {
				v := spec.(*ast.ValueSpec)
				if len(v.Names) == 1 && v.Names[0].Name == "ServiceID" && len(v.Values) == 1 {
					if lit, ok := v.Values[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						p.serviceID, _ = strconv.Unquote(lit.Value)
					}
				}
			}
		}
	}
	if p.serviceID == "" {
		return nil, fmt.Errorf("gentokens: %s: api_client.go has no ServiceID", dir)
	}
	ops, err := filepath.Glob(filepath.Join(dir, "api_op_*.go"))
	if err != nil {
		return nil, err
	}
	for _, path := range ops {
		op := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(path), "api_op_"), ".go")
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return nil, fmt.Errorf("gentokens: %w", err)
		}
		structs(f, func(name string, s *ast.StructType) {
			if name == op+"Input" {
				p.inputs[op] = s
			}
		})
		if member := filledMember(f, op); member != "" {
			p.filled[op] = member
		}
	}
	if len(p.inputs) == 0 {
		return nil, fmt.Errorf("gentokens: %s has no operation input", dir)
	}
	if f, err := parser.ParseFile(fset, filepath.Join(dir, "types", "types.go"), nil, parser.ParseComments); err == nil {
		structs(f, func(name string, s *ast.StructType) { p.types[name] = s })
	} else if !os.IsNotExist(err) {
		return nil, fmt.Errorf("gentokens: %w", err)
	}
	return p, nil
}

// structs calls fn with each struct type f declares.
func structs(f *ast.File, fn func(name string, s *ast.StructType)) {
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.TYPE {
			continue
		}
		for _, spec := range g.Specs {
			ts := spec.(*ast.TypeSpec)
			if s, ok := ts.Type.(*ast.StructType); ok {
				fn(ts.Name.Name, s)
			}
		}
	}
}

// filledMember returns the member of op's input that the SDK's token
// middleware (the HandleInitialize of idempotencyToken_initializeOp<op>)
// sets, "" if f has none.
func filledMember(f *ast.File, op string) string {
	member := ""
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "HandleInitialize" || fn.Recv == nil || fn.Body == nil || len(fn.Recv.List) != 1 {
			continue
		}
		recv := fn.Recv.List[0].Type
		if star, ok := recv.(*ast.StarExpr); ok {
			recv = star.X
		}
		if id, ok := recv.(*ast.Ident); !ok || id.Name != "idempotencyToken_initializeOp"+op {
			continue
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			if as, ok := n.(*ast.AssignStmt); ok && len(as.Lhs) == 1 {
				if sel, ok := as.Lhs[0].(*ast.SelectorExpr); ok {
					if x, ok := sel.X.(*ast.Ident); ok && x.Name == "input" {
						member = sel.Sel.Name
					}
				}
			}
			return true
		})
	}
	return member
}

// isStringPointer reports whether e is the type *string.
func isStringPointer(e ast.Expr) bool {
	star, ok := e.(*ast.StarExpr)
	if !ok {
		return false
	}
	id, ok := star.X.(*ast.Ident)
	return ok && id.Name == "string"
}

// typesStruct returns X of the type *types.X, "" for any other type.
func typesStruct(e ast.Expr) string {
	star, ok := e.(*ast.StarExpr)
	if !ok {
		return ""
	}
	sel, ok := star.X.(*ast.SelectorExpr)
	if !ok {
		return ""
	}
	if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "types" {
		return ""
	}
	return sel.Sel.Name
}

// sortedFields returns the named fields of s, by name, as the models'
// members are read.
func sortedFields(s *ast.StructType) []*ast.Field {
	var fs []*ast.Field
	for _, f := range s.Fields.List {
		if len(f.Names) == 1 {
			fs = append(fs, f)
		}
	}
	slices.SortFunc(fs, func(a, b *ast.Field) int { return strings.Compare(a.Names[0].Name, b.Names[0].Name) })
	return fs
}

func sortedOps(m map[string]*ast.StructType) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
