"""Environments and testbeds as cluster artifacts (actors/execution/sharing/artifacts.py), on real folders:
a real environment and testbed of the calc fixture built in the sandbox and published to a store
folder, fetched under another cache root (of another length) and run there; corrupt and
half-written archives detected and rebuilt, the grading's verdict unchanged; two builders of one
key build once; a failed build published, so that the nodes waiting for it fail at once without
building; the node's cache bounded, least recently used first; an object store through
fsspec's memory:// filesystem; and a store URL nothing can open, refused in one line."""
from __future__ import annotations

import fcntl
import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from commands import in_process
from execfixtures import GOLD, TEST_PATCH, make_calc_repos, record, write_dataset
from waiting import wait_until
from magis_ray.actors.code.pytest_log import parse_pytest_log
from magis_ray.actors.execution.sharing import cache_bound
from magis_ray.actors.execution.sharing.artifacts import (BUILT, CACHED, ENVIRONMENTS, FETCHED, RELOCATION_FILE, TESTBEDS,
                                                  ArtifactStore, ArtifactStoreUnusable, BuildFailedElsewhere, file_digest)
from magis_ray.actors.execution.environments import BuildFailed, EnvironmentCache, Recipe
from magis_ray.actors.execution.runner import INPUTS, TestRunner
from magis_ray.actors.execution.sandbox import GiB, Limits, BubblewrapSandbox, bwrap_path
from magis_ray.actors.execution.testbeds import TestbedCache, TestbedRecipe

needs_bwrap = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap (bwrap) is not installed")


def calc_recipe(base: str) -> TestbedRecipe:
    return TestbedRecipe(env=Recipe(python="3.11", label="calc"), repo="calc/calc", commit=base,
                         install=("python -m pip install -e . pytest",), label="calc")


def cache_at(root: Path, store: ArtifactStore | None) -> TestbedCache:
    return TestbedCache(EnvironmentCache(root, artifacts=store))


def texts_naming(folder: Path, needle: str) -> list[str]:
    """The text files under `folder` (byte caches and binaries aside) that name `needle`."""
    found = []
    for base, _, files in os.walk(folder):
        for name in files:
            path = Path(base) / name
            if path.is_symlink() or not path.is_file():
                continue
            data = path.read_bytes()
            if needle.encode() in data and b"\0" not in data:
                found.append(str(path.relative_to(folder)))
    return found


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """The calc testbed built on a first "node" (cache root a/) and published to a store folder."""
    root = tmp_path_factory.mktemp("artifacts")
    repo, base = make_calc_repos(root / "repos")
    store = ArtifactStore(str(root / "store"))
    builder = cache_at(root / "a", store)
    testbed = builder.get(calc_recipe(base), repo)
    return {"root": root, "repo": repo, "base": base, "store": store, "testbed": testbed}


def archive_members(archive: Path) -> list[str]:
    import tarfile

    import zstandard

    with open(archive, "rb") as source, zstandard.ZstdDecompressor().stream_reader(source) as stream, \
            tarfile.open(fileobj=stream, mode="r|") as tar:
        return [member.name.removeprefix("./") for member in tar]


@needs_bwrap
def test_a_published_testbed_runs_its_tests_under_another_node_s_cache_root(published):
    """Fetched under a cache root of another length, after the builder's cache is gone: nothing
    names the builder's root any more, the environment's python knows its new prefix, and the
    testbed's pytest (a console script chained to the environment) runs the calc tests there.
    The testbed's archive leaves its interpreter's own files out (its standard library, its
    binaries), and the fetching node links them from its own interpreter."""
    built, store, root = published["testbed"], published["store"], published["root"]
    assert (built.env.obtained, built.obtained) == (BUILT, BUILT)
    for kind, key in ((ENVIRONMENTS, built.env.key), (TESTBEDS, built.key)):
        names = store.names(kind, key)
        archive = root / "store" / names.archive
        assert (root / "store" / names.digest).read_text().split()[0] == file_digest(archive)
    stdlib = Path(built.env.interpreter_prefix) / "lib" / "python3.11"
    members = archive_members(root / "store" / store.names(TESTBEDS, built.key).archive)
    assert "python/lib/python3.11/site-packages/_magis_environment.pth" in members  # the testbed's own
    assert "python/lib/python3.11/os.py" not in members and "tree/calc/stats.py" in members
    record = json.loads((Path(built.path) / RELOCATION_FILE).read_text())
    assert "python/lib/python3.11/os.py" in record["interpreter_files"]
    assert not any(name.startswith("python/lib/python3.11/site-packages/") for name in record["interpreter_files"])
    builder_root = str(root / "a")
    subprocess.run(["rm", "-rf", builder_root], check=True)  # the builder's node is gone

    elsewhere = root / "another-node-with-a-longer-cache-root"
    fetched = cache_at(elsewhere, store).get(calc_recipe(published["base"]), published["repo"])
    assert (fetched.env.obtained, fetched.obtained) == (FETCHED, FETCHED)
    assert not fetched.built_now and not fetched.env.built_now
    assert Path(fetched.path).parent.parent == elsewhere
    assert os.path.samefile(Path(fetched.prefix) / "lib" / "python3.11" / "os.py", stdlib / "os.py")
    assert [path for path in texts_naming(elsewhere, builder_root + "/") if not path.endswith(RELOCATION_FILE)] == []
    python = Path(fetched.env.venv) / "bin" / "python"
    prefix = subprocess.run([str(python), "-c", "import sys; print(sys.prefix)"], capture_output=True, text=True, check=True)
    assert prefix.stdout.strip() == fetched.env.venv

    script = f"git apply {INPUTS}/gold.diff && git apply {INPUTS}/test.diff && python -m pytest -rA tests/test_more.py"
    outcome = TestRunner(BubblewrapSandbox(), Limits(wall_seconds=120, memory_bytes=8 * GiB)).run(fetched, script, parse_pytest_log,
                                                                   inputs={"gold.diff": GOLD, "test.diff": TEST_PATCH})
    assert outcome.results == {"tests/test_more.py::test_mean_of_two": "PASSED",
                               "tests/test_more.py::test_median_of_one": "PASSED"}, outcome.output[-2000:]

    again = cache_at(elsewhere, store).get(calc_recipe(published["base"]), published["repo"])
    assert (again.env.obtained, again.obtained) == (CACHED, CACHED)


@needs_bwrap
@pytest.mark.slow  # three gradings, two of them building (minutes); the round trip above is the default case
def test_a_corrupt_or_half_written_archive_is_detected_and_rebuilt_and_the_verdict_stands(published, tmp_path):
    """A grading with the calc instance's gold patch on a node whose store holds a corrupt
    environment archive (bytes flipped) and a half-written testbed archive (cut short): both are
    detected by their digests and dropped, both are built again (the grading's events say so) and
    published anew, and the verdict is the one a clean grading gives."""
    from magis_ray.events.settings import GradeSettings
    from magis_ray.actors.swebench.grading_service import GradingOptions, plan_grading, run_grading_plan

    store_root = tmp_path / "store"
    dataset = write_dataset(tmp_path / "calc.jsonl", [record(published["base"])])

    def grading(cache: Path, name: str):
        options = GradingOptions(dataset=str(dataset), repos_dir=str(published["root"] / "repos"), store=str(tmp_path / "db"),
                                 patches="gold", env_cache=str(cache), artifact_store=str(store_root), use_ray=False, name=name,
                                 grade=GradeSettings(test_cmd="pytest -rA", timeout=120, memory="2G"))
        return run_grading_plan(plan_grading(options)).results[0]

    clean = grading(tmp_path / "first", "clean")
    assert (clean.environment.obtained, clean.testbed.obtained) == (BUILT, BUILT) and clean.resolved
    store = ArtifactStore(str(store_root))
    env_archive = store_root / store.names(ENVIRONMENTS, clean.environment.key).archive
    testbed_archive = store_root / store.names(TESTBEDS, clean.testbed.key).archive
    data = bytearray(env_archive.read_bytes())
    for offset in range(len(data) // 2, len(data) // 2 + 64):
        data[offset] ^= 0xFF
    env_archive.write_bytes(bytes(data))
    with open(testbed_archive, "r+b") as archive:
        archive.truncate(archive.seek(0, os.SEEK_END) // 3)

    again = grading(tmp_path / "second", "after-corruption")
    assert (again.environment.obtained, again.testbed.obtained) == (BUILT, BUILT)
    assert (again.resolved, again.tests_status.fail_to_pass.success, again.tests_status.pass_to_pass.success) == \
        (clean.resolved, clean.tests_status.fail_to_pass.success, clean.tests_status.pass_to_pass.success)
    for archive, kind, key in ((env_archive, ENVIRONMENTS, clean.environment.key), (testbed_archive, TESTBEDS, clean.testbed.key)):
        assert (store_root / store.names(kind, key).digest).read_text().split()[0] == file_digest(archive)

    third = grading(tmp_path / "third", "after-the-rebuild")  # the republished archives are whole
    assert (third.environment.obtained, third.testbed.obtained, third.resolved) == (FETCHED, FETCHED, clean.resolved)


@needs_bwrap
@pytest.mark.slow  # a real environment build with a pip install
def test_two_nodes_asking_for_one_environment_at_once_build_it_once(tmp_path):
    """Two builders (threads, each with its own cache root) share one store: one claims the key and
    builds, the other waits for its archive and fetches it."""
    store = str(tmp_path / "store")
    recipe = Recipe(python="3.11", label="two-builders", packages=("iniconfig==2.0.0",))
    results: dict[str, object] = {}

    def node(name: str) -> None:
        cache = EnvironmentCache(tmp_path / name, artifacts=ArtifactStore(store, poll_s=0.2))
        try:
            results[name] = cache.get(recipe)
        except Exception as exc:  # reported below
            results[name] = exc

    threads = [threading.Thread(target=node, args=(name,)) for name in ("node-1", "node-2")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    obtained = sorted(getattr(results[name], "obtained", repr(results[name])) for name in ("node-1", "node-2"))
    assert obtained == [BUILT, FETCHED]
    assert not list((tmp_path / "store" / ENVIRONMENTS).glob("*.claim"))  # released


@needs_bwrap
def test_a_failed_build_is_published_and_the_nodes_waiting_for_it_fail_at_once_without_building(published, tmp_path):
    """Node B claims a testbed whose install fails; node C asks for it while B builds and waits; B's
    failure is published before its claim is let go, so C gives the same failure without running
    the install, and so does node D, which asks later. Counted from the install logs of the three
    cache roots: one install ran."""
    store = ArtifactStore(str(published["root"] / "store"), poll_s=0.05)
    env_key = published["testbed"].env.key
    roots = {name: tmp_path / name for name in ("b", "c", "d")}
    # B's install holds its claim until the test lets it fail (bounded: two minutes at most); the
    # sandbox shows a build its node's pip cache, where the test puts the file it waits for.
    go = roots["b"] / "pip-cache" / "released-by-the-test"
    install = (f"for i in $(seq 600); do [ -e {go} ] && break; sleep 0.2; done; echo no luck; exit 3",)
    recipe = TestbedRecipe(env=Recipe(python="3.11", label="calc"), repo="calc/calc", commit=published["base"],
                           install=install, label="calc-failing")
    key = recipe.key(env_key)
    outcomes: dict[str, BaseException | object] = {}

    def node(name: str) -> None:
        try:
            outcomes[name] = cache_at(roots[name], store).get(recipe, published["repo"])
        except Exception as exc:  # looked at below
            outcomes[name] = exc

    b = threading.Thread(target=node, args=("b",), name="node-b")
    b.start()
    wait_until(lambda: store.backend.exists(store.names(TESTBEDS, key).claim), "node B holds the testbed's claim", while_running=b)
    c = threading.Thread(target=node, args=("c",), name="node-c")
    c.start()
    # C has its environment (fetched) and is at the testbed's own build: it waits for B's claim.
    wait_until(lambda: (roots["c"] / "testbeds" / f"{key}.lock").exists(), "node C asks for the testbed", while_running=c)
    assert c.is_alive()
    go.touch()
    b.join()
    c.join()

    assert isinstance(outcomes["b"], BuildFailed) and outcomes["b"].step == "install-1", outcomes["b"]
    failure = store.failure(TESTBEDS, key)
    assert failure is not None and failure.step == "install-1" and "exit 3" in failure.reason and "\n" not in failure.reason
    assert isinstance(outcomes["c"], BuildFailed) and outcomes["c"].step == "install-1", outcomes["c"]
    assert failure.reason in str(outcomes["c"]) and failure.host in str(outcomes["c"])
    node("d")
    assert isinstance(outcomes["d"], BuildFailed) and str(outcomes["d"]) == str(outcomes["c"])
    installs = [log for root in roots.values() for log in root.glob(f"testbeds/{key}/logs/*-install-1.log")]
    assert [log.relative_to(tmp_path).parts[0] for log in installs] == ["b"]
    assert not store.has(TESTBEDS, key) and not store.backend.exists(store.names(TESTBEDS, key).claim)


def test_a_published_failure_holds_until_it_expires_and_a_success_answers_it(tmp_path):
    """The rule of a failure record: while in force, a node asking for the key gets it and no
    claim; once expired, the next node claims the key and builds; a publication removes it."""
    store = ArtifactStore(str(tmp_path / "store"), poll_s=0.05)
    store.publish_failure(ENVIRONMENTS, "k", "packages", "pip exit 1:\n  no matching distribution", ttl=3600)
    with pytest.raises(BuildFailedElsewhere, match="pip exit 1: no matching distribution .*until .* is removed"):
        store.claim_or_wait(ENVIRONMENTS, "k")
    assert not store.backend.exists(store.names(ENVIRONMENTS, "k").claim)
    record_path = tmp_path / "store" / store.names(ENVIRONMENTS, "k").failure
    expired = dict(json.loads(record_path.read_text()), expires=time.time() - 1)
    record_path.write_text(json.dumps(expired))
    claim = store.claim_or_wait(ENVIRONMENTS, "k")
    assert claim is not None and claim.held  # an hour later, one node tries again
    folder = tmp_path / "node" / "k"
    folder.mkdir(parents=True)
    (folder / "ready.json").write_text("{}")
    store.publish(ENVIRONMENTS, "k", folder, tmp_path / "node")
    claim.release()
    assert not record_path.exists() and store.has(ENVIRONMENTS, "k") and store.claim_or_wait(ENVIRONMENTS, "k") is None


def fake_interpreter(at: Path, lacking: str = "") -> Path:
    """An interpreter's prefix as a testbed's is made from: binaries, a standard library, headers."""
    files = {"bin/python3.99": b"\x7fELF\0binary " + str(at).encode(), "lib/python3.99/os.py": b"import sys\n",
             "lib/python3.99/json/__init__.py": b"JSON = 1\n", "include/python3.99/Python.h": b"#define PY 1\n",
             "lib/python3.99/_sysconfigdata.py": f"PREFIX = {str(at)!r}\n".encode()}
    for relative, data in files.items():
        if relative != lacking:
            (at / relative).parent.mkdir(parents=True, exist_ok=True)
            (at / relative).write_bytes(data)
    (at / "lib" / "python3.99" / "site-packages").mkdir(parents=True)
    return at


def test_an_interpreter_s_own_files_stay_out_of_the_archive_and_a_node_lacking_them_builds(tmp_path, caplog):
    """A prefix made of an interpreter's files (hard-linked, as a testbed's is) is published without
    them; a node whose interpreter of that version lives elsewhere gets them linked from its own;
    a node whose interpreter lacks one builds the folder itself, says why in one line, and does not
    publish over the archive."""
    from magis_ray.actors.execution.sharing.builds import BuildRecord, SharedArtifact, locked_build
    from magis_ray.actors.execution.testbeds.prefix import make_prefix

    store = ArtifactStore(str(tmp_path / "store"))
    builder = fake_interpreter(tmp_path / "interpreter-a")
    folder = tmp_path / "a" / "k"
    folder.mkdir(parents=True)
    make_prefix(builder, folder / "python")
    (folder / "python" / "lib" / "python3.99" / "site-packages" / "own.py").write_text("OWN = 1\n")
    (folder / "ready.json").write_text("{}")
    store.publish(TESTBEDS, "k", folder, tmp_path / "a", str(builder))
    archive = tmp_path / "store" / store.names(TESTBEDS, "k").archive
    members = archive_members(archive)
    assert "python/lib/python3.99/site-packages/own.py" in members and "python/lib/python3.99/json" in members
    assert "python/bin" in members and "python/bin/python3.99" not in members
    assert not [name for name in members if name.endswith(("os.py", "__init__.py", "Python.h", "_sysconfigdata.py"))]

    elsewhere = fake_interpreter(tmp_path / "interpreter-b-elsewhere")
    assert store.fetch(TESTBEDS, "k", tmp_path / "b" / "k", tmp_path / "b", str(elsewhere))
    for relative in ("bin/python3.99", "lib/python3.99/os.py", "lib/python3.99/_sysconfigdata.py"):
        assert os.path.samefile(tmp_path / "b" / "k" / "python" / relative, elsewhere / relative)
    assert (tmp_path / "b" / "k" / "python" / "lib" / "python3.99" / "site-packages" / "own.py").read_text() == "OWN = 1\n"

    lacking = fake_interpreter(tmp_path / "interpreter-c", lacking="lib/python3.99/json/__init__.py")
    digest = (tmp_path / "store" / store.names(TESTBEDS, "k").digest).read_text()
    builds = []
    record, _ = locked_build(tmp_path / "c" / "k", lambda: builds.append("built") or BuildRecord(), BuildRecord,
                             shared=SharedArtifact(store, TESTBEDS, "k", tmp_path / "c", str(lacking)))
    assert builds == ["built"] and record.obtained == BUILT
    said = [record.getMessage() for record in caplog.records if "lacks" in record.getMessage()]
    assert len(said) == 1 and "\n" not in said[0] and "lacks 1 of the 5 files" in said[0] and "json/__init__.py" in said[0]
    assert (tmp_path / "store" / store.names(TESTBEDS, "k").digest).read_text() == digest  # left as it was
    assert store.has(TESTBEDS, "k") and archive.is_file()


def test_an_archive_an_older_node_published_as_a_gzipped_tar_is_still_fetched(tmp_path):
    """Before zstd, nodes published KEY.tar.gz made by tarfile: such an archive is fetched and
    relocated; a corrupt one is dropped as any other."""
    import tarfile

    from magis_ray.actors.execution.sharing.archives import LEGACY_SUFFIX
    from magis_ray.actors.execution.sharing.artifacts import write_relocation

    first = tmp_path / "first"
    folder = first / "k"
    (folder / "bin").mkdir(parents=True)
    (folder / "bin" / "tool").write_text(f"#!{folder}/bin/python\n")
    (folder / "ready.json").write_text("{}")
    write_relocation(folder, first, "")
    store = ArtifactStore(str(tmp_path / "store"))
    names = store.names(ENVIRONMENTS, "k", LEGACY_SUFFIX)
    archive = tmp_path / "store" / names.archive
    archive.parent.mkdir(parents=True)
    with tarfile.open(archive, "w:gz", compresslevel=3) as tar:
        for entry in sorted(os.listdir(folder)):
            tar.add(folder / entry, arcname=entry)
    (tmp_path / "store" / names.digest).write_text(f"{file_digest(archive)}  k{LEGACY_SUFFIX}\n")
    assert store.has(ENVIRONMENTS, "k")
    second = tmp_path / "second-root"
    assert store.fetch(ENVIRONMENTS, "k", second / "k", second)
    assert (second / "k" / "bin" / "tool").read_text() == f"#!{second}/k/bin/python\n"

    archive.write_bytes(archive.read_bytes()[:40])
    assert not store.fetch(ENVIRONMENTS, "k", tmp_path / "third" / "k", tmp_path / "third")
    assert not store.has(ENVIRONMENTS, "k") and not archive.exists()

    # An archive whose digest matches but whose stream is no zstd (its publisher's fault): dropped too.
    names = store.names(ENVIRONMENTS, "k")
    (tmp_path / "store" / names.archive).write_bytes(b"not zstd at all")
    (tmp_path / "store" / names.digest).write_text(f"{file_digest(tmp_path / 'store' / names.archive)}  k.tar.zst\n")
    assert not store.fetch(ENVIRONMENTS, "k", tmp_path / "fourth" / "k", tmp_path / "fourth")
    assert not store.has(ENVIRONMENTS, "k")


def make_entry(parent: Path, name: str, size: int, used_ago: float) -> Path:
    folder = parent / name
    folder.mkdir(parents=True)
    (folder / "payload").write_bytes(os.urandom(size))
    (folder / "ready.json").write_text("{}")
    cache_bound.record_size(folder)
    cache_bound.mark_used(folder)
    when = time.time() - used_ago
    os.utime(folder / cache_bound.USED, (when, when))
    return folder


def test_the_node_s_cache_evicts_the_least_recently_used_first_never_one_in_use(tmp_path):
    hour = cache_bound.IN_USE_S
    oldest = make_entry(tmp_path, "oldest", 300_000, 5 * hour)
    locked = make_entry(tmp_path, "locked", 300_000, 4 * hour)
    older = make_entry(tmp_path / "testbeds", "older", 300_000, 3 * hour)
    newer = make_entry(tmp_path, "newer", 300_000, 2 * hour)
    recent = make_entry(tmp_path, "recent", 300_000, 60)
    total = sum(entry.size for entry in cache_bound.entries(tmp_path))
    one = total // 5
    with open(tmp_path / "locked.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a build (or a fetch) of it going on
        evicted = cache_bound.evict_least_recent(tmp_path, total - 2 * one)
    assert evicted == [oldest, older]
    assert all(folder.is_dir() for folder in (locked, newer, recent))
    assert not oldest.exists() and not older.exists()
    # Bound below what is in use: the recently used entry stays all the same, and nothing breaks.
    assert cache_bound.evict_least_recent(tmp_path, 1, keep=newer) == [locked]
    assert sorted(p.name for p in tmp_path.iterdir() if (p / "ready.json").exists()) == ["newer", "recent"]
    assert cache_bound.evict_least_recent(tmp_path, 0) == []  # 0: no bound



def test_an_entry_another_thread_evicted_first_is_passed_over(tmp_path):
    """A grading's worker threads each list the entries, then evict: the second to reach one finds
    it gone, and the grading goes on."""
    hour = cache_bound.IN_USE_S
    first = make_entry(tmp_path / "testbeds", "first", 300_000, 5 * hour)
    second = make_entry(tmp_path / "testbeds", "second", 300_000, 4 * hour)
    listed = cache_bound.entries(tmp_path)
    assert cache_bound.evict_least_recent(tmp_path, 1) == [first, second]  # the other thread
    assert [cache_bound._evict(entry.folder) for entry in listed] == [False, False]
    assert not any(path.name.startswith(".evicted-") for path in (tmp_path / "testbeds").iterdir())


def test_an_entry_on_its_way_out_is_never_listed(tmp_path):
    """An evicted entry keeps its ready.json under its hidden name while its removal goes on (its
    recorded size may be gone first): another thread's listing passes it over rather than walk a
    tree that vanishes under it, and never makes a lock beside it."""
    hour = cache_bound.IN_USE_S
    kept = make_entry(tmp_path / "testbeds", "kept", 300_000, 5 * hour)
    leaving = make_entry(tmp_path / "testbeds", ".evicted-gone-1-2", 300_000, 6 * hour)
    (leaving / cache_bound.SIZE).unlink()
    assert [entry.folder for entry in cache_bound.entries(tmp_path)] == [kept]
    assert cache_bound.evict_least_recent(tmp_path, 1) == [kept]
    assert leaving.is_dir() and not (tmp_path / "testbeds" / f"{leaving.name}.lock").exists()
    assert not (leaving / cache_bound.SIZE).exists()

def test_an_object_store_url_goes_through_fsspec(tmp_path):
    """memory:// (fsspec's own in-memory filesystem) as the store: a folder naming its cache root
    published, fetched under another root and relocated; a flipped byte dropped; the claim exclusive."""
    fsspec = pytest.importorskip("fsspec")
    location = f"memory://magis-test-{os.getpid()}-{time.monotonic_ns()}/artifacts"
    store = ArtifactStore(location)
    first = tmp_path / "first"
    folder = first / "k1"
    (folder / "bin").mkdir(parents=True)
    (folder / "bin" / "tool").write_text(f"#!{folder}/bin/python\nprint('hi')\n")
    (folder / "bin" / "python").symlink_to(f"{folder}/real-python")
    (folder / "ready.json").write_text(json.dumps({"where": str(folder)}))
    store.publish(ENVIRONMENTS, "k1", folder, first)
    assert store.has(ENVIRONMENTS, "k1")

    second = tmp_path / "second-root"
    assert store.fetch(ENVIRONMENTS, "k1", second / "k1", second)
    assert (second / "k1" / "bin" / "tool").read_text().startswith(f"#!{second}/k1/bin/python\n")
    assert os.readlink(second / "k1" / "bin" / "python") == f"{second}/k1/real-python"
    assert json.loads((second / "k1" / "ready.json").read_text()) == {"where": str(second / "k1")}

    fs, path = fsspec.core.url_to_fs(location)
    archive = f"{path}/{store.names(ENVIRONMENTS, 'k1').archive}"
    data = bytearray(fs.cat_file(archive))
    data[len(data) // 2] ^= 0xFF
    fs.pipe_file(archive, bytes(data))
    assert not store.fetch(ENVIRONMENTS, "k1", tmp_path / "third" / "k1", tmp_path / "third")
    assert not store.has(ENVIRONMENTS, "k1") and not fs.exists(archive)  # dropped

    claim = store.claim_or_wait(ENVIRONMENTS, "k2")
    assert claim is not None and claim.held
    assert not store.backend.create(store.names(ENVIRONMENTS, "k2").claim, "another node")
    claim.release()
    assert not fs.exists(f"{path}/{store.names(ENVIRONMENTS, 'k2').claim}")


def test_a_lapsed_claim_is_taken_over(tmp_path):
    """A builder that died holding its claim: once the claim's expiry passes, another node claims the key."""
    store = ArtifactStore(str(tmp_path / "store"), claim_ttl=60, wait_s=600, poll_s=0.05)
    names = store.names(ENVIRONMENTS, "k")
    dead = json.dumps({"token": "dead", "host": "gone", "pid": 0, "expires": time.time() - 1})
    assert store.backend.create(names.claim, dead)
    claim = store.claim_or_wait(ENVIRONMENTS, "k")
    assert claim is not None and claim.held
    assert json.loads((tmp_path / "store" / names.claim).read_text())["token"] == claim.token
    claim.release()


def test_a_store_url_nothing_can_open_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    """Refused before anything runs: in this process."""
    dataset = write_dataset(tmp_path / "d.jsonl", [record("0" * 40)])
    (tmp_path / "repos").mkdir()
    monkeypatch.chdir(tmp_path)
    done = in_process(capsys, "grade", "--gold", "--dataset", dataset, "--repos-dir", tmp_path / "repos", "--store", tmp_path / "db",
                      "--test-cmd", "pytest -rA", "--no-ray", "--artifact-store", "bogus://bucket/artifacts")
    assert done.code == 2, done.err
    lines = done.err.strip().splitlines()
    assert len(lines) == 1 and "--artifact-store" in lines[0] and "bogus://" in lines[0], done.err
    with pytest.raises(ArtifactStoreUnusable, match="no filesystem for bogus://"):
        ArtifactStore("bogus://x")
    # submit takes it from the environment as well, and refuses it before anything runs
    repo, base = make_calc_repos(tmp_path / "calc-repos")
    (tmp_path / "issue.json").write_text(json.dumps({"instance_id": "calc-1", "repo": "calc/calc", "base_commit": base,
                                                     "problem_statement": "mean is wrong"}))
    monkeypatch.setenv("MAGIS_ARTIFACT_STORE", "bogus://bucket/x")
    done = in_process(capsys, "submit", "issue.json", "--repo", repo)
    assert done.code == 2, done.err
    assert done.err.strip().splitlines() == ["magis-ray: error: MAGIS_ARTIFACT_STORE='bogus://bucket/x': no filesystem "
                                                "for bogus:// (a folder, or a URL such as s3://bucket/path or gs://bucket/path)"]


def test_a_result_logged_before_it_said_how_its_environment_was_had_reads_from_built_now():
    """A version 4 result written before InstanceGraded said how its node had each part decodes
    (upcast) with how it had each read from built_now, for the preparation's seconds as for the
    details."""
    import msgspec

    from magis_ray.actors.swebench.grading_batch import instance_details, preparation_seconds
    from magis_ray.events.codec import decode_recorded

    line = (b'{"run_id": "grading:g", "version": 2, "position": 2, "time": 1.0, "actor": "grader", "event_id": "e2", "schema_version": 4,'
            b' "event": {"type": "InstanceGraded", "instance_id": "a__b-1", "patch_sha": "x", "resolved": true,'
            b' "env_key": "k", "env_build_seconds": 30.0, "env_built_now": true, "testbed_build_seconds": 5.0}}')
    old = decode_recorded(line).event
    assert (old.environment.obtained, old.testbed.obtained, preparation_seconds(old)) == (BUILT, CACHED, 30.0)
    fetched = msgspec.structs.replace(old, environment=msgspec.structs.replace(old.environment, built_now=False,
                                                                               obtained=FETCHED))
    assert preparation_seconds(fetched) == 30.0  # a fetch is preparation too
    details = instance_details([fetched])["a__b-1"]["environment"]
    assert (details["obtained"], details["testbed_obtained"]) == (FETCHED, CACHED)
