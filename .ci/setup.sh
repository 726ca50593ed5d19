#!/usr/bin/env bash
# Everything magis-ray needs, from scratch: a virtual environment with the package and its tests' deps.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip setuptools  # a setuptools that builds editable installs without warnings
.venv/bin/python -m pip install --quiet -e '.[test,local]'  # local: the bundled model's server (compiles llama.cpp, ~4 min)
