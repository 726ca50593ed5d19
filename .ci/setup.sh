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
# The compiler cache of testbed installs (optional): Debian's ccache.
if ! command -v ccache >/dev/null && command -v apt-get >/dev/null; then
    (apt-get update -qq && apt-get install -y -qq ccache >/dev/null) || echo "ccache not installed; testbed installs will compile in full"
fi
# A line every 30 s while a long step runs, so a quiet pip is seen to be working.
with_heartbeat() {
    local what=$1 start beat rc=0
    shift
    start=$(date +%s)
    ( while sleep 30; do
        elapsed=$(( $(date +%s) - start ))
        echo "... still $what: $(( elapsed / 60 )) min $(( elapsed % 60 )) s so far" >&2
      done ) &
    beat=$!
    "$@" || rc=$?
    kill "$beat" 2>/dev/null || true
    wait "$beat" 2>/dev/null || true
    return "$rc"
}
# local: the bundled model's server (llama.cpp compiles from source the first time: about 4.5 min
# on an idle 2-core machine, far longer on a busy one); grade: the swebench package; serve: the
# inspector's web app; docs: the documentation site's build (mkdocs)
.venv/bin/python -m pip show --quiet llama-cpp-python >/dev/null 2>&1 ||
    echo "Installing magis-ray; llama.cpp compiles from source (minutes; a line every 30 s says it is still going)" >&2
with_heartbeat "installing (compiling llama.cpp)" .venv/bin/python -m pip install --quiet -e '.[test,local,grade,serve,docs]'
