"""The project's files as the reader sees them: `read(path)`, a file's text or None, and
`listdir(folder)`, a folder's entry names or None, over a checked-out folder or a commit's files;
`ProjectFiles` reads each file once, and a file that does not parse is one line of its problems,
never an exception. Paths are relative to the project's root, with "/"; "" is the root."""
from __future__ import annotations

import configparser
import posixpath
from collections.abc import Callable, Iterable
from pathlib import Path

from magis_ray.actors.code.workspaces import one_line

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ReadText = Callable[[str], "str | None"]
ListFolder = Callable[[str], "Iterable[str] | None"]


def files_in_folder(root: str | Path) -> tuple[ReadText, ListFolder]:
    """The two readers over a checked-out folder."""
    base = Path(root)

    def read(path: str) -> str | None:
        file = base / path
        try:
            return file.read_text(encoding="utf-8", errors="replace") if file.is_file() else None
        except OSError:
            return None

    def listdir(folder: str) -> list[str] | None:
        where = base / folder if folder else base
        return sorted(entry.name for entry in where.iterdir()) if where.is_dir() else None

    return read, listdir


def files_in_snapshot(snapshot) -> tuple[ReadText, ListFolder]:
    """The two readers over a commit's files (a RepoSnapshot of actors/code/repository.py)."""
    folders: dict[str, set[str]] = {}
    for entry in snapshot.files():
        parts = entry.path.split("/")
        for depth in range(len(parts)):
            folders.setdefault("/".join(parts[:depth]), set()).add(parts[depth])

    def read(path: str) -> str | None:
        return snapshot.read_text(path) if snapshot.blob_id(path) is not None else None

    def listdir(folder: str) -> list[str] | None:
        entries = folders.get(folder.strip("/"))
        return sorted(entries) if entries is not None else None

    return read, listdir


def inside(folder: str, target: str) -> str | None:
    """`target` relative to `folder`, as a path from the root ("" for the root); None outside it."""
    target = target.strip().strip("'\"")
    if target.startswith("/"):
        return None
    joined = posixpath.normpath(posixpath.join(folder, target or "."))
    if joined == ".":
        return ""
    return None if joined == ".." or joined.startswith("../") else joined


class ProjectFiles:
    """The project's files, each read once, and the problems found reading them."""

    def __init__(self, read: ReadText, listdir: ListFolder) -> None:
        self._read = read
        self._listdir = listdir
        self._texts: dict[str, str | None] = {}
        self.problems: list[str] = []

    def text(self, path: str) -> str | None:
        if path not in self._texts:
            try:
                self._texts[path] = self._read(path)
            except (OSError, UnicodeDecodeError, ValueError):
                self._texts[path] = None
        return self._texts[path]

    def listing(self, folder: str) -> list[str]:
        try:
            return sorted(self._listdir(folder) or ())
        except (OSError, ValueError):
            return []

    def toml(self, path: str) -> dict:
        text = self.text(path)
        if text is None:
            return {}
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            self.problems.append(f"{path} is not valid TOML ({error}); none of it is read")
            return {}

    def ini(self, text: str | None, where: str) -> configparser.ConfigParser | None:
        """INI text (a file, or pyproject's legacy_tox_ini) parsed as setuptools and tox read it."""
        if text is None:
            return None
        parser = configparser.ConfigParser(interpolation=None, strict=False, comment_prefixes=("#", ";"),
                                           inline_comment_prefixes=None)
        parser.optionxform = str  # keys as written: extras_require keys keep their case
        try:
            parser.read_string(text, source=where)
        except configparser.Error as error:
            self.problems.append(f"{where} is not a valid INI file ({one_line(str(error), 200)}); none of it is read")
            return None
        return parser

    def ini_file(self, path: str) -> configparser.ConfigParser | None:
        return self.ini(self.text(path), path)
