"""Record tests/golden/v2_model_run.jsonl: a real run of the example issue as schema version 2 wrote
it, with the model's settings recorded the way version 2 kept them (`settings.llm` with `kind`,
`timeout_s`, `requests_per_minute`; `settings.roles` beside it), and the prompt templates of that
time copied to tests/golden/v2_model_prompts/. Version 3 moved those fields into
`settings.endpoint` under the settings' own names: this log is what proves that a record whose
fields moved and changed shape is upcast before it is typed (tests/test_schema_evolution.py).

    PYTHON=/path/to/a/venv/of/a/version-2/checkout/bin/python python tests/make_golden_v2_model.py [--force]

PYTHON must run magis-ray at a commit whose events/schema.py says SCHEMA_VERSION = 2 (the log
records whichever version wrote it). The golden files are frozen, like v1's.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
LOG = HERE / "golden" / "v2_model_run.jsonl"
PROMPTS = HERE / "golden" / "v2_model_prompts"


def main(argv: list[str]) -> int:
    if LOG.exists() and "--force" not in argv:
        print(f"{LOG} exists; the golden files are frozen (use --force to overwrite)", file=sys.stderr)
        return 1
    python = os.environ.get("PYTHON", sys.executable)
    magis = [python, "-m", "magis_ray.cli.main"]
    env = {**os.environ, "MAGIS_LOG_LEVEL": "warning"}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        subprocess.run([python, str(ROOT / "examples" / "calc" / "make_repo.py"), str(work / "calc")], check=True)
        done = subprocess.run([*magis, "submit", str(ROOT / "examples" / "calc" / "issue.json"), "--repo", str(work / "calc"),
                               "--store", str(work / "store"), "--llm", f"scripted:{ROOT / 'examples' / 'calc' / 'script.json'}",
                               "--tests", "off", "--timeout", "7", "--rpm", "600", "--concurrency", "3",
                               "--role-model", "developer=scripted-developer"],
                              env=env, capture_output=True, text=True)
        if done.returncode:
            sys.exit(done.stdout + done.stderr)
        run_id = next(line.split(":", 1)[1].strip() for line in done.stdout.splitlines() if line.startswith("run:"))
        events = subprocess.run([*magis, "events", run_id, "--store", str(work / "store")], env=env, capture_output=True,
                                check=True).stdout
        prompts = subprocess.run([python, "-c", "from importlib import resources; "
                                  "print(resources.files('magis_ray.actors.model.prompts'))"],
                                 capture_output=True, text=True, check=True).stdout.strip()
    LOG.write_bytes(events)
    shutil.rmtree(PROMPTS, ignore_errors=True)
    PROMPTS.mkdir()
    for template in Path(prompts).iterdir():
        if template.name.endswith(".txt"):
            shutil.copy(template, PROMPTS / template.name)
    print(f"wrote {LOG.relative_to(ROOT)} ({len(events.splitlines())} events) and {PROMPTS.relative_to(ROOT)}/")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
