"""The archive of a built folder, as the artifact store holds it: a tar made by GNU tar and
compressed with zstd (`KEY.tar.zst`), its sha256 taken while it is written.

Why this format (benchmarks/archive_formats.py on this machine's cache, heavily loaded: the
calc fixture's testbed as the store archives it, 13 MB, and a sympy environment, 36 MB, best of two
rounds): against tarfile with gzip at level 3, GNU tar with zstd at level 3 packs in 0.17-0.19 of
the time, unpacks in 0.31-0.44 of it, and its archives are 11-23 per cent smaller. tarfile spends
its time in Python per member (a testbed is thousands of small files), and a lower gzip level does
not help it (level 1: 0.96-1.02 of the time to pack). GNU tar with pigz is about as fast on these
(on the whole 287 MB testbed, interpreter included, one round: faster, 0.06 and 0.17 against 0.23
and 0.62), but its archives are gzip's size (59 per cent larger there: 92 MB against 58) and it is
a program a node may lack. The compressor here is the `zstandard` package (a wheel, declared in
pyproject.toml), so a node needs nothing beside Python but GNU tar, which every Linux has.

Archives that nodes published before, as gzip'd tars (`KEY.tar.gz`, made by tarfile), are still
read: GNU tar unpacks them itself."""
from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

from magis_ray.events.errors import MagisError

SUFFIX, LEGACY_SUFFIX = ".tar.zst", ".tar.gz"  # what is written; what older nodes wrote, still read
COMPRESSION_LEVEL = 3  # zstd's own default: most of level 9's ratio on venvs at a fraction of its time
BLOCK = 1 << 20


class ArchiveUnreadable(MagisError, ValueError):
    """An archive whose compressed stream does not decompress (corrupt past its digest); one line."""


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as source:
        for block in iter(lambda: source.read(BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


class _DigestingFile:
    """A file written through, its sha256 taken on the way."""

    def __init__(self, out) -> None:
        self.out, self.digest = out, hashlib.sha256()

    def write(self, data) -> int:
        self.digest.update(data)
        return self.out.write(data)


def members(folder: Path, leave_out) -> list[str]:
    """What an archive of `folder` holds, relative to it and in a stable order: every folder,
    file and link but those `leave_out(relative, is_top)` refuses."""
    found: list[str] = []
    for base, folders, files in os.walk(folder):
        here = Path(base)
        top = here == folder
        relative = "" if top else str(here.relative_to(folder)) + "/"
        folders[:] = sorted(name for name in folders if not leave_out(relative + name, top))
        for name in folders:
            found.append(relative + name)
        found += [relative + name for name in sorted(files) if not leave_out(relative + name, top)]
    return found


def pack(folder: Path, archive: Path, leave_out=lambda relative, top: False) -> str:
    """`folder`'s contents (but what `leave_out` refuses) as a zstd'd tar at `archive`, links kept as
    links, modes and numeric owners kept; returns the archive's sha256."""
    import zstandard

    with tempfile.TemporaryDirectory(prefix=".pack-", dir=archive.parent) as scratch:
        listing, errors = Path(scratch) / "members", Path(scratch) / "errors"
        listing.write_bytes(b"".join(name.encode("utf-8", "surrogateescape") + b"\0" for name in members(folder, leave_out)))
        with open(errors, "wb") as stderr, open(archive, "wb") as out:
            # A ready folder does not change, but the files it shares by hard link with another
            # testbed (a donor's prefix, its wheelhouse) have their change time moved whenever yet
            # another testbed links them: GNU tar says "file changed as we read it" and exits 1
            # for what is only a link count. Exit 2 is a failure.
            tar = subprocess.Popen(["tar", "-C", str(folder), "--numeric-owner", "--no-recursion", "--null",
                                    "--warning=no-file-changed", "-T", str(listing), "-cf", "-"],
                                   stdout=subprocess.PIPE, stderr=stderr)
            written = _DigestingFile(out)
            try:
                zstandard.ZstdCompressor(level=COMPRESSION_LEVEL, threads=-1).copy_stream(
                    tar.stdout, written, read_size=BLOCK, write_size=BLOCK)
            finally:
                tar.stdout.close()
                code = tar.wait()
        if code not in (0, 1):
            raise OSError(f"tar could not archive {folder}: {_first_line(errors)}")
        return written.digest.hexdigest()


def unpack(archive: Path, target: Path) -> None:
    """Unpack an archive (zstd'd, or an older node's gzip'd one) into the new folder `target`. GNU
    tar refuses members outside it (it drops a leading /, skips a name with `..`, and makes a link
    that points out of the folder only once nothing else is written through it); owners are kept
    when this process may set them. ArchiveUnreadable when the stream does not decompress; OSError
    (one line) when tar fails otherwise: after the digest matched, that is most likely this node's
    doing (its disk full), not the archive's."""
    import zstandard

    target.mkdir()
    command = ["tar", "-C", str(target), "--numeric-owner", "-x"]
    problem = ""
    with tempfile.TemporaryFile() as stderr:
        if archive.name.endswith(LEGACY_SUFFIX):
            code = subprocess.run([*command, "-z", "-f", str(archive)], stderr=stderr).returncode
        else:
            tar = subprocess.Popen([*command, "-f", "-"], stdin=subprocess.PIPE, stderr=stderr)
            try:
                with open(archive, "rb") as source, contextlib.suppress(BrokenPipeError):  # tar stopped: it says why
                    zstandard.ZstdDecompressor().copy_stream(source, tar.stdin, read_size=BLOCK, write_size=BLOCK)
            except zstandard.ZstdError as exc:
                problem = f"zstd: {exc}"
            finally:
                with contextlib.suppress(BrokenPipeError):
                    tar.stdin.close()
                code = tar.wait()
        if problem:
            raise ArchiveUnreadable(problem)
        if code != 0:
            stderr.seek(0)
            said = stderr.read().decode(errors="replace").strip().splitlines()
            raise OSError(f"tar could not unpack {archive.name}: {said[0] if said else f'exit {code}'}")


def _first_line(path: Path) -> str:
    lines = path.read_text(errors="replace").strip().splitlines()
    return lines[0] if lines else "no message"


__all__ = ["SUFFIX", "LEGACY_SUFFIX", "ArchiveUnreadable", "file_digest", "pack", "unpack", "members"]
