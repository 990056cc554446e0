#!/usr/bin/env bash
# Tidies the go.mod and go.sum of every module of go.work. A nested module
# requires the repository's other modules at the release's version
# (IDEM_VERSION, by default the one its go.mod already names), which no
# proxy serves before the tags exist: each module is tidied with
# temporary replace directives pointing at this tree, and they are
# dropped afterwards, so that no go.mod keeps one.
#
#   scripts/tidy.sh                       # every module
#   IDEM_VERSION=v0.2.0 scripts/tidy.sh   # and require that version (go.work too)
set -euo pipefail
cd "$(dirname "$0")/.."
version=${IDEM_VERSION:-v0.1.0}
root=$PWD
mapfile -t mods < <(go list -m -f '{{.Path}} {{.Dir}}')
for mod in "${mods[@]}"; do
  path=${mod%% *} dir=${mod#* }
  [ "$dir" = "$root" ] && continue
  (
    cd "$dir"
    edits=()
    for other in "${mods[@]}"; do
      opath=${other%% *} odir=${other#* }
      [ "$opath" = "$path" ] && continue
      edits+=(-replace "$opath=$odir")
      # Only the siblings it already requires, at the version asked
      # for; tidy adds the ones its imports need and drops the rest.
      if grep -q "^[[:space:]]*$opath v" go.mod || grep -q "^require $opath v" go.mod; then
        edits+=(-require "$opath@$version")
      fi
    done
    go mod edit "${edits[@]}"
    drop=()
    for other in "${mods[@]}"; do
      opath=${other%% *}
      [ "$opath" = "$path" ] || drop+=(-dropreplace "$opath")
    done
    status=0
    GOWORK=off GOFLAGS=-mod=mod go mod tidy || status=$?
    go mod edit "${drop[@]}"
    # A sibling tidy added through its replace is required at the
    # pseudo-version of a replaced module: name the release's instead.
    for other in "${mods[@]}"; do
      opath=${other%% *}
      if grep -q "$opath v0.0.0-00010101000000-000000000000" go.mod; then
        go mod edit -require "$opath@$version"
      fi
    done
    [ "$status" -eq 0 ] || { echo "tidy failed in $dir" >&2; exit "$status"; }
  )
done
(GOWORK=off go mod tidy)
# go.work answers the version each module requires from the tree.
sed -i "s#^\(\tgithub\.com/idemkit/idem[^ ]*\) v[^ ]* =>#\1 $version =>#" go.work
