#!/usr/bin/env bash
# Set everything up, then let the MAGIS team resolve the example issue: embedded SQLite store,
# local Ray, and the bundled local model (SmolLM2-135M on loopback: no API key).
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/setup.sh
.venv/bin/python examples/calc/make_repo.py .magis/example/calc >/dev/null
.venv/bin/magis-ray submit examples/calc/issue.json --repo .magis/example/calc --llm local
