"""Making a testbed from another one of its group (one environment, one install recipe), its donor:

- the same inputs (install_inputs.py: SAME): the donor's prefix linked and what its install wrote
  into its tree copied into the new checkout, no install run;
- the same inputs but the version from git or other compiled sources (INCREMENTAL), or other
  inputs (DIFFERENT) with a pip install: the install runs again, on a copy of the donor's prefix,
  whose dependencies are then there already, and without the resolution as of the date and the
  wheelhouse download that only the dependencies decide; each step pinned as the donor's was (or
  not, where the donor's pins conflicted). Afterwards the installed distributions must be the
  donor's and, where the donor's prefix holds dependencies of its own, the project's requirements
  too (its egg-info's requires.txt, its Requires-Dist); if not, the testbed is built in full (at
  once, where such a donor's install compiled and its files declaring requirements differ). Of
  the donor's egg-info, its PKG-INFO and entry points come along, which pip reads to uninstall
  the donor's install first, as it does when it upgrades an editable install in place;
  INCREMENTAL also copies the donor's other tree outputs, dated so that what their sources did
  not change is kept.

What an install leaves behind, and where it goes here:
- in the prefix: the editable link (an .egg-link and easy-install.pth, or a PEP 660 .pth and
  finder), both naming /testbed, the same for every commit; the dependencies only this commit's
  metadata asks for; the console scripts, whose first line names the testbed's own interpreter.
  The prefix is hard-linked file by file (nothing writes into a ready testbed: runs get copies),
  except the files that name the testbed's own folder, which are written anew with the new
  folder's name (both are TESTBEDS/KEY with keys of one length, so even a binary stays valid);
- in the tree: the egg-info (version, entry points, requirements), a version file, generated
  sources and compiled extensions, a build/ folder: every file the install made or changed, as
  git sees it after the install, copied over (byte caches left out; Python remakes them).

Testbeds of one group list their donors, those whose install ran (and was traced), in
TESTBEDS/groups/GROUP/; the group's lock makes the builds of a group wait for each other, so a
second commit waits for the first one's install and then reuses it rather than running the same
install beside it."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import msgspec

from magis_ray.actors.execution.sharing.builds import READY, folder_lock
from magis_ray.actors.execution.sharing.relocation import rewrite_files, retarget_links, write_like
from magis_ray.actors.execution.testbeds.install_inputs import DIFFERENT, SAME, InstallInputs, TreeState

INPUTS_FILE = "inputs.json"  # a donor's inputs, beside its ready.json
SKIPPED_PARTS = ("__pycache__",)
SKIPPED_SUFFIXES = (".pyc", ".pyo")
UNINSTALL_METADATA = ("PKG-INFO", "entry_points.txt")


class InstallRecord(msgspec.Struct, frozen=True, kw_only=True):
    """What a traced install read and left behind, kept in the testbed's folder (inputs.json)."""

    inputs: InstallInputs
    made: list[str]  # tree files the install made or changed
    removed: list[str]  # tree files it removed
    mentions: list[str]  # prefix files that name the testbed's folder
    before: dict[str, str]  # the tree's files before the install (blob ids), for an incremental rebuild
    started: float  # when the install began (its outputs are newer)
    constraints: list[str]  # the constraints files the install steps used (names in the folder)
    requirements: list[str]  # the project's own requirements, from its metadata
    distributions: dict[str, str]  # the prefix's distributions (name -> version), the project's own left out
    build_requires: list[str]  # what building the project needs (the wheelhouse's contents)
    unpinned_steps: list[int] = []  # install steps run without pins (theirs conflicted)

    def write(self, folder: Path) -> None:
        (folder / INPUTS_FILE).write_bytes(msgspec.json.encode(self))

    @classmethod
    def read(cls, folder: Path) -> InstallRecord | None:
        """The record, or None where the folder has none or an unreadable one (no donor, then)."""
        try:
            return msgspec.json.decode((folder / INPUTS_FILE).read_bytes(), type=cls)
        except (OSError, msgspec.DecodeError):
            return None


class TestbedGroup:
    """The testbeds that may be made from one another (one environment, one install recipe): the
    donors among them, and the group's build lock."""

    def __init__(self, testbeds_root: Path, group: str) -> None:
        self.testbeds = testbeds_root
        self.folder = testbeds_root / "groups" / group

    def lock(self):
        return folder_lock(self.folder)

    def add(self, key: str) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / key).touch()

    def match(self, state: TreeState) -> tuple[str, Path | None, InstallRecord | None, str]:
        """The best donor for a tree in `state`, newest first: (verdict, its folder, its record,
        why), SAME before INCREMENTAL before DIFFERENT; (DIFFERENT, None, None, why) when the
        group has none."""
        found: tuple[str, Path | None, InstallRecord | None, str] = (DIFFERENT, None, None, "no testbed of its group yet")
        rank = {SAME: 0, "incremental": 1, DIFFERENT: 2}
        entries = sorted(self.folder.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True) if self.folder.is_dir() else []
        for entry in entries:
            donor = self.testbeds / entry.name
            record = InstallRecord.read(donor)
            if record is None or not (donor / READY).is_file():
                continue
            verdict, why = record.inputs.compare(state)
            if found[1] is None or rank[verdict] < rank[found[0]]:
                found = (verdict, donor, record, why)
            if verdict == SAME:
                break
        return found


def installed_files(tree: Path, before: TreeState) -> tuple[list[str], list[str]]:
    """The tree's files the install made or changed, and those it removed (byte caches left out)."""
    after = TreeState.of(tree)
    made = sorted(path for path, blob in after.files.items() if before.files.get(path) != blob and not _cache(path))
    removed = sorted(path for path in before.files if path not in after.files and not _cache(path))
    return made, removed


def _cache(path: str) -> bool:
    return path.endswith(SKIPPED_SUFFIXES) or any(part in SKIPPED_PARTS for part in path.split("/"))


def metadata(path: str) -> bool:
    """A file of an egg-info folder (the project's metadata, which pip reads to uninstall it)."""
    return any(part.endswith(".egg-info") for part in path.split("/")[:-1])


def to_copy(record: InstallRecord, incremental: bool) -> list[str]:
    """What of the donor's tree outputs an install run again starts from: of its egg-info, the
    PKG-INFO and entry points pip reads to uninstall the donor's install first (the rest, a file
    list or setuptools_scm's caches, could leak into this commit's); with `incremental`, also its
    other outputs (compiled extensions, kept where their sources are the same; setup_requires'
    eggs; generated sources)."""
    return [path for path in record.made
            if (path.rsplit("/", 1)[-1] in UNINSTALL_METADATA if metadata(path) else incremental)]


def copy_installed(donor_tree: Path, tree: Path, paths: list[str], removed: list[str] = ()) -> None:
    """Put `paths` of the donor's tree into `tree` (times kept: an incremental build compares them)
    and take `removed` away."""
    for path in removed:
        (tree / path).unlink(missing_ok=True)
    for path in paths:
        source, target = donor_tree / path, tree / path
        if not (source.is_symlink() or source.exists()):
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        _same_owner(donor_tree, tree, Path(path).parent)
        if target.is_symlink() or target.exists():
            target.unlink()
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        else:
            shutil.copy2(source, target)
        info = source.lstat()
        os.chown(target, info.st_uid, info.st_gid, follow_symlinks=False)


def drop_untouched(donor_tree: Path, tree: Path, paths: list[str]) -> list[str]:
    """Remove the copied egg-info files the install run again did not write: the donor's own,
    which this commit's install does not make. Returns them."""
    dropped = []
    for path in paths:
        ours, theirs = tree / path, donor_tree / path
        if metadata(path) and ours.is_file() and theirs.is_file() and ours.stat().st_mtime_ns == theirs.stat().st_mtime_ns:
            ours.unlink()
            dropped.append(path)
    return dropped


def _same_owner(donor_tree: Path, tree: Path, relative: Path) -> None:
    """Folders made in `tree` belong to whoever owns them in the donor's."""
    for part in reversed([relative, *relative.parents]):
        if str(part) in ("", "."):
            continue
        source, target = donor_tree / part, tree / part
        if source.is_dir() and target.is_dir():
            info = source.stat()
            if target.stat().st_uid != info.st_uid:
                os.chown(target, info.st_uid, info.st_gid)


def date_unchanged(tree: Path, state: TreeState, record: InstallRecord) -> int:
    """Files the same as before the donor's install get a time before it, so that an incremental
    build (distutils' build_ext, Cython) finds the donor's outputs newer and keeps them; those that
    differ stay newer and are rebuilt. Returns how many files were dated."""
    when = record.started - 60
    count = 0
    for path, blob in state.files.items():
        if record.before.get(path) == blob and (tree / path).is_file() and not (tree / path).is_symlink():
            os.utime(tree / path, (when, when))
            count += 1
    return count


def own_files(prefix: Path):
    """The prefix's files an install may have written (bin/, include/, site-packages, anything
    else at its top), not the interpreter's linked library (lib/ but site-packages)."""
    for top in sorted(prefix.iterdir()):
        if top.name == "lib" and top.is_dir() and not top.is_symlink():
            for site in sorted(top.glob("python*/site-packages")):
                yield from _walk_files(site)
        elif top.is_dir() and not top.is_symlink():
            yield from _walk_files(top)
        elif top.is_file() and not top.is_symlink():
            yield top


def _walk_files(folder: Path):
    for root, _, files in os.walk(folder):
        for name in files:
            path = Path(root) / name
            if path.is_file() and not path.is_symlink():
                yield path


def mentions_of(folder: Path) -> list[str]:
    """The prefix's own files that name the testbed's folder (console scripts' first lines, a
    venv's pyvenv.cfg), relative to the prefix."""
    prefix, needle = folder / "python", str(folder).encode()
    return sorted(str(path.relative_to(prefix)) for path in own_files(prefix) if needle in path.read_bytes())


def copy_prefix(donor: Path, folder: Path, mentions: list[str], copy_own: bool) -> None:
    """The donor's prefix at FOLDER/python: every file hard-linked (`cp -al`, owners and modes
    kept), but those naming the donor's folder (written anew, naming this one) and, with
    `copy_own`, the files an install may change (copied: an install is about to run on them, and
    must not change the donor's)."""
    old, new = str(donor).encode(), str(folder).encode()
    if len(old) != len(new):
        raise ValueError(f"testbed folders of different lengths: {donor} and {folder}")
    source_prefix, target_prefix = donor / "python", folder / "python"
    done = subprocess.run(["cp", "-a", "--link", str(source_prefix), str(target_prefix)], capture_output=True, text=True)
    if done.returncode != 0:
        raise OSError(f"cannot link {source_prefix} to {target_prefix}: {done.stderr.strip()[:300]}")
    retarget_links(target_prefix, [(str(donor), str(folder))])
    rewrite_files(target_prefix, mentions, [(old, new)], like=source_prefix)
    if copy_own:
        rewritten = set(mentions)
        for path in list(own_files(target_prefix)):
            if str(path.relative_to(target_prefix)) not in rewritten and path.stat().st_nlink > 1:
                write_like(path, path.read_bytes(), path)


def link_folder(source: Path, target: Path) -> None:
    """Every file of `source` hard-linked into `target` (the wheelhouse: files nobody changes)."""
    target.mkdir(exist_ok=True)
    for path in sorted(source.iterdir()):
        if path.is_file() and not path.is_symlink():
            try:
                os.link(path, target / path.name)
            except OSError:
                shutil.copy2(path, target / path.name)


def distributions(prefix: Path) -> dict[str, str]:
    """The distributions installed in the prefix's site-packages (normalized name -> version),
    but the project's own: an editable install (an .egg-link, a dist-info installed from a local
    folder)."""
    found: dict[str, str] = {}
    for site in prefix.glob("lib/python*/site-packages"):
        for entry in site.iterdir():
            if entry.suffix == ".dist-info":
                direct = entry / "direct_url.json"
                if direct.is_file() and '"file://' in direct.read_text(errors="replace"):
                    continue
            elif entry.suffix not in (".egg-info", ".egg"):
                continue
            name, _, version = entry.stem.partition("-")
            found[re.sub(r"[-_.]+", "-", name).lower()] = version.split("-py")[0]
    return found


REQUIREMENT_FILES = re.compile(r"(?:^|/)(?:setup\.py|setup\.cfg|pyproject\.toml|[^/]*requirements[^/]*\.(?:txt|in))$")


def requirements_may_differ(record: InstallRecord, state: TreeState) -> bool:
    """Whether a file where projects declare their requirements (setup.py, setup.cfg,
    pyproject.toml, a requirements file), read by the donor's install, differs in `state`."""
    return any(REQUIREMENT_FILES.search(path) and state.blob(path) != blob for path, blob in record.inputs.files.items())


def installs_in_place(commands: tuple[str, ...]) -> bool:
    """Whether every install step installs the project in place, linked to the tree (`pip install
    -e .`, `setup.py develop`)."""
    return bool(commands) and all(re.search(r"\bpip install\b.*(?:\s-e\s|\s--editable[\s=])|\bsetup\.py\b.*\bdevelop\b",
                                            f" {command} ") for command in commands)


def requested_extras(commands: tuple[str, ...]) -> set[str] | None:
    """The extras the install steps ask for (`pip install -e .[test]`); None when a step is not a
    pip install of the project, whose requirements then all count."""
    found: set[str] = set()
    for command in commands:
        if not re.search(r"\bpip install\b", command):
            return None
        for group in re.findall(r"\.\[([^\]]*)\]", command):
            found |= {name.strip().lower() for name in group.split(",") if name.strip()}
    return found


def project_requirements(folder: Path, made: list[str], extras: set[str] | None) -> list[str]:
    """The project's own requirements as its install wrote them, those it installs (the base ones
    and the extras asked for; all with `extras` None): from the egg-info's requires.txt in the
    tree, and from the Requires-Dist of a dist-info installed from a local folder."""
    found = []
    for path in made:
        if path.endswith(".egg-info/requires.txt"):
            section = ""
            for line in (folder / "tree" / path).read_text(errors="replace").splitlines():
                if line.startswith("["):
                    section = line.strip("[]").split(":", 1)[0].strip().lower()
                elif line.strip() and (extras is None or not section or section in extras):
                    found.append(f"{path} [{section}] {line.strip()}")
    for site in (folder / "python").glob("lib/python*/site-packages"):
        for entry in site.glob("*.dist-info"):
            direct = entry / "direct_url.json"
            if direct.is_file() and '"file://' in direct.read_text(errors="replace") and (entry / "METADATA").is_file():
                lines = (entry / "METADATA").read_text(errors="replace").split("\n\n", 1)[0].splitlines()
                for line in lines:
                    if not line.startswith(("Requires-Dist:", "Requires-Python:")):
                        continue
                    extra = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", line)
                    if extras is None or extra is None or extra.group(1).lower() in extras:
                        found.append(f"{entry.name.split('-')[0]}: {line}")
    return sorted(found)
