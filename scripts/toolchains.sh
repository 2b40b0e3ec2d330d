# Toolchains and preinstalled packages of the sandboxed languages (docs/languages.md), sourced by
# scripts/bootstrap.sh (the host, which subprocess sandboxes see) and scripts/docker-setup.sh (the image),
# so both backends run the same language table. Each list can be replaced through its environment variable.
#
#   SANDBOXKIT_LANG_PACKAGES             Debian packages of the languages beyond python, bash, c, cpp,
#                                        javascript and java (in the core set already), with the test
#                                        libraries MultiPL-E-style tests load (Test::Deep, luaunit)
#   SANDBOXKIT_DOCKER_LANG_PACKAGES      the same for the Docker image (default: the light ones; all of
#                                        SANDBOXKIT_LANG_PACKAGES with SANDBOXKIT_DOCKER_FULL=1)
#   SANDBOXKIT_SANDBOX_PYTHON_PACKAGES   Python libraries sandboxed programs may import. Debian packages,
#                                        because sandboxes run the system /usr/bin/python3, not a venv
#   SANDBOXKIT_SANDBOX_NPM_PACKAGES      npm packages (pinned) sandboxed node/typescript/jest programs may
#                                        import; tsx and jest are the typescript and jest runners themselves
#   SANDBOXKIT_NODE_PREFIX               where the npm packages go (sandboxkit.languages.NODE_PREFIX)
#   SANDBOXKIT_GO_MODULES                Go modules sandboxed go/go_test programs may import, as MODULE=DEBIAN-PACKAGE
#                                        (the first is what the template requires, the others what it needs);
#                                        built into an offline module cache from Debian's source packages
#   SANDBOXKIT_GO_PREFIX                 where that cache goes (sandboxkit.languages.GO_PREFIX)

# Light toolchains (a few MB each) go everywhere. The heavy ones (R, Racket, Scala, Kotlin, Mono: about 1.3 GB
# installed, most of the image's build time) go on the host, where apt installs them in under a minute, and
# into the Docker image only with SANDBOXKIT_DOCKER_FULL=1 (docker-setup.sh), so CI's image stays quick.
# libdata-compare-perl and libjavatuples-java: libraries Sandbox Fusion's image bundles (Perl's Data::Compare, the
# javatuples jar on Java's classpath), which correct programs import.
SANDBOXKIT_LIGHT_PACKAGES="php-cli ruby perl lua5.4 ldc iverilog sqlite3 junit5 python3-pytest libtest-deep-perl lua-unit libdata-compare-perl libjavatuples-java"
SANDBOXKIT_HEAVY_PACKAGES="r-base-core racket scala kotlin mono-mcs mono-runtime"
SANDBOXKIT_GO_MODULES=${SANDBOXKIT_GO_MODULES-"github.com/stretchr/testify=golang-github-stretchr-testify-dev github.com/davecgh/go-spew=golang-github-davecgh-go-spew-dev github.com/pmezard/go-difflib=golang-github-pmezard-go-difflib-dev github.com/stretchr/objx=golang-github-stretchr-objx-dev gopkg.in/yaml.v3=golang-gopkg-yaml.v3-dev"}
SANDBOXKIT_GO_PREFIX=${SANDBOXKIT_GO_PREFIX:-/usr/local/lib/sandboxkit/go}
# The Go source packages are the host's only (the image copies the module cache built from them).
SANDBOXKIT_GO_DEBS=$(for m in $SANDBOXKIT_GO_MODULES; do printf '%s ' "${m#*=}"; done)
SANDBOXKIT_LANG_PACKAGES=${SANDBOXKIT_LANG_PACKAGES-"$SANDBOXKIT_LIGHT_PACKAGES $SANDBOXKIT_HEAVY_PACKAGES $SANDBOXKIT_GO_DEBS"}
if [ "${SANDBOXKIT_DOCKER_FULL:-0}" = 1 ]; then
  SANDBOXKIT_DOCKER_LANG_PACKAGES=${SANDBOXKIT_DOCKER_LANG_PACKAGES-"$SANDBOXKIT_LANG_PACKAGES"}
else
  SANDBOXKIT_DOCKER_LANG_PACKAGES=${SANDBOXKIT_DOCKER_LANG_PACKAGES-"$SANDBOXKIT_LIGHT_PACKAGES"}
fi
# matplotlib with its inline backend: the kernel's IPython mode shows figures as image/png, as Jupyter does.
SANDBOXKIT_SANDBOX_PYTHON_PACKAGES=${SANDBOXKIT_SANDBOX_PYTHON_PACKAGES-"python3-numpy python3-requests python3-ipython python3-matplotlib python3-matplotlib-inline"}
SANDBOXKIT_SANDBOX_NPM_PACKAGES=${SANDBOXKIT_SANDBOX_NPM_PACKAGES-"lodash@4.17.21 tsx@4.7.1 jest@29.7.0 babel-jest@29.7.0 @jest/globals@29.7.0 @babel/core@7.24.5 @babel/preset-env@7.24.5 @babel/preset-typescript@7.24.1"}
SANDBOXKIT_NODE_PREFIX=${SANDBOXKIT_NODE_PREFIX:-/usr/local/lib/sandboxkit/node}

# The Debian mirror this machine's apt uses (for debootstrap: the Docker image, scripts/fresh-machine.sh).
debian_mirror() {
  local mirror
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  [ -n "$mirror" ] || mirror=$(awk '/^deb / {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  echo "${mirror:-http://deb.debian.org/debian}"
}

# Debian packages of $* that are not installed yet (prints them, space separated).
missing_debs() {
  local pkg out=()
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || out+=("$pkg")
  done
  echo "${out[*]:-}"
}

# npm packages of $SANDBOXKIT_SANDBOX_NPM_PACKAGES that the tree in $SANDBOXKIT_NODE_PREFIX lacks or holds at another
# version (prints them, space separated). Asks the tree itself (`npm ls`, offline), one package at a time: given
# several, `npm ls` succeeds when any one of them is there.
missing_npm_packages() {
  local spec out=()
  for spec in $SANDBOXKIT_SANDBOX_NPM_PACKAGES; do
    npm ls --prefix "$SANDBOXKIT_NODE_PREFIX" --depth=0 "$spec" >/dev/null 2>&1 || out+=("$spec")
  done
  echo "${out[*]:-}"
}

# Install the npm packages into $SANDBOXKIT_NODE_PREFIX where the tree lacks any of them, and (re)write the node
# wrapper. Checks the files, not a record of an earlier run: a tree missing a package, or a wrapper without its
# execute bit (every typescript/jest run was then ToolchainMissing), is repaired. Needs the npm registry only when
# a package is missing, so it runs at bootstrap; the Docker image copies the tree and builds offline.
install_sandbox_npm_packages() {
  local want
  [ -n "$SANDBOXKIT_SANDBOX_NPM_PACKAGES" ] || return 0
  command -v npm >/dev/null 2>&1 || { echo "npm not found: install nodejs (with npm) first" >&2; return 1; }
  mkdir -p "$SANDBOXKIT_NODE_PREFIX"
  want=$(missing_npm_packages)
  if [ -n "$want" ]; then
    echo "npm packages missing from $SANDBOXKIT_NODE_PREFIX: $want" >&2
    # shellcheck disable=SC2086  # the list is word-split on purpose
    npm install --prefix "$SANDBOXKIT_NODE_PREFIX" --no-audit --no-fund --loglevel=error $want >/dev/null || {
      echo "npm install failed for: $want" >&2
      return 1
    }
    want=$(missing_npm_packages)
    [ -z "$want" ] || { echo "npm install left these packages missing: $want" >&2; return 1; }
  fi
  # typescript and jest start node through this wrapper: where the tree is missing (an image built without
  # it), the command itself is missing, which every backend reports as ToolchainMissing, not a failed run.
  # install sets the mode itself: `chmod -R a+rX` below adds x only where some x bit is already set.
  mkdir -p "$SANDBOXKIT_NODE_PREFIX/bin"
  printf '#!/bin/sh\nexec node "$@"\n' | install -m 0755 /dev/stdin "$SANDBOXKIT_NODE_PREFIX/bin/node"
  chmod -R a+rX "$SANDBOXKIT_NODE_PREFIX"  # sandboxes run as unprivileged users
  rm -f "$SANDBOXKIT_NODE_PREFIX/.sandboxkit-packages"  # the old stamp: nothing reads it any more
}

# MODULE@VERSION arguments for scripts/go-module-cache.py: each module of $SANDBOXKIT_GO_MODULES at the upstream
# version of its installed Debian package (1.8.1-1 -> v1.8.1). Prints nothing when one is not installed.
go_module_versions() {
  local spec deb version out=()
  for spec in $SANDBOXKIT_GO_MODULES; do
    deb=${spec#*=}
    version=$(dpkg-query -W -f='${Version}' "$deb" 2>/dev/null) || return 0
    version=$(echo "$version" | sed -E 's/^[0-9]+://; s/-[^-]*$//; s/[+~].*$//')
    out+=("${spec%%=*}=v$version")
  done
  echo "${out[*]:-}"
}

# Build the offline Go module cache in $SANDBOXKIT_GO_PREFIX where it lacks any module of the list (at its Debian
# version) or the files sandboxes read (go.work, go.mod, go.sum). Checks the files, not a record of an earlier run.
# Offline: the modules come from Debian's source packages (bootstrap installs them), never from a proxy.
install_go_module_cache() {
  local wanted spec path version complete=1 tmp
  [ -n "$SANDBOXKIT_GO_MODULES" ] || return 0
  command -v go >/dev/null 2>&1 || { echo "go not found: the Go module cache needs golang-go" >&2; return 1; }
  wanted=$(go_module_versions)
  [ -n "$wanted" ] || { echo "Go source packages missing: $SANDBOXKIT_GO_DEBS" >&2; return 1; }
  for spec in $wanted; do
    path=${spec%%=*} version=${spec#*=}
    [ -d "$SANDBOXKIT_GO_PREFIX/mod/$path@$version" ] || complete=0
  done
  for f in go.work go.mod go.sum; do [ -f "$SANDBOXKIT_GO_PREFIX/$f" ] || complete=0; done
  [ "$complete" = 0 ] || return 0
  echo "building the Go module cache in $SANDBOXKIT_GO_PREFIX: $wanted" >&2
  tmp="$SANDBOXKIT_GO_PREFIX.new.$$"
  rm -rf "$tmp" && mkdir -p "$tmp"
  # shellcheck disable=SC2086  # one argument per module
  python3 "$(dirname "${BASH_SOURCE[0]}")/go-module-cache.py" "$tmp" $wanted >/dev/null || {
    chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"
    echo "building the Go module cache failed" >&2
    return 1
  }
  chmod -R a+rX "$tmp"  # sandboxes run as unprivileged users; go keeps the cache itself read-only
  if [ -d "$SANDBOXKIT_GO_PREFIX" ]; then chmod -R u+w "$SANDBOXKIT_GO_PREFIX"; rm -rf "$SANDBOXKIT_GO_PREFIX"; fi
  mv "$tmp" "$SANDBOXKIT_GO_PREFIX"
}
