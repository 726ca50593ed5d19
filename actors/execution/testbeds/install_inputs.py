"""The inputs of a testbed's install, and whether another commit of the repository has the same.

A testbed's install is traced (install_trace_hook.py): which files of the tree its Python processes
opened, which folders they listed, which programs they ran. Its inputs are then:

- the content of every file it read (or looked for and did not find), as the tree was before the
  install ran (after the spec's pre-install edits), by git blob id; always setup.py, setup.cfg,
  pyproject.toml, MANIFEST.in, requirements.txt and .gitattributes at the top, read or not;
- the names at the top of the tree (a new pyproject.toml changes how pip builds), and of every
  folder the project's own code listed (setup.py's glob of scripts/);
- the structure of every folder the tools listed (setuptools finding packages): its subfolders and
  whether it has an __init__.py. The file names there only reach SOURCES.txt, a list no test reads;
  for an install in place, only the folders at the top (EDITABLE_DEPTH);
- the compiled sources (.c, .h, .pyx, ... and build files) of the whole tree when a compiler ran,
  since the compiler's own reads are not traced.

Another commit whose tree gives the same inputs gets the same install ("same"), except where the
install asked git (setuptools_scm and versioneer make the version from `git describe`) or the
compiled sources differ: then everything its Python processes read is the same, and only the
install itself must run again, on a copy of what the first one made (an extension whose sources
are the same is not compiled again: "incremental"). Anything else is "different". An install
that ran a program whose reads cannot be known, or a Python without audit hooks (below 3.8), is
never taken as the same (its `refusal` says why)."""
from __future__ import annotations

import ast
import hashlib
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from magis_ray.actors.code.workspaces import git_env

ALWAYS_READ = ("setup.py", "setup.cfg", "pyproject.toml", "MANIFEST.in", "requirements.txt")
# .gitattributes that make a checkout's files differ from the repository's blobs (line endings,
# filters): then a blob id no longer stands for what the install reads.
CONVERTING = re.compile(r"(?<![\w-])(?:text|eol|crlf|filter|ident|working-tree-encoding)\b")
COMPILED_SUFFIXES = (".c", ".h", ".cc", ".cpp", ".cxx", ".c++", ".hpp", ".hh", ".hxx", ".h++", ".pyx", ".pxd", ".pxi",
                     ".f", ".f90", ".f95", ".for", ".cu", ".m", ".mm", ".s", ".S", ".inc", ".tcc", ".ipp", ".def",
                     ".src", ".tp", ".templ", ".in", ".cmake", ".build")
COMPILED_NAMES = ("Makefile", "makefile", "GNUmakefile", "CMakeLists.txt", "configure", "meson.build", "meson_options.txt")
COMPILERS = re.compile(r"^(?:.*-)?(?:gcc|g\+\+|cc|c\+\+|clang|clang\+\+|gfortran|f77|f95|ld|ar|ranlib|nvcc|cpp|as)(?:-[0-9.]+)?$")
# Programs pip asks for its user agent; they read nothing of the tree.
TREE_BLIND = ("uname", "lsb_release")
# Version control, which setuptools_scm and versioneer ask for the version: what they answer is the
# commit's own, so an install that asks runs again.
VERSION_CONTROL = ("git", "hg")
PYTHON = re.compile(r"^python[0-9.]*$")
PYC = re.compile(r"^(?:(.*)/)?__pycache__/([^/.]+)\.[^/]+\.pyc$")

SAME, INCREMENTAL, DIFFERENT = "same", "incremental", "different"
# An install in place (pip install -e, setup.py develop) links the tree: its packages are imported
# from /testbed, where every commit has its own, and what finding them decides beyond the top-level
# ones (the top folder's names, and the structure of the folders in it: pkg/, src/) is the
# egg-info's file list, which no test reads. So the tools' listing of deeper folders (setuptools'
# manifest walking the whole tree: sphinx's tests/roots, which most commits add to) does not count.
EDITABLE_DEPTH = 1


def _git(tree: Path, *args: str) -> bytes:
    done = subprocess.run(["git", "-c", "safe.directory=*", "--no-optional-locks", *args], cwd=tree,
                          env={**git_env(), "GIT_OPTIONAL_LOCKS": "0"}, capture_output=True)
    if done.returncode != 0:
        raise OSError(f"git {args[0]} in {tree}: {done.stderr.decode('utf-8', 'replace').strip()[:300]}")
    return done.stdout


def blob_id(path: Path) -> str:
    """A file's git blob id, computed as git computes it (a symlink's is its target's text)."""
    data = os.readlink(path).encode("utf-8", "surrogateescape") if path.is_symlink() else path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class TreeState:
    """Every file of a checkout as it is now, by blob id: tracked ones from git's index (cheap),
    changed and untracked ones (a pre-install edit, a file the install wrote) hashed."""

    files: dict[str, str]
    submodules: dict[str, str] = field(default_factory=dict)  # path -> the commit it is at
    conversions: str = ""  # the .gitattributes files that convert files on checkout, as a digest ("" none)

    @classmethod
    def of(cls, tree: str | os.PathLike) -> TreeState:
        tree = Path(tree)
        files, submodules = {}, {}
        for entry in _git(tree, "ls-files", "--stage", "-z").split(b"\0"):
            if not entry:
                continue
            info, _, path = entry.decode("utf-8", "surrogateescape").partition("\t")
            mode, sha, _ = info.split(" ")
            (submodules if mode == "160000" else files)[path] = sha
        status = _git(tree, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--ignored", "--ignore-submodules=all")
        for entry in status.split(b"\0"):
            if len(entry) < 4:
                continue
            path = entry[3:].decode("utf-8", "surrogateescape")
            if path.endswith("/"):  # an empty folder (git lists no files in it)
                continue
            full = tree / path
            if full.is_symlink() or full.is_file():
                files[path] = blob_id(full)
            else:
                files.pop(path, None)
        rules = hashlib.sha256()
        converting = False
        for path in sorted(p for p in files if p.rsplit("/", 1)[-1] == ".gitattributes"):
            try:
                text = (tree / path).read_text(errors="replace")
            except OSError:
                continue
            if any(CONVERTING.search(line.split("#", 1)[0]) for line in text.splitlines()):
                converting = True
                rules.update(f"{path}\0{files[path]}\n".encode("utf-8", "surrogateescape"))
        return cls(files, submodules, rules.hexdigest() if converting else "")

    def blob(self, path: str) -> str | None:
        """The file's blob id; a file of a submodule is its commit and its path; None: absent."""
        if path in self.files:
            return self.files[path]
        for module, commit in self.submodules.items():
            if path.startswith(module + "/"):
                return f"{commit}:{path[len(module) + 1:]}"
        return None

    def names(self, folder: str) -> list[str] | None:
        """The names in a folder (None: there is no such folder)."""
        entries = self._entries(folder)
        return None if entries is None else sorted({rest.split("/", 1)[0] for rest in entries})

    def structure(self, folder: str) -> list[str] | None:
        """A folder's subfolders (NAME/) and whether it has an __init__.py: what finding packages
        reads (None: there is no such folder)."""
        entries = self._entries(folder)
        if entries is None:
            return None
        return sorted({rest.split("/", 1)[0] + "/" for rest in entries if "/" in rest} | {"__init__.py"} & set(entries))

    def _entries(self, folder: str) -> list[str] | None:
        """The paths under a folder, relative to it (None: there is no such folder)."""
        prefix = "" if folder in ("", ".") else folder.rstrip("/") + "/"
        found = [path[len(prefix):] for path in [*self.files, *self.submodules] if path.startswith(prefix)]
        return found if found or not prefix else None

    def compiled(self) -> str:
        """A digest of every compiled source and build file of the tree."""
        digest = hashlib.sha256()
        for path in sorted(self.files):
            name = path.rsplit("/", 1)[-1]
            if name.endswith(COMPILED_SUFFIXES) or name in COMPILED_NAMES:
                digest.update(f"{path}\0{self.files[path]}\n".encode("utf-8", "surrogateescape"))
        for path in sorted(self.submodules):
            digest.update(f"{path}\0{self.submodules[path]}\n".encode("utf-8", "surrogateescape"))
        return digest.hexdigest()


@dataclass
class Trace:
    """What the install's Python processes noted (install_trace_hook.py)."""

    processes: int = 0
    untraced: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    reads: set[str] = field(default_factory=set)
    tool_listed: set[str] = field(default_factory=set)
    project_listed: set[str] = field(default_factory=set)
    runs: list[tuple[str, list[str], str]] = field(default_factory=list)

    @classmethod
    def read(cls, folder: str | os.PathLike) -> Trace:
        trace = cls()
        for path in sorted(Path(folder).glob("*.trace")):
            for line in path.read_text(encoding="utf-8", errors="surrogateescape").splitlines():
                kind, _, value = line.partition("\t")
                if kind == "start":
                    trace.processes += 1
                elif kind == "untraced":
                    trace.untraced.append(value)
                elif kind == "error":
                    trace.errors.append(value)
                elif kind == "read":
                    trace.reads.add(value)
                    compiled = PYC.match(value)
                    if compiled:  # a cached module stands for its source, which Python then need not open
                        trace.reads.add("/".join(filter(None, (compiled.group(1), compiled.group(2) + ".py"))))
                elif kind == "list":
                    trace.tool_listed.add(value)
                elif kind == "listall":
                    trace.project_listed.add(value)
                elif kind == "run":
                    try:
                        executable, argv, cwd = ast.literal_eval(value)
                    except (ValueError, SyntaxError):
                        trace.errors.append(f"unreadable run: {value[:200]}")
                        continue
                    trace.runs.append((executable or (argv[0] if argv else ""), list(argv), cwd))
        return trace


class InstallInputs(msgspec.Struct, frozen=True, kw_only=True):
    """What one testbed's install read, as the tree was before it ran (see the module's doc)."""

    files: dict[str, str | None] = {}
    folders: dict[str, list[str] | None] = {}  # listed by the tools: their structure
    listings: dict[str, list[str] | None] = {}  # listed by the project, and the top: names
    asks_git: bool = False  # the install ran git or read .git (a version from `git describe`)
    compiled: str | None = None  # the compiled sources' digest, when a compiler ran
    conversions: str = ""  # the checkout's conversions (TreeState.conversions)
    refusal: str = ""  # why the install cannot be reused ("" when it can)

    @classmethod
    def from_trace(cls, trace: Trace, before: TreeState, roots: tuple[str, ...], prefix: str,
                   editable: bool = False) -> InstallInputs:
        """`editable`: every install step installs the project in place (its packages are imported
        from the tree), so of the folders the tools listed only the top ones count (see
        EDITABLE_DEPTH)."""
        files: dict[str, str | None] = {}
        asks_git, compiled = False, None
        for path in sorted(trace.reads | set(ALWAYS_READ)):
            if path == ".git" or path.startswith(".git/"):
                asks_git = True
            elif not path.endswith((".pyc", ".pyo")):  # a cached module: its source counts instead
                files[path] = before.blob(path)
        folders = {folder: before.structure(folder) for folder in sorted(trace.tool_listed - trace.project_listed)
                   if not editable or folder in (".", "") or folder.count("/") < EDITABLE_DEPTH}
        listings = {folder: before.names(folder) for folder in sorted(trace.project_listed | {"."})}
        for executable, argv, _ in trace.runs:
            name = Path(executable).name
            if name in VERSION_CONTROL:
                asks_git = True
            elif COMPILERS.match(name):
                compiled = before.compiled()
        return cls(files=files, folders=folders, listings=listings, asks_git=asks_git, compiled=compiled,
                   conversions=before.conversions, refusal=_refusal(trace, prefix))

    def compare(self, other: TreeState) -> tuple[str, str]:
        """(SAME | INCREMENTAL | DIFFERENT, why) for a tree in the state `other`."""
        if other.conversions != self.conversions:
            return DIFFERENT, "the checkout's conversions (.gitattributes) differ"
        for path, blob in self.files.items():
            if other.blob(path) != blob:
                return DIFFERENT, f"{path} differs"
        for folder, structure in self.folders.items():
            if other.structure(folder) != structure:
                return DIFFERENT, f"the folders in {folder} differ"
        for folder, names in self.listings.items():
            if other.names(folder) != names:
                return DIFFERENT, f"the files in {'the top folder' if folder == '.' else folder} differ"
        if self.refusal:
            return DIFFERENT, self.refusal
        if self.compiled is not None and other.compiled() != self.compiled:
            return INCREMENTAL, "the files the install reads are the same, but not the compiled sources"
        if self.asks_git:
            return INCREMENTAL, "the files the install reads are the same, but it asks git (the version is the commit's)"
        return SAME, f"the {len(self.files)} files the install reads are the same"


def _refusal(trace: Trace, prefix: str) -> str:
    if trace.untraced:
        return f"its install ran Python {trace.untraced[0]}, which has no audit hooks to trace it"
    if not trace.processes:
        return "its install ran no Python that could be traced"
    if trace.errors:
        return f"its trace failed: {trace.errors[0][:200]}"
    for executable, argv, _ in trace.runs:
        name = Path(executable).name
        if PYTHON.match(name):
            if "/" in executable and not executable.startswith(prefix.rstrip("/") + "/"):
                return f"its install ran another Python ({executable}), whose reads are not traced"
            if any(arg.startswith("-") and not arg.startswith("--") and "S" in arg for arg in _options(argv[1:])):
                return f"its install ran Python without site ({' '.join(argv[:3])}), whose reads are not traced"
        elif name not in VERSION_CONTROL and name not in TREE_BLIND and not COMPILERS.match(name):
            return f"its install ran {name}, whose reads cannot be traced"
    return ""


def _options(args: list[str]) -> list[str]:
    """An interpreter's own options: those before its script, -c or -m."""
    found = []
    for arg in args:
        if not arg.startswith("-") or arg in ("-c", "-m", "-"):
            break
        found.append(arg)
    return found
