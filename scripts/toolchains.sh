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

# Light toolchains (a few MB each) go everywhere. The heavy ones (R, Racket, Scala, Kotlin, Mono: about 1.3 GB
# installed, most of the image's build time) go on the host, where apt installs them in under a minute, and
# into the Docker image only with SANDBOXKIT_DOCKER_FULL=1 (docker-setup.sh), so CI's image stays quick.
SANDBOXKIT_LIGHT_PACKAGES="php-cli ruby perl lua5.4 ldc iverilog sqlite3 junit5 python3-pytest libtest-deep-perl lua-unit"
SANDBOXKIT_HEAVY_PACKAGES="r-base-core racket scala kotlin mono-mcs mono-runtime"
SANDBOXKIT_LANG_PACKAGES=${SANDBOXKIT_LANG_PACKAGES-"$SANDBOXKIT_LIGHT_PACKAGES $SANDBOXKIT_HEAVY_PACKAGES"}
if [ "${SANDBOXKIT_DOCKER_FULL:-0}" = 1 ]; then
  SANDBOXKIT_DOCKER_LANG_PACKAGES=${SANDBOXKIT_DOCKER_LANG_PACKAGES-"$SANDBOXKIT_LANG_PACKAGES"}
else
  SANDBOXKIT_DOCKER_LANG_PACKAGES=${SANDBOXKIT_DOCKER_LANG_PACKAGES-"$SANDBOXKIT_LIGHT_PACKAGES"}
fi
SANDBOXKIT_SANDBOX_PYTHON_PACKAGES=${SANDBOXKIT_SANDBOX_PYTHON_PACKAGES-"python3-numpy python3-requests python3-ipython"}
SANDBOXKIT_SANDBOX_NPM_PACKAGES=${SANDBOXKIT_SANDBOX_NPM_PACKAGES-"lodash@4.17.21 tsx@4.7.1 jest@29.7.0 babel-jest@29.7.0 @jest/globals@29.7.0 @babel/core@7.24.5 @babel/preset-env@7.24.5 @babel/preset-typescript@7.24.1"}
SANDBOXKIT_NODE_PREFIX=${SANDBOXKIT_NODE_PREFIX:-/usr/local/lib/sandboxkit/node}

# Debian packages of $* that are not installed yet (prints them, space separated).
missing_debs() {
  local pkg out=()
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || out+=("$pkg")
  done
  echo "${out[*]:-}"
}

# Install the npm packages into $SANDBOXKIT_NODE_PREFIX, once per list (the list is recorded there). Needs the
# npm registry, so it runs at bootstrap; the Docker image copies the tree and builds offline.
install_sandbox_npm_packages() {
  local stamp="$SANDBOXKIT_NODE_PREFIX/.sandboxkit-packages"
  [ -n "$SANDBOXKIT_SANDBOX_NPM_PACKAGES" ] || return 0
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$SANDBOXKIT_SANDBOX_NPM_PACKAGES" ]; then
    return 0
  fi
  command -v npm >/dev/null 2>&1 || { echo "npm not found: install nodejs (with npm) first" >&2; return 1; }
  mkdir -p "$SANDBOXKIT_NODE_PREFIX"
  # shellcheck disable=SC2086  # the list is word-split on purpose
  npm install --prefix "$SANDBOXKIT_NODE_PREFIX" --no-audit --no-fund --loglevel=error \
    $SANDBOXKIT_SANDBOX_NPM_PACKAGES >/dev/null
  # typescript and jest start node through this wrapper: where the tree is missing (an image built without
  # it), the command itself is missing, which every backend reports as ToolchainMissing, not a failed run.
  mkdir -p "$SANDBOXKIT_NODE_PREFIX/bin"
  printf '#!/bin/sh\nexec node "$@"\n' >"$SANDBOXKIT_NODE_PREFIX/bin/node"
  chmod -R a+rX "$SANDBOXKIT_NODE_PREFIX"  # sandboxes run as unprivileged users
  echo "$SANDBOXKIT_SANDBOX_NPM_PACKAGES" >"$stamp"
}
