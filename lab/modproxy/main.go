// Command modproxy writes a module proxy directory, the files of the
// GOPROXY protocol that GOPROXY=file://DIR serves, holding every module
// of the workspace (go.work) at the version the nested modules require
// the root at: what the release's tags will serve, made from the working
// tree. scripts/consumer.sh builds a module outside the repository
// against it.
//
//	go run ./lab/modproxy -out /tmp/idem-proxy
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// repo is the module path prefix of the repository's modules.
const repo = "github.com/idemkit/idem"

func main() {
	out := flag.String("out", "", "the proxy `directory` to write (made if missing)")
	flag.Parse()
	if *out == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	version, err := write(*out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "modproxy:", err)
		os.Exit(1)
	}
	fmt.Println(version)
}

// mod is one module of the workspace.
type mod struct {
	Path, Dir string
	file      *modfile.File
	data      []byte
}

// write writes the proxy into dir and returns the version it serves.
func write(dir string) (string, error) {
	mods, err := workspace()
	if err != nil {
		return "", err
	}
	version, err := releaseVersion(mods)
	if err != nil {
		return "", err
	}
	when, _ := json.Marshal(struct{ Version, Time string }{version, time.Now().UTC().Format(time.RFC3339)})
	for _, m := range mods {
		escaped, err := module.EscapePath(m.Path)
		if err != nil {
			return "", err
		}
		at := filepath.Join(dir, filepath.FromSlash(escaped), "@v")
		if err := os.MkdirAll(at, 0o755); err != nil {
			return "", err
		}
		files := map[string][]byte{
			"list":            []byte(version + "\n"),
			version + ".info": when,
			version + ".mod":  m.data,
		}
		for name, data := range files {
			if err := os.WriteFile(filepath.Join(at, name), data, 0o644); err != nil {
				return "", err
			}
		}
		if err := zipModule(filepath.Join(at, version+".zip"), m, version); err != nil {
			return "", fmt.Errorf("%s: %w", m.Path, err)
		}
	}
	return version, nil
}

// zipModule writes the module's zip as the go command checks it: its
// files below its directory, those of nested modules left out.
func zipModule(path string, m mod, version string) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	return zip.CreateFromDir(f, module.Version{Path: m.Path, Version: version}, m.Dir)
}

// workspace returns the modules go.work uses, with their go.mod files.
func workspace() ([]mod, error) {
	out, err := exec.Command("go", "list", "-m", "-json").Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return nil, fmt.Errorf("go list -m: %w: %s", err, exit.Stderr)
		}
		return nil, fmt.Errorf("go list -m: %w", err)
	}
	var mods []mod
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var m mod
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, err
		}
		if m.Path != repo && !strings.HasPrefix(m.Path, repo+"/") {
			return nil, fmt.Errorf("the workspace holds %s, not a module of %s", m.Path, repo)
		}
		gomod := filepath.Join(m.Dir, "go.mod")
		if m.data, err = os.ReadFile(gomod); err != nil {
			return nil, err
		}
		if m.file, err = modfile.Parse(gomod, m.data, nil); err != nil {
			return nil, err
		}
		mods = append(mods, m)
	}
	if len(mods) < 2 {
		return nil, fmt.Errorf("go list -m reported %d modules: run it in the repository's workspace (go.work)", len(mods))
	}
	return mods, nil
}

// releaseVersion returns the one version at which the modules require
// one another, and refuses a replace directive, which a consumer's build
// would ignore.
func releaseVersion(mods []mod) (string, error) {
	version := ""
	for _, m := range mods {
		if len(m.file.Replace) > 0 {
			return "", fmt.Errorf("%s/go.mod has a replace directive", m.Dir)
		}
		for _, r := range m.file.Require {
			if r.Mod.Path != repo && !strings.HasPrefix(r.Mod.Path, repo+"/") {
				continue
			}
			if version != "" && r.Mod.Version != version {
				return "", fmt.Errorf("%s requires %s at %s, another module at %s", m.Path, r.Mod.Path, r.Mod.Version, version)
			}
			version = r.Mod.Version
		}
	}
	if version == "" {
		return "", errors.New("no module requires another: no release version to serve")
	}
	return version, nil
}
