"""Write the golden event log of schema version 1 and its expected projections (kept for reference).

    python tests/make_golden.py [--force]
    python tests/make_golden.py --expectations   # only v1_run.diff and v1_run.audit.json

tests/golden/v1_run.jsonl is the interrupted-and-resumed constructed run of tests/runs.py
(so it holds every event type of schema version 1), as `magis-ray events` prints it: one
msgspec-JSON `Recorded` per line. Times and event ids are fixed constants and the run id is
RUN_ID; the calc repository's commits are deterministic (tests/gitfixtures.py), so nothing in
the file depends on where or when it was written. v1_run.diff and v1_run.audit.json are the
diff and the JSON audit (`magis-ray diff`, `magis-ray audit --format json`) of that log.

The golden files are frozen: tests/test_projections.py checks that the CURRENT code still
decodes the log and projects it to the same diff and audit. Do not regenerate them to make a
failing test pass; when the schema changes, write a new vN_run.jsonl beside the old ones.
Existing files are only overwritten with --force. When a projection's output changes on
purpose (say a better timeline wording in audit.py), --expectations rewrites only the diff and
the audit, projected by the current code from the committed log, which it leaves as it is.
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from runs import constructed_run, fixed_new_events, repo_for  # noqa: E402

from magis_ray.events.codec import decode_recorded, encode  # noqa: E402
from magis_ray.events.projections import audit_json, final_diff, fold  # noqa: E402
from magis_ray.store.memory import InMemoryStore  # noqa: E402

GOLDEN = HERE / "golden"
RUN_ID = "5e1f0c2a9b7d"
FILES = {"log": GOLDEN / "v1_run.jsonl", "diff": GOLDEN / "v1_run.diff", "audit": GOLDEN / "v1_run.audit.json"}


def expectations(recorded: list) -> dict[str, bytes]:
    view = fold(recorded)
    return {"diff": final_diff(view).encode(), "audit": (json.dumps(audit_json(view), indent=2) + "\n").encode()}


def golden_texts() -> dict[str, bytes]:
    with tempfile.TemporaryDirectory() as tmp:
        repo_path, base = repo_for(Path(tmp))
        pairs = constructed_run(repo_path, base, interrupted=True)
    store = InMemoryStore()
    recorded = store.append(RUN_ID, 0, fixed_new_events(pairs))
    return {"log": b"".join(encode(r) + b"\n" for r in recorded), **expectations(recorded)}


def write(texts: dict[str, bytes]) -> None:
    GOLDEN.mkdir(exist_ok=True)
    for key, data in texts.items():
        FILES[key].write_bytes(data)
        print(f"wrote {FILES[key].relative_to(HERE.parent)} ({len(data)} bytes)")


def main(argv: list[str]) -> int:
    if "--expectations" in argv:
        write(expectations([decode_recorded(line) for line in FILES["log"].read_bytes().splitlines() if line.strip()]))
        return 0
    force = "--force" in argv
    existing = [p for p in FILES.values() if p.exists()]
    if existing and not force:
        print(f"{existing[0]} exists; the golden files are frozen (use --force to overwrite)", file=sys.stderr)
        return 1
    write(golden_texts())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
