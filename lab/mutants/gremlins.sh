#!/usr/bin/env bash
# Generated mutants (gremlins) over the safety packages, each with its own
# tests; lab/mutants covers what gremlins cannot generate. MUTANTS.md,
# beside this script, says how to read the figures and records the last ones.
#
#   lab/mutants/gremlins.sh                    # every safety package
#   lab/mutants/gremlins.sh ./pgjournal        # some of them
#   lab/mutants/gremlins.sh --diff main        # what a change touched
#   lab/mutants/gremlins.sh --dry-run ./pgjournal
#                                   # list the mutants and their coverage only
#   GREMLINS_FILES='client.go retry.go' lab/mutants/gremlins.sh .
#                                                   # some files of one package
#
# Results go to $GREMLINS_OUT (default /tmp/idem-gremlins): a log and a
# JSON report per package, and a summary line each on standard output.
# A whole run takes hours on two cores (MUTANTS.md has the times); --diff
# takes minutes. GREMLINS_WORKERS (default 2) is how many mutants run at
# once. The tests' files go to tmpfs where there is one, which
# makes the file journal's fsyncs cheap and the run several times faster.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD

version=v0.6.0
diff=() dry=()
if [ "${1:-}" = --dry-run ]; then
  dry=(--dry-run); shift
fi
if [ "${1:-}" = --diff ]; then
  diff=(--diff "$2"); shift 2
fi
pkgs=("$@")
[ ${#pkgs[@]} -gt 0 ] || pkgs=(. ./filejournal ./internal/fileengine ./internal/journalkit ./pgjournal ./idemserver ./testserver ./idemaws ./idemgin ./idemecho)

# The workspace's modules, as "path dir" lines.
mapfile -t mods < <(go list -m -f '{{.Path}} {{.Dir}}')

gremlins=$(go env GOPATH)/bin/gremlins
if ! go version -m "$gremlins" 2>/dev/null | grep -q "gremlins.*$version"; then
  GOFLAGS= go install "github.com/go-gremlins/gremlins/cmd/gremlins@$version"
fi

out=${GREMLINS_OUT:-/tmp/idem-gremlins}
mkdir -p "$out"
out=$(cd "$out" && pwd)
[ -d /dev/shm ] && [ -w /dev/shm ] && export TMPDIR=/dev/shm
# Coverage and every mutant run afresh, not from the test cache; CI=true
# makes a test that misses PostgreSQL fail rather than skip.
export GOFLAGS=-count=1 CI=true

# For the root package gremlins gathers coverage over ./..., the whole
# module's tests: a shim narrows that one command to the root's own.
shim=$(mktemp -d)
trap 'rm -rf "$shim"' EXIT
realgo=$(command -v go)
cat > "$shim/go" <<SHIM
#!/usr/bin/env bash
if [ -n "\${IDEM_GREMLINS_ROOT:-}" ] && [ "\$1" = test ] && [ "\${!#}" = ./... ]; then
  set -- "\${@:1:\$#-1}" .
fi
exec "$realgo" "\$@"
SHIM
chmod +x "$shim/go"
# gremlins names a package's files relative to the package, and compares
# them with what git diff names relative to the repository: a shim makes
# git name them relative to the package. It also asks for no context
# lines: gremlins v0.6.0 takes a hunk's added lines for one block after
# its leading context, and with context a change below another in the
# same hunk would be skipped.
realgit=$(command -v git)
cat > "$shim/git" <<SHIM
#!/usr/bin/env bash
if [ "\$1" = diff ] && [ -n "\${IDEM_GREMLINS_PKG:-}" ] && [ "\$IDEM_GREMLINS_PKG" != . ]; then
  exec "$realgit" diff --unified=0 --relative="\$IDEM_GREMLINS_PKG/" "\${@:2}"
fi
if [ "\$1" = diff ]; then
  exec "$realgit" diff --unified=0 "\${@:2}"
fi
exec "$realgit" "\$@"
SHIM
chmod +x "$shim/git"

# With --diff, only the packages whose code the change touched.
changed=
if [ ${#diff[@]} -gt 0 ]; then
  changed=$(git diff --merge-base "${diff[1]}" --name-only -- '*.go' ':!*_test.go' | xargs -r -n1 dirname | sort -u)
fi
touches() {
  [ ${#diff[@]} -eq 0 ] || printf '%s\n' "$changed" | grep -qx "${1#./}"
}

for pkg in "${pkgs[@]}"; do
  if ! touches "$pkg"; then
    echo "$pkg: the change does not touch its code"
    continue
  fi
  name=$(echo "${pkg#./}" | tr / -); [ "$name" = . ] && name=root
  args=(unleash --invert-logical --invert-loopctrl --remove-self-assignments
    --workers "${GREMLINS_WORKERS:-2}" --timeout-coefficient 3 -o "$out/$name.json" "${diff[@]}" "${dry[@]}")
  # A package's own files only: every directory below it is another
  # package, with tests of its own (gremlins names files relative to
  # the package).
  args+=(-E '/')
  env=()
  # pgjournal's model test checks 100 random fleets by default, 40% of
  # the package's run; each mutant runs it with 20 (RAPID_CHECKS).
  if [ "$pkg" = ./pgjournal ]; then env=(RAPID_CHECKS="${RAPID_CHECKS:-20}"); fi
  if [ "$pkg" = . ]; then
    args+=(-E '_test\.go$')
    env=(IDEM_GREMLINS_ROOT=1)
  fi
  # GREMLINS_FILES names the files to mutate (a long package run in
  # parts): every other file of the package is excluded. Unlike --diff,
  # it keeps gremlins' coverage of the whole package.
  if [ -n "${GREMLINS_FILES:-}" ]; then
    for f in "$pkg"/*.go; do
      f=${f#./}; base=${f##*/}
      case " $GREMLINS_FILES " in *" $base "*) ;; *) args+=(-E "(^|/)${base//./\\.}\$") ;; esac
    done
  fi
  # A nested module (pgjournal, idemserver, idemaws…) runs from its own
  # directory. gremlins tests each mutant in a copy of that directory,
  # outside the workspace (go.work), where the repository's other modules
  # it requires at the release's version do not resolve: a copy of its
  # go.mod, given by -modfile, replaces each of them by its directory
  # here.
  dir=. target=$pkg
  if [ "$pkg" != . ] && [ -f "$pkg/go.mod" ]; then
    dir=$pkg target=.
    cp "$pkg/go.mod" "$shim/$name.mod"
    cp "$pkg/go.sum" "$shim/$name.sum"
    replaces=()
    for mod in "${mods[@]}"; do
      [ "${mod#* }" = "$root/${pkg#./}" ] || replaces+=(-replace "${mod%% *}=${mod#* }")
    done
    go mod edit "${replaces[@]}" "$shim/$name.mod"
    env+=(GOWORK=off GOFLAGS="$GOFLAGS -modfile=$shim/$name.mod")
  fi
  start=$(date +%s)
  (cd "$dir" && env "${env[@]}" IDEM_GREMLINS_PKG="${pkg#./}" PATH="$shim:$PATH" "$gremlins" "${args[@]}" "$target") > "$out/$name.log" 2>&1 || true
  took=$(( $(date +%s) - start ))
  summary=$(grep -E 'Killed:|Timed out:|Test efficacy|Mutator coverage' "$out/$name.log" | tr -s ' \n' ' ')
  echo "$pkg ($took s): $summary"
done
