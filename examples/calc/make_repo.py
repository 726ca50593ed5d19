"""Make the example's git repository from the plain files in project/ (pygit2, no network).

The author, committer and time are fixed, so the base commit id is always the one issue.json names.
Usage: python examples/calc/make_repo.py DEST
"""
from __future__ import annotations

import sys
from pathlib import Path

import pygit2

HERE = Path(__file__).parent
SIGNATURE = pygit2.Signature("magis-ray example", "example@magis-ray.invalid", 1_700_000_000, 0)


def make_repo(dest: Path) -> str:
    repo = pygit2.init_repository(str(dest))
    builder = pygit2.Index()
    for path in sorted((HERE / "project").rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            blob = repo.create_blob(path.read_bytes())
            builder.add(pygit2.IndexEntry(path.relative_to(HERE / "project").as_posix(), blob, pygit2.enums.FileMode.BLOB))
    tree = builder.write_tree(repo)
    parents = [] if repo.head_is_unborn else [repo.head.target]
    commit = repo.create_commit("HEAD", SIGNATURE, SIGNATURE, "calc: statistics helpers", tree, parents)
    repo.checkout_head(strategy=pygit2.enums.CheckoutStrategy.FORCE)
    return str(commit)


if __name__ == "__main__":
    dest = Path(sys.argv[1] if len(sys.argv) > 1 else ".magis/example/calc")
    if (dest / ".git").exists():
        print(pygit2.Repository(str(dest)).head.target)
    else:
        dest.mkdir(parents=True, exist_ok=True)
        print(make_repo(dest))
