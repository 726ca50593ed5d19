"""Moving a built folder's files to another path: the files that name the old path written anew
naming the new one, and the links that point under it pointed under the new one. A testbed made
from a donor (testbeds/reuse.py) and an artifact unpacked under another node's cache root
(artifacts.py) both move this way."""
from __future__ import annotations

import os
import shutil
from pathlib import Path


def retarget_links(root: Path, pairs: list[tuple[str, str]]) -> None:
    """Every symbolic link under `root` whose target names an old path of `pairs` points at the new
    one instead (owner kept)."""
    for base, folders, files in os.walk(root):
        for name in folders + files:
            path = Path(base) / name
            if not path.is_symlink():
                continue
            target = os.readlink(path)
            moved = target
            for old, new in pairs:
                moved = moved.replace(old, new)
            if moved != target:
                owner = owner_of(path)
                path.unlink()
                path.symlink_to(moved)
                os.chown(path, *owner, follow_symlinks=False)


def rewrite_files(root: Path, relatives: list[str], pairs: list[tuple[bytes, bytes]], like: Path | None = None) -> None:
    """The files `relatives` under `root` written anew with each old path of `pairs` replaced by
    its new one, from their own contents or from the same files under `like` (whose owner, mode and
    times they take)."""
    for relative in relatives:
        source = (like or root) / relative
        data = source.read_bytes()
        for old, new in pairs:
            data = data.replace(old, new)
        write_like(root / relative, data, source)


def write_like(path: Path, data: bytes, like: Path) -> None:
    """`path` as a file of its own holding `data`, with the owner, mode and times of `like`."""
    fresh = path.with_name(f".{path.name}.magis-new")
    fresh.write_bytes(data)
    shutil.copystat(like, fresh)
    info = like.stat()
    os.chown(fresh, info.st_uid, info.st_gid)
    os.replace(fresh, path)


def owner_of(path: Path) -> tuple[int, int]:
    info = path.lstat()
    return info.st_uid, info.st_gid


__all__ = ["retarget_links", "rewrite_files", "write_like", "owner_of"]
