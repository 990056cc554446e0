#!/usr/bin/env bash
# Installs the modules as a user would: from a module proxy, outside the
# repository, with no go.work and no replace. lab/modproxy writes a proxy
# directory holding every module of the tree at the release's version
# (the one the nested go.mod files require); then, in a temporary
# directory:
#
# 1. a consumer module `go get`s the root, pgjournal, idemserver,
#    idemotel, idemaws, idemgin and idemecho at that version, and builds
#    and vets a program importing each of them (and the journal contract,
#    the file journal and a database package of idemserver);
# 2. a consumer of the root alone (the client, the journal contract and
#    the file journal) must have none of the modules the module policy
#    excludes (CONTRIBUTING.md) in its module graph.
#
# The third-party modules come from this machine's module cache, served
# as a second file proxy, then from proxy.golang.org. The idemkit modules
# are not in the checksum database (GONOSUMDB): their zips are made here,
# not fetched from a tag. A module cache of the test's own keeps those
# zips out of the machine's; it stays at one place between runs
# (IDEM_CONSUMER_CACHE), less the idemkit modules, which each run makes
# afresh, so that the build cache holds the third-party packages compiled
# from it (the build cache keys a package by its directory): only the
# first run compiles them all, some minutes on two cores. The go
# command's module index takes a directory of the module cache for
# immutable and keys it by its path alone: it would answer from the
# packages the idemkit modules had on an earlier run, so it is off
# (GODEBUG=goindex=0).
set -euo pipefail
[ -z "${IDEM_CONSUMER_TRACE:-}" ] || { PS4='+ [$SECONDS s] '; set -x; }
cd "$(dirname "$0")/.."

tmp=$(mktemp -d)
modcache=${IDEM_CONSUMER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/idem-consumer/mod}
forget() { rm -rf "$modcache/github.com/idemkit" "$modcache/cache/download/github.com/idemkit"; }
cleanup() { forget; rm -rf "$tmp"; }
trap cleanup EXIT
mkdir -p "$modcache"
forget

version=$(go run ./lab/modproxy -out "$tmp/proxy")
cache=$(go env GOMODCACHE)
export GOWORK=off GOFLAGS="-mod=mod -modcacherw" GOMODCACHE="$modcache" \
  GOPROXY="file://$tmp/proxy,file://$cache/cache/download,https://proxy.golang.org" \
  GONOSUMDB=github.com/idemkit/idem GOTOOLCHAIN=local GODEBUG=goindex=0
echo "consumer: the tree's modules at $version, from file://$tmp/proxy"

m=github.com/idemkit/idem
imports=("$m" "$m/journal" "$m/filejournal" "$m/pgjournal" "$m/idemserver" "$m/idemserver/postgres"
  "$m/idemotel" "$m/idemaws" "$m/idemgin" "$m/idemecho")

mkdir "$tmp/all"
(
  cd "$tmp/all"
  go mod init example.com/consumer >/dev/null 2>&1
  {
    echo "package main"
    echo
    echo "import ("
    for p in "${imports[@]}"; do
      [ "$p" = "$m" ] || echo "	_ \"$p\""
    done
    echo
    echo "	\"$m\""
    echo ")"
    echo
    echo "func main() {"
    echo "	if _, err := idem.New(idem.Config{}); err != nil {"
    echo "		panic(err)"
    echo "	}"
    echo "}"
  } > main.go
  go get "$m@$version" "$m/pgjournal@$version" "$m/idemserver@$version" "$m/idemotel@$version" \
    "$m/idemaws@$version" "$m/idemgin@$version" "$m/idemecho@$version" 2>&1 | grep -v '^go: downloading' || true
  go mod tidy
  go build ./...
  go vet ./...
  if grep -q '^replace' go.mod; then
    echo "consumer: go.mod has a replace directive"; exit 1
  fi
  echo "consumer: built and vetted a program importing ${#imports[@]} packages:"
  grep "^	$m" go.mod
)

# The modules a program using only the client and the file journal must
# not inherit (TestM1RootModuleRequiresOnlyTheClientsDependencies keeps
# the same list for the root's go.mod).
excluded='^(github\.com/jackc/|github\.com/lib/pq|github\.com/go-sql-driver/|github\.com/mattn/go-sqlite3|modernc\.org/|go\.opentelemetry\.io/|github\.com/schollz/progressbar|golang\.org/x/term|go\.uber\.org/goleak|pgregory\.net/rapid|github\.com/aws/|github\.com/gin-gonic/|github\.com/labstack/|gorm\.io/|github\.com/idemkit/idem/)'
mkdir "$tmp/root"
(
  cd "$tmp/root"
  go mod init example.com/rootonly >/dev/null 2>&1
  cat > main.go <<GO
package main

import (
	"$m"
	"$m/filejournal"
	_ "$m/journal"
)

func main() {
	j, err := filejournal.Open("ops.journal", filejournal.Options{})
	if err != nil {
		panic(err)
	}
	defer j.Close()
	if _, err := idem.New(idem.Config{Journal: j}); err != nil {
		panic(err)
	}
}
GO
  go get "$m@$version" 2>&1 | grep -v '^go: downloading' || true
  go mod tidy
  go build ./...
  graph=$(go mod graph)
  mods=$(printf '%s\n' "$graph" | tr ' ' '\n' | sed 's/@.*//' | grep -vxE 'go|toolchain' | sort -u)
  if bad=$(printf '%s\n' "$mods" | grep -E "$excluded"); then
    echo "consumer: the module graph of a program using only the root holds modules the policy excludes:"
    echo "$bad"
    exit 1
  fi
  if bad=$(cut -d' ' -f1 go.sum | sort -u | grep -E "$excluded"); then
    echo "consumer: go.sum of a program using only the root names modules the policy excludes:"
    echo "$bad"
    exit 1
  fi
  echo "consumer: a program using only the root has $(printf '%s\n' "$mods" | grep -vc '^example.com/') modules in its graph, none excluded:"
  printf '%s\n' "$mods" | grep -v '^example.com/' | sed 's/^/  /'
)
