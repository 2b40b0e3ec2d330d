#!/usr/bin/env bash
# Make .venv-harbor: Harbor (https://github.com/laude-institute/harbor, Python >= 3.12) and this checkout of
# sandboxkit, for `harbor run --env sandboxkit.integrations.harbor_environment:SandboxkitEnvironment` and
# tests/integrations/test_harbor_provider.py. Idempotent: a venv that exists is reused, its install refreshed.
# Python: pyenv's 3.12 (the machine image ships 3.12.1), else python3.12 on PATH. Needs the package registry.
# About 1.5 min the first time (network bound); scripts/bootstrap.sh --all runs it in the background.
set -euo pipefail
cd "$(dirname "$0")/.."
HARBOR_PIN="harbor==0.26.0"
VENV=.venv-harbor
root=$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")
py=""
for candidate in "$root"/versions/3.12.*/bin/python3.12 "$(command -v python3.12 || true)"; do
  [ -x "$candidate" ] && { py=$candidate; break; }
done
# Exit 3: no interpreter, so nothing was promised (bootstrap.sh goes on; the Harbor tests say what is missing).
[ -n "$py" ] || { echo "[harbor-venv] python3.12 not found (pyenv install 3.12, or put python3.12 on PATH)" >&2; exit 3; }
[ -x "$VENV/bin/python" ] || "$py" -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check "$HARBOR_PIN" -e ".[docker,harbor]"
# Prove it: Harbor's CLI starts and finds the provider as `harbor run --env` will.
"$VENV/bin/harbor" --version >/dev/null
"$VENV/bin/python" -c "from harbor.utils.import_path import import_class; from harbor.environments.base import BaseEnvironment; \
import_class('sandboxkit.integrations.harbor_environment:SandboxkitEnvironment', base=BaseEnvironment, label='environment')"
echo "[harbor-venv] $VENV ready: $("$VENV/bin/harbor" --version 2>&1 | tail -n 1)" >&2
