"""Record tests/golden/v2_tests_run.jsonl: a real run of the example issue with the team running the
code (`--tests on --candidates 3`), the scripted model answering, and the prompt templates of that
time copied to tests/golden/v2_prompts/. It holds the execution events (TestsRan,
ReproductionWritten, CandidateChosen) that the v1 logs predate.

    python tests/make_golden_v2.py [--force]

Needs bubblewrap and PyPI (the environment installs pytest). The golden files are frozen, like v1's:
tests/test_golden_replay.py replays this log under the current code, running no test.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from importlib import resources
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from test_team_tests import FLOOR_FIX, PASSES_ON_BASE, REPRODUCES, SUM_FIX  # noqa: E402
from scenarios import MEAN_FIX  # noqa: E402

from magis_ray.actors.model.scripted_server import ScriptedServer  # noqa: E402
from magis_ray.actors.model.scripted_team import ScriptedTeam  # noqa: E402

LOG = HERE / "golden" / "v2_tests_run.jsonl"
PROMPTS = HERE / "golden" / "v2_prompts"


def main(argv: list[str]) -> int:
    if LOG.exists() and "--force" not in argv:
        print(f"{LOG} exists; the golden files are frozen (use --force to overwrite)", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        subprocess.run([sys.executable, str(ROOT / "examples" / "calc" / "make_repo.py"), str(work / "calc")], check=True)
        team = ScriptedTeam({"calc/stats.py": [FLOOR_FIX]}, retries={"calc/stats.py": [[MEAN_FIX], [SUM_FIX]]},
                            reproductions=[PASSES_ON_BASE, REPRODUCES])
        env = {**os.environ, "MAGIS_TESTS": "on", "MAGIS_LOG_LEVEL": "warning"}
        magis = [sys.executable, "-m", "magis_ray.cli.main"]
        with ScriptedServer(team) as server:
            done = subprocess.run([*magis, "submit", str(ROOT / "examples" / "calc" / "issue.json"), "--repo", str(work / "calc"),
                                   "--store", str(work / "store"), "--base-url", server.base_url, "--model", "scripted",
                                   "--env-setup", "python -m pip install pytest", "--candidates", "3", "--max-review-rounds", "1"],
                                  env=env, capture_output=True, text=True, check=True)
        run_id = next(line.split(":", 1)[1].strip() for line in done.stdout.splitlines() if line.startswith("run:"))
        events = subprocess.run([*magis, "events", run_id, "--store", str(work / "store")], env=env, capture_output=True,
                                check=True).stdout
    LOG.write_bytes(events)
    shutil.rmtree(PROMPTS, ignore_errors=True)
    PROMPTS.mkdir()
    for template in resources.files("magis_ray.actors.model.prompts").iterdir():
        if template.name.endswith(".txt"):
            (PROMPTS / template.name).write_text(template.read_text(encoding="utf-8"), encoding="utf-8")
    print(f"wrote {LOG.relative_to(ROOT)} ({len(events.splitlines())} events) and {PROMPTS.relative_to(ROOT)}/")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
