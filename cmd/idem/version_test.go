package main

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionLine(t *testing.T) {
	platform := " " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
	for _, tc := range []struct {
		info *debug.BuildInfo
		ok   bool
		want string
	}{
		{nil, false, "idem (unknown)" + platform},
		{&debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, true, "idem v1.2.3" + platform},
		{&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123"},
			{Key: "vcs.time", Value: "2026-11-30T15:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		}}, true, "idem (devel) (commit 0123456789ab, 2026-11-30, modified)" + platform},
	} {
		if got := versionLine(tc.info, tc.ok); got != tc.want {
			t.Errorf("versionLine = %q, want %q", got, tc.want)
		}
	}
}

func TestVersionCommand(t *testing.T) {
	for _, arg := range []string{"--version", "version"} {
		r := runCLI(t, arg)
		if r.code != exitOK || !strings.HasPrefix(r.stdout, "idem ") || !strings.HasSuffix(r.stdout, runtime.GOOS+"/"+runtime.GOARCH+"\n") || r.stderr != "" {
			t.Errorf("idem %s: exit %d, stdout %q, stderr %q", arg, r.code, r.stdout, r.stderr)
		}
	}
}
