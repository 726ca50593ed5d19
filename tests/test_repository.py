"""Read-only repository access (actors/code/repository.py) on real git repositories."""
from __future__ import annotations

import pickle
from concurrent.futures import ThreadPoolExecutor

import pytest
from gitfixtures import Submodule, Symlink, commit_files, git, make_repo

from magis_ray.actors.code.repository import (
    FileEntry,
    RepoError,
    RepoSnapshot,
    UnsafePath,
    find_repo,
    safe_repo_path,
)

FILES = {
    "README.md": "# demo\n",
    "pkg/__init__.py": "",
    "pkg/core.py": "def add(a, b):\n    return a + b\n",
    "pkg/deep/nested/mod.py": "X = 1\n",
    "data/blob.bin": b"\x89PNG\r\n\x1a\n\x00\x00\x00binary",
    "latin1.txt": "café".encode("latin-1"),
    "link.py": Symlink("pkg/core.py"),
    "vendor/lib": Submodule("1" * 40),
}


@pytest.fixture()
def history(tmp_path):
    """A base commit and a later one that changes, adds and deletes files."""
    repo, base = make_repo(tmp_path / "repo", FILES)
    later = commit_files(
        repo,
        {"pkg/core.py": "def add(a, b):\n    return b + a\n", "pkg/new.py": "Y = 2\n", "README.md": None},
        "later",
    )
    return repo, base, later, tmp_path / "repo"


def test_files_lists_regular_files_of_the_commit_only(history):
    repo, base, _, path = history
    snapshot = RepoSnapshot.open(path, base)
    assert snapshot.commit_id == base
    entries = snapshot.files()
    assert [e.path for e in entries] == [
        "README.md",
        "data/blob.bin",
        "latin1.txt",
        "pkg/__init__.py",
        "pkg/core.py",
        "pkg/deep/nested/mod.py",
    ]  # no symlink, no submodule; sorted
    core = next(e for e in entries if e.path == "pkg/core.py")
    assert core == FileEntry("pkg/core.py", str(repo[base].tree["pkg/core.py"].id), len(FILES["pkg/core.py"]))


def test_snapshot_ignores_later_commits_and_the_working_tree(history):
    _, base, later, path = history
    (path / "pkg").mkdir()
    (path / "pkg" / "core.py").write_text("working tree edit\n")
    (path / "untracked.py").write_text("nope\n")
    old, new = RepoSnapshot.open(path, base), RepoSnapshot.open(path, later)
    assert old.read_text("pkg/core.py") == FILES["pkg/core.py"]
    assert new.read_text("pkg/core.py") == "def add(a, b):\n    return b + a\n"
    assert old.blob_id("pkg/new.py") is None and new.blob_id("pkg/new.py") is not None
    assert old.blob_id("README.md") is not None and new.blob_id("README.md") is None
    assert "untracked.py" not in {e.path for e in new.files()}
    assert git("status", "--porcelain", cwd=path)  # the working tree really is dirty


def test_reading_files(history):
    _, base, _, path = history
    snapshot = RepoSnapshot.open(path, base)
    assert snapshot.read_text("pkg/deep/nested/mod.py") == "X = 1\n"
    assert snapshot.read_text("latin1.txt") == "caf\ufffd"  # undecodable byte replaced
    assert snapshot.read_bytes("data/blob.bin") == FILES["data/blob.bin"]
    assert snapshot.is_binary("data/blob.bin") and not snapshot.is_binary("pkg/core.py")
    blob = snapshot.blob_id("pkg/core.py")
    assert snapshot.has_blob(blob) and snapshot.text_of_blob(blob) == FILES["pkg/core.py"]
    assert not snapshot.has_blob("0" * 40) and not snapshot.has_blob("not hex") and not snapshot.has_blob(base)
    for missing in ["nope.py", "pkg", "link.py", "vendor/lib", "pkg//core.py", ""]:
        assert snapshot.blob_id(missing) is None
        with pytest.raises(RepoError, match=f"no file {missing} at commit {base[:12]}"):
            snapshot.read_text(missing)
    with pytest.raises(RepoError, match="blob 0+ not found"):
        snapshot.text_of_blob("0" * 40)
    with pytest.raises(RepoError, match="not found"):
        snapshot.text_of_blob(base)  # a commit, not a blob


def test_commit_resolution(history):
    repo, base, later, path = history
    assert RepoSnapshot.open(path, base[:8]).commit_id == base
    assert RepoSnapshot.open(path, "HEAD").commit_id == later
    assert RepoSnapshot.open(path, "HEAD~1").commit_id == base
    # opening the .git folder itself works too (a bare-style path)
    assert RepoSnapshot.open(repo.path, base).commit_id == base


@pytest.mark.parametrize("commit", ["f" * 40, "zzz-not-hex", "", "HEAD~9"])
def test_unknown_or_malformed_commit(history, commit):
    *_, path = history
    with pytest.raises(RepoError) as caught:
        RepoSnapshot.open(path, commit)
    assert str(caught.value) == f"commit {commit} not found in {path}"


def test_a_blob_id_is_not_a_commit(history):
    repo, base, _, path = history
    blob = str(repo[base].tree["pkg/core.py"].id)
    with pytest.raises(RepoError, match="not found"):
        RepoSnapshot.open(path, blob)


def test_not_a_repository(tmp_path, history):
    (tmp_path / "plain").mkdir()
    with pytest.raises(RepoError) as caught:
        RepoSnapshot.open(tmp_path / "plain", "HEAD")
    assert str(caught.value) == f"not a git repository: {tmp_path / 'plain'}"
    with pytest.raises(RepoError) as caught:
        RepoSnapshot.open(tmp_path / "gone", "HEAD")
    assert str(caught.value) == f"{tmp_path / 'gone'} does not exist"
    # a folder inside a repository is not that repository
    *_, path = history
    (path / "sub").mkdir()
    with pytest.raises(RepoError, match="not a git repository"):
        RepoSnapshot.open(path / "sub", "HEAD")


def test_snapshot_pickles_by_path_and_commit(history):
    _, base, _, path = history
    copy = pickle.loads(pickle.dumps(RepoSnapshot.open(path, base)))
    assert copy.commit_id == base and copy.read_text("pkg/core.py") == FILES["pkg/core.py"]


def test_a_later_commits_blob_is_readable_from_an_earlier_snapshot(history):
    """Memory keeps blob ids of other commits; any blob of the repository can be read."""
    _, base, later, path = history
    newer_blob = RepoSnapshot.open(path, later).blob_id("pkg/new.py")
    assert RepoSnapshot.open(path, base).text_of_blob(newer_blob) == "Y = 2\n"


def test_concurrent_reads_from_threads(history):
    _, base, _, path = history
    snapshot = RepoSnapshot.open(path, base)
    paths = [e.path for e in snapshot.files()] * 50
    with ThreadPoolExecutor(max_workers=8) as pool:
        texts = list(pool.map(snapshot.read_bytes, paths))
    assert texts == [snapshot.read_bytes(p) for p in paths]


def test_diff_blobs_between_versions(history):
    _, base, later, path = history
    old, new = RepoSnapshot.open(path, base), RepoSnapshot.open(path, later)
    diff = new.diff_blobs(old.blob_id("pkg/core.py"), new.blob_id("pkg/core.py"), "pkg/core.py")
    assert diff.startswith("diff --git a/pkg/core.py b/pkg/core.py\n")
    assert "-    return a + b\n+    return b + a\n" in diff
    same = old.blob_id("pkg/core.py")
    assert new.diff_blobs(same, same, "pkg/core.py") == ""
    created = new.diff_blobs(None, new.blob_id("pkg/new.py"), "pkg/new.py")
    assert "new file mode" in created and "+Y = 2\n" in created
    removed = new.diff_blobs(old.blob_id("README.md"), None, "README.md")
    assert "deleted file mode" in removed and "-# demo\n" in removed


@pytest.mark.parametrize(
    ("raw", "normalized"),
    [
        ("pkg/core.py", "pkg/core.py"),
        ("./pkg/core.py", "pkg/core.py"),
        ("pkg//sub/./m.py", "pkg/sub/m.py"),
        ("a/../b.py", "b.py"),
        (" pkg/x.py \n", "pkg/x.py"),
        (".github/workflows/ci.yml", ".github/workflows/ci.yml"),
        ("pkg/.gitignore", "pkg/.gitignore"),
    ],
)
def test_safe_repo_path_normalizes(raw, normalized):
    assert safe_repo_path(raw) == normalized


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("../x", "leaves the repository"),
        ("a/../../b", "leaves the repository"),
        ("..", "leaves the repository"),
        ("/etc/passwd", "absolute"),
        (".git/config", ".git"),
        ("pkg/.git/hooks/pre-commit", ".git"),
        (".GIT/config", ".git"),
        ("", "not a usable path"),
        ("   ", "not a usable path"),
        ("a\x00b", "not a usable path"),
        ("./", "repository root"),
        ("pkg/..", "repository root"),
    ],
)
def test_safe_repo_path_rejects(raw, reason):
    with pytest.raises(UnsafePath, match=reason):
        safe_repo_path(raw)
    assert issubclass(UnsafePath, ValueError)


def test_find_repo(tmp_path, history):
    *_, path = history
    assert find_repo("any/name", repo_path=path) == path  # an explicit path wins
    swe = tmp_path / "repos"
    make_repo(swe / "owner__name", {"a.py": "x\n"})
    assert find_repo("owner/name", repos_dir=swe) == swe / "owner__name"
    assert find_repo("owner/name", repo_path=path, repos_dir=swe) == path
    with pytest.raises(RepoError, match="no clone of other/name in"):
        find_repo("other/name", repos_dir=swe)
    with pytest.raises(RepoError, match="no clone of owner/name: give"):
        find_repo("owner/name")
    with pytest.raises(RepoError, match="missing does not exist"):
        find_repo("owner/name", repo_path=tmp_path / "missing", repos_dir=swe)
    with pytest.raises(RepoError, match="owner/name"):
        find_repo("just-a-name", repos_dir=swe)
    (swe / "plain__dir").mkdir()
    with pytest.raises(RepoError, match="not a git repository"):
        find_repo("plain/dir", repos_dir=swe)
