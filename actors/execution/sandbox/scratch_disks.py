"""Scratch folders on disk, each of a fixed size: a filesystem image of its own.

As root, where the machine has loop devices, `mkfs.ext4` and `unshare`, each of a sandbox's
scratch folders (its /tmp, the workspace, the copies of the testbed's prefix) is an ext4 image of
that size: sparse (it takes on disk only what is written), made by the caller, mounted through a
loop device in a mount namespace that the sandbox's bubblewrap then runs in, and unlinked as soon
as it is mounted. When the sandbox ends, whatever ends it (kill -9 of the caller included:
bubblewrap dies with its parent), the namespace goes, the filesystems are unmounted, the loop
devices free themselves and the images' space is given back.

Images go to MAGIS_SCRATCH_DIR, else /var/tmp (on disk by convention); a folder on an in-memory
filesystem (tmpfs) does not count, nor does one where the probe fails: the sandbox's scratch then
stays in memory, counted in its memory budget.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import psutil

from magis_ray.events.settings import node_settings

IN_MEMORY_FILESYSTEMS = {"tmpfs", "ramfs"}
TOOLS = os.pathsep.join(["/usr/sbin", "/sbin", "/usr/bin", "/bin"])  # where losetup, mkfs.ext4 and mount live
MKFS = shutil.which("mkfs.ext4", path=TOOLS) or "mkfs.ext4"
UNSHARE = shutil.which("unshare", path=TOOLS) or "unshare"
PROBE_BYTES = 16 * 1024 * 1024

# Arguments: (image, mount point) pairs, then "--", then the command to run in the namespace
# (bubblewrap). As root, on the host, in a mount namespace of the sandbox's own: the images are
# mounted side by side (a loop device that mount(8) sets up frees itself at the unmount), then
# unlinked.
MOUNT_SCRIPT = r"""
set -e
PATH="%(tools)s"
mounting="" images=""
while [ "$1" != "--" ]; do
  mount -o loop,noinit_itable,nosuid,nodev,noatime "$1" "$2" &
  mounting="$mounting $!" images="$images $1"
  shift 2
done
shift
for each in $mounting; do wait "$each"; done
rm -f $images
exec "$@"
""" % {"tools": TOOLS}
ROOT = "root"  # the folder of an image that the sandbox sees (beside the image's lost+found)


def images_folder() -> str:
    return node_settings().scratch_dir


PREFIX = "magis-scratch-"


def new_place() -> str:
    """A folder of this process's for one sandbox's images, after removing those of processes that
    are gone (killed before they could: kill -9)."""
    folder = images_folder()
    try:
        entries = list(os.scandir(folder))
    except OSError:
        entries = []
    for entry in entries:
        maker = entry.name[len(PREFIX):].split("-", 1)[0] if entry.name.startswith(PREFIX) else ""
        if maker.isdigit() and not psutil.pid_exists(int(maker)):
            shutil.rmtree(entry.path, ignore_errors=True)
    return tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=folder)


def filesystem_of(path: str) -> str:
    """The type of the filesystem that holds `path` (its longest mount point)."""
    try:
        mounts = psutil.disk_partitions(all=True)
    except OSError:
        return ""
    real = os.path.realpath(path)
    best, kind = "", ""
    for mount in mounts:
        point = mount.mountpoint
        if (real == point or real.startswith(point.rstrip("/") + "/")) and len(point) >= len(best):
            best, kind = point, mount.fstype
    return kind


def make_images(disks: list[tuple[str, int, str]]) -> None:
    """Each disk's empty filesystem image (image, size, mount point), its ROOT folder writable by
    anyone (sticky), made here rather than in the sandbox's namespace, whose file size limit may be
    smaller than the image. OSError when one cannot be made."""
    template = Path(disks[0][0]).parent / "template"
    (template / ROOT).mkdir(parents=True)
    (template / ROOT).chmod(0o1777)
    makers = []
    for image, size, folder in disks:
        os.mkdir(folder, 0o700)
        with open(image, "wb") as sparse:
            sparse.truncate(size)
        makers.append(subprocess.Popen([MKFS, "-q", "-F", "-O", "^has_journal,^resize_inode", "-E", "lazy_itable_init=1,nodiscard",
                                        "-m", "0", "-d", str(template), image], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
    errors = [maker.communicate()[1].decode(errors="replace") for maker in makers]
    failed = [error for maker, error in zip(makers, errors) if maker.returncode != 0]
    if failed:
        raise OSError(f"mkfs.ext4 failed: {' '.join(failed[0].split())[:200]}")


def wrapper(disks: list[tuple[str, int, str]]) -> list[str]:
    """The argv that mounts `disks` (made by make_images) and then runs what follows it."""
    argv = [UNSHARE, "--mount", "--propagation", "private", "/bin/sh", "-c", MOUNT_SCRIPT, "magis-scratch"]
    for image, _, folder in disks:
        argv += [image, folder]
    return [*argv, "--"]


@functools.lru_cache(maxsize=None)
def _probe(folder: str) -> str:
    """"" when a scratch disk can be made in `folder`, else why not (one line)."""
    if os.geteuid() != 0:
        return "an ordinary user cannot mount a filesystem image"
    missing = [tool for tool in ("unshare", "mkfs.ext4", "mount") if shutil.which(tool, path=TOOLS) is None]
    if missing:
        return f"{', '.join(missing)} not installed"
    if not os.path.exists("/dev/loop-control"):
        return "no loop devices (/dev/loop-control)"
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        return f"{folder} is not a writable folder"
    if filesystem_of(folder) in IN_MEMORY_FILESYSTEMS:
        return f"{folder} is in memory ({filesystem_of(folder)}); set MAGIS_SCRATCH_DIR to a folder on disk"
    place = tempfile.mkdtemp(prefix="magis-scratch-probe-", dir=folder)
    try:
        disks = [(f"{place}/image", PROBE_BYTES, f"{place}/disk")]
        make_images(disks)
        done = subprocess.run([*wrapper(disks), "true"], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            return "a scratch disk cannot be mounted here: " + " ".join(done.stderr.split())[:200]
        return ""
    except (OSError, subprocess.SubprocessError) as exc:
        return f"a scratch disk cannot be mounted here: {exc}"
    finally:
        shutil.rmtree(place, ignore_errors=True)


def why_not_on_disk() -> str:
    """Why scratch folders stay in memory here ("" when they go to disk)."""
    return _probe(images_folder())
