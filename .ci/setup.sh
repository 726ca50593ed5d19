#!/usr/bin/env bash
# Everything magis-ray needs, from scratch: a virtual environment with the package and its tests' deps.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip setuptools  # a setuptools that builds editable installs without warnings
# The sandbox of the execution layer (magis-ray grade, test runs): Debian's bubblewrap.
if ! command -v bwrap >/dev/null && command -v apt-get >/dev/null; then
    (apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null) || echo "bubblewrap not installed; sandboxed tests will be skipped"
fi
# local: the bundled model's server (compiles llama.cpp, ~4 min); grade: the swebench package;
# serve: the inspector's web app
.venv/bin/python -m pip install --quiet -e '.[test,local,grade,serve]'
