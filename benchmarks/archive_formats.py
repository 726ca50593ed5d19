"""How the artifact store's archives are made: the options measured on real folders, in one run.

For each folder (by default a testbed and an environment of this machine's cache), the same
members (an archive's, as the store packs them: a testbed's interpreter files left out) are packed
and unpacked by each option, and the best of --rounds is kept; times are given against Python's
tarfile with gzip at level 3 (the format before), as ratios. A loaded machine slows every option
alike, so the ratios hold where the seconds do not.

    python benchmarks/archive_formats.py [--rounds 3] [--whole] [FOLDER ...]

--whole archives a testbed with its interpreter's files, as the store did before it left them out.

The options: tarfile + gzip at levels 3 and 1; GNU tar piped to gzip -1, to pigz -1 and to
zstd -3 -T0 (each where the program is installed); GNU tar with the zstandard package at level 3,
on every core: what actors/execution/sharing/archives.py does.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

from magis_ray.actors.execution.sharing.archives import members
from magis_ray.actors.execution.sharing.archives import pack as store_pack
from magis_ray.actors.execution.sharing.archives import unpack as store_unpack
from magis_ray.actors.execution.sharing.artifacts import NOT_ARCHIVED, interpreter_file
from magis_ray.actors.execution.environments import default_cache_root


def tarfile_option(level: int):
    def pack(folder: Path, names: list[str], archive: Path) -> None:
        with tarfile.open(archive, "w:gz", compresslevel=level) as tar:
            for name in names:
                tar.add(folder / name, arcname=name, recursive=False)

    def unpack(archive: Path, target: Path) -> None:
        target.mkdir()
        with tarfile.open(archive, "r:gz") as tar:
            tar.extractall(target, filter="tar", numeric_owner=True)
    return pack, unpack


def pipe_option(compress: str, decompress: str):
    def pack(folder: Path, names: list[str], archive: Path) -> None:
        listing = archive.with_suffix(".list")
        listing.write_bytes(b"".join(name.encode() + b"\0" for name in names))
        subprocess.run(f"tar -C {folder} --numeric-owner --no-recursion --null --warning=no-file-changed -T {listing} "
                       f"-cf - | {compress} > {archive}", shell=True, check=True)

    def unpack(archive: Path, target: Path) -> None:
        target.mkdir()
        subprocess.run(f"{decompress} < {archive} | tar -C {target} --numeric-owner -xf -", shell=True, check=True)
    return pack, unpack


def store_option():
    def pack(folder: Path, names: list[str], archive: Path) -> None:
        chosen = set(names)
        store_pack(folder, archive, lambda relative, top: relative not in chosen)

    return pack, store_unpack


def options() -> dict:
    found = {"tarfile + gzip 3 (before)": tarfile_option(3), "tarfile + gzip 1": tarfile_option(1),
             "tar | gzip -1": pipe_option("gzip -1", "gzip -d")}
    if shutil.which("pigz"):
        found["tar | pigz -1"] = pipe_option("pigz -1", "pigz -d")
    if shutil.which("zstd"):
        found["tar | zstd -3 -T0"] = pipe_option("zstd -q -3 -T0", "zstd -q -d")
    found["tar + zstandard 3 (the store's)"] = store_option()
    return found


def interpreter_prefix_of(folder: Path) -> str:
    """A testbed's interpreter prefix, from its environment's record (its .pth names the environment)."""
    for pth in folder.glob("python/lib/python*/site-packages/_magis_environment.pth"):
        env = pth.read_text().split("addsitedir('", 1)[1].split("/venv/", 1)[0]
        return json.loads((Path(env) / "ready.json").read_text()).get("interpreter_prefix", "")
    return ""


def archived(folder: Path, whole: bool) -> list[str]:
    prefix = "" if whole else interpreter_prefix_of(folder)

    def leave_out(relative: str, top: bool) -> bool:
        if (top and relative in NOT_ARCHIVED) or relative.endswith(".lock"):
            return True
        return interpreter_file(folder / relative, relative, prefix) if not (folder / relative).is_dir() else False
    return members(folder, leave_out)


def measure(folder: Path, rounds: int, scratch: Path, whole: bool) -> None:
    names = archived(folder, whole)
    size = sum(os.lstat(folder / name).st_size for name in names if not (folder / name).is_dir())
    print(f"\n### {folder} ({len(names)} members, {size / 1e6:.0f} MB archived)\n")
    print("| option | archive (MB) | pack (s) | unpack (s) | pack / before | unpack / before |")
    print("|---|---|---|---|---|---|")
    best: dict[str, tuple[float, float, int]] = {}
    for _ in range(rounds):
        for name, (pack, unpack) in options().items():
            archive, target = scratch / "archive", scratch / "unpacked"
            start = time.perf_counter()
            pack(folder, names, archive)
            packed = time.perf_counter() - start
            start = time.perf_counter()
            unpack(archive, target)
            unpacked = time.perf_counter() - start
            old = best.get(name, (float("inf"), float("inf"), 0))
            best[name] = (min(old[0], packed), min(old[1], unpacked), archive.stat().st_size)
            archive.unlink()
            subprocess.run(["rm", "-rf", str(target)], check=True)
    before = next(iter(best.values()))
    for name, (packed, unpacked, archive_bytes) in best.items():
        print(f"| {name} | {archive_bytes / 1e6:.1f} | {packed:.1f} | {unpacked:.1f} | {packed / before[0]:.2f} | "
              f"{unpacked / before[1]:.2f} |", flush=True)


def default_folders(cache: Path) -> list[Path]:
    """The calc fixture's newest testbed, and the newest sympy environment, when cached."""
    def newest(pattern: str, label: str) -> list[Path]:
        found = [(json.loads(ready.read_text()).get("time", 0), ready.parent) for ready in cache.glob(pattern)
                 if json.loads(ready.read_text()).get("label", "").startswith(label)]
        return [max(found)[1]] if found else []
    return newest("testbeds/*/ready.json", "example/calc") + newest("*/ready.json", "sympy/sympy")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="*", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--env-cache", type=Path, default=default_cache_root())
    parser.add_argument("--whole", action="store_true", help="a testbed's interpreter files archived too (as before)")
    args = parser.parse_args()
    folders = args.folders or default_folders(args.env_cache)
    with tempfile.TemporaryDirectory(prefix="archive-formats-", dir=args.env_cache) as scratch:
        for folder in folders:
            measure(folder, args.rounds, Path(scratch), args.whole)


if __name__ == "__main__":
    main()
