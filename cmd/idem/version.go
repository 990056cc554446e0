package main

// idem --version: what was built, from the binary's build information.

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// writeVersion writes one line: the module version, the commit it was
// built from when known, and the Go toolchain and platform.
func writeVersion(w io.Writer) {
	info, ok := debug.ReadBuildInfo()
	fmt.Fprintln(w, versionLine(info, ok))
}

// versionLine formats build information: "idem v1.2.3 (commit abc1234,
// 2026-11-30, modified) go1.26.8 linux/amd64"; parts the build did not
// record are left out.
func versionLine(info *debug.BuildInfo, ok bool) string {
	version := "(unknown)"
	var commit, when string
	modified := false
	if ok {
		version = info.Main.Version
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value[:min(len(s.Value), 12)]
			case "vcs.time":
				when = s.Value[:min(len(s.Value), 10)]
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	line := "idem " + version
	if commit != "" {
		line += " (commit " + commit
		if when != "" {
			line += ", " + when
		}
		if modified {
			line += ", modified"
		}
		line += ")"
	}
	return fmt.Sprintf("%s %s %s/%s", line, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
