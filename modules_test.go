package idem_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// excludedModules are the module path prefixes that a program using only
// the client and the file journal must not inherit: database drivers, the
// OpenTelemetry SDK, the commands' libraries, the tests' libraries, the
// vendor SDKs and web frameworks, and the repository's other modules.
var excludedModules = []string{
	"github.com/jackc/",           // pgx: pgjournal, idemserver/postgres
	"github.com/lib/pq",           // any other PostgreSQL driver
	"github.com/go-sql-driver/",   // MySQL: idemserver/mysql
	"github.com/mattn/go-sqlite3", // any other SQLite driver
	"modernc.org/",                // SQLite: idemserver/sqlite
	"go.opentelemetry.io/",        // idemotel
	"github.com/schollz/progressbar",
	"golang.org/x/term", // the commands' terminal
	"go.uber.org/goleak",
	"pgregory.net/rapid",
	"github.com/stretchr/testify",
	"github.com/aws/", // idemaws
	"github.com/gin-gonic/",
	"github.com/labstack/",
	"gorm.io/",
	"github.com/idemkit/idem/", // every other module of the repository
}

// rootDirect are the modules the root module may require directly: what
// the client and the file journal import.
var rootDirect = []string{
	"github.com/google/uuid",
	"github.com/hashicorp/go-retryablehttp",
	"github.com/hashicorp/go-cleanhttp",
	"github.com/cenkalti/backoff/v4",
	"github.com/gofrs/flock", // the file journal's lock
	"golang.org/x/sys",       // through flock, and the file journal's syscalls
}

// requirement is one require line of a go.mod.
type requirement struct {
	path, version string
	indirect      bool
}

// readGoMod returns the requirements of the go.mod at path and whether it
// has a replace directive. It reads the file's syntax as the go command
// writes it: single lines and parenthesised blocks.
func readGoMod(t *testing.T, path string) (reqs []requirement, replaces bool) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block := ""
	for line := range strings.Lines(string(data)) {
		text, comment, _ := strings.Cut(line, "//")
		f := strings.Fields(text)
		switch {
		case len(f) == 0:
			continue
		case block != "" && f[0] == ")":
			block = ""
			continue
		case block == "" && len(f) == 2 && f[1] == "(":
			block = f[0]
			if block == "replace" {
				replaces = true
			}
			continue
		}
		verb := block
		if verb == "" {
			verb, f = f[0], f[1:]
		}
		switch verb {
		case "replace":
			replaces = true
		case "require":
			if len(f) != 2 {
				t.Fatalf("%s: cannot read the requirement %q", path, strings.TrimSpace(line))
			}
			reqs = append(reqs, requirement{f[0], f[1], strings.TrimSpace(comment) == "indirect"})
		}
	}
	return reqs, replaces
}

// M1.1: the root module requires none of the excluded modules, directly
// or not, and directly only what the client and the file journal import.
func TestM1RootModuleRequiresOnlyTheClientsDependencies(t *testing.T) {
	reqs, replaces := readGoMod(t, "go.mod")
	if replaces {
		t.Error("go.mod has a replace directive")
	}
	if len(reqs) == 0 {
		t.Fatal("read no requirement in go.mod")
	}
	for _, r := range reqs {
		for _, x := range excludedModules {
			if strings.HasPrefix(r.path, x) {
				t.Errorf("go.mod requires %s %s, which the module policy excludes (%s): it belongs in the module of the package that needs it",
					r.path, r.version, x)
			}
		}
		if !r.indirect && !slices.Contains(rootDirect, r.path) {
			t.Errorf("go.mod requires %s directly, which the client and the file journal do not need", r.path)
		}
	}
}

// M1.2: no module of the repository replaces another: each requires its
// siblings at the release's version, the same for every sibling in every
// module, so that a consumer resolves it from a module proxy as it is.
func TestM1ModulesRequireSiblingsAtOneVersionWithoutReplace(t *testing.T) {
	var mods []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.Name() == "go.mod" {
			mods = append(mods, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(mods) < 2 {
		t.Fatalf("found %d go.mod files, want the root's and the nested modules'", len(mods))
	}
	version, from := "", ""
	for _, mod := range mods {
		reqs, replaces := readGoMod(t, mod)
		if replaces {
			t.Errorf("%s has a replace directive: a consumer's build ignores it", mod)
		}
		for _, r := range reqs {
			if r.path != "github.com/idemkit/idem" && !strings.HasPrefix(r.path, "github.com/idemkit/idem/") {
				continue
			}
			switch {
			case version == "":
				version, from = r.version, mod
			case r.version != version:
				t.Errorf("%s requires %s %s, but %s requires the repository's modules at %s: tag them in lockstep",
					mod, r.path, r.version, from, version)
			}
		}
	}
	if version == "" {
		t.Error("no nested module requires the root")
	}
}
