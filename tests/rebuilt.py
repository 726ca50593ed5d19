"""One SWE-bench instance of Django, scikit-learn or matplotlib on a repository rebuilt from its PyPI
source release (benchmarks/rebuild_big3.py: the release less the gold and test patches), for the
tests that grade these repositories for real. A stand-in for the real clone, which is too large to
fetch here."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATASET = next((p / "shared" / "swebench" / "verified-big3.jsonl" for p in ROOT.parents
                if (p / "shared" / "swebench").is_dir()), ROOT / "verified-big3.jsonl")


def rebuild_module():
    """benchmarks/rebuild_big3.py as a module (benchmarks/ is no package)."""
    if "rebuild_big3" in sys.modules:
        return sys.modules["rebuild_big3"]
    spec = importlib.util.spec_from_file_location("rebuild_big3", ROOT / "benchmarks" / "rebuild_big3.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["rebuild_big3"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def rebuilt_instance(instance_id: str, out: Path) -> tuple[dict, Path]:
    """The instance's record with its rebuilt commits, and the folder of repositories holding them
    (OUT/repos). Downloads the release's sdist once (~/.cache/magis-ray/sdists). Raises
    LookupError when the instance cannot be rebuilt (the excluded file's reason)."""
    rebuild = rebuild_module()
    records = [r for r in rebuild.load_records(DATASET) if r["instance_id"] == instance_id]
    if not records:
        raise LookupError(f"{instance_id} is not in {DATASET}")
    outcome = rebuild.rebuild(records, out, (records[0]["repo"],), log=lambda line: None)
    if not outcome.kept:
        raise LookupError(f"{instance_id} cannot be rebuilt: {outcome.excluded[0]['reason']}")
    return outcome.kept[0], out / "repos"


def dataset_records() -> dict[str, dict]:
    return {r["instance_id"]: r for r in map(json.loads, DATASET.read_text().splitlines()) if r}
