"""Shared fixtures: a real Ray session per module that needs it, the calc repo, the inspector's store and server."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the helpers beside the tests (gitfixtures, scenarios)
# The suite's runs are the paper's MAGIS unless a test asks for tests (`--tests on`): most tests check
# the team's collaboration, and would otherwise each build an environment. Children inherit this.
os.environ.setdefault("MAGIS_TESTS", "off")
# Nor does a settings file of the user running the suite (~/.config/magis-ray/config.toml) count.
os.environ.setdefault("MAGIS_USER_CONFIG", os.devnull)
# No implicit ray.init() in the tests or their children: a Ray call made after a Ray was shut down
# (a test's thread outliving its module's Ray) would otherwise start one, or join whatever cluster
# RAY_ADDRESS or /tmp/ray/ray_current_cluster names: another session's on a shared machine. When
# that cluster ended, Ray ended this whole pytest process (exit code 1, no summary line). Every
# Ray the tests use is started explicitly (ray.init here, ensure_ray in magis-ray); read by Ray
# when it is first imported, which is after this file.
os.environ["RAY_ENABLE_AUTO_CONNECT"] = "0"
# Nor does magis-ray join a Ray that `ray start --head` left running on the machine (another
# session's): each magis-ray command of the tests starts its own, unless a test asks for a warm one.
os.environ.setdefault("MAGIS_RAY", "own")


# The modules that take longest, longest first (their seconds in a default run on an idle 2-core
# machine: cluster about 160, fidelity 160, ... own_repository 14; the rest took under 14 each). Workers
# are handed modules in this order (`--no-loadscope-reorder`: xdist would otherwise start with the
# modules of most tests, which are quick), so the long ones run side by side early and the quick
# ones fill in at the end, rather than one long module running last while the other workers idle.
LONGEST_FIRST = (
    "test_cluster", "test_fidelity", "test_grade_cli", "test_start_stop", "test_docs_runnable", "test_test_environments",
    "test_testbed_reuse", "test_batch", "test_installers", "test_resume", "test_team_tests",
    "test_shared_services", "test_batch_resources", "test_sandbox", "test_compiler_cache", "test_local_model",
    "test_execution", "test_real_projects", "test_liveness", "test_tasks_validate", "test_artifacts", "test_repos",
    "test_one_configuration", "test_team_ray", "test_submit_cli", "test_evaluation", "test_inspector", "test_own_repository",
)


def pytest_collection_modifyitems(items) -> None:
    rank = {module: place for place, module in enumerate(LONGEST_FIRST)}
    # a stable sort: each module's tests stay together and in their order, the unlisted modules in theirs
    items.sort(key=lambda item: rank.get(Path(item.nodeid.split("::", 1)[0]).stem, len(rank)))


def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto` (pyproject.toml): a worker for each core this process may use, at most four. The
    tests are mostly whole processes that keep a core busy (a Ray, a sandboxed build), so more
    workers than cores only slow each other; and a worker may hold a Ray head or a three-node
    cluster, a few GB each."""
    return max(1, min(len(os.sched_getaffinity(0)), 4))


@pytest.fixture(scope="module")
def ray_session():
    import ray
    from ray._private import auto_init_hook

    assert not auto_init_hook.enable_auto_connect, "ray was imported before conftest.py turned its auto-connect off"
    from rayheads import local_ray_started

    # a Ray of this test module's own, even if a cluster runs on the machine
    local_ray_started(num_cpus=2)
    yield
    from magis_ray.actors.runtime import remote

    remote.forget_shared()
    ray.shutdown()


@pytest.fixture(scope="module")
def module_ray():
    """A Ray head of the test module's own (`ray start --head`: its own temp dir, ports and token,
    tests/rayheads.py) that the module's commands join rather than each starting a Ray of its own;
    the variables a command joins it with (RAY_ADDRESS). Only for whole runs that neither stop a Ray
    nor count its processes (docs/development.md, "Suites side by side"): a run that kills its
    driver's Ray, or looks for what is left of it, starts its own."""
    from rayheads import recorded_head_started

    with recorded_head_started("magis-module-", "--include-dashboard=false", "--dashboard-agent-listen-port={port0}",
                               "--dashboard-agent-grpc-port={port1}", "--ray-client-server-port={port2}",
                               "--runtime-env-agent-port={port3}") as head:
        yield {**{name: value for name, value in head.env.items() if name.startswith("RAY_")}, "RAY_ADDRESS": head.address}


@pytest.fixture
def calc_repo(tmp_path):
    from scenarios import make_calc_repo

    path = tmp_path / "calc"
    repo, base = make_calc_repo(path)
    return path, base


@pytest.fixture(scope="module")
def env_cache(tmp_path_factory) -> Path:
    """An environment cache folder of the test module's own, empty at first: its environments are
    built by the module's runs, not taken from the user's cache."""
    return tmp_path_factory.mktemp("envs")


@pytest.fixture(scope="module")
def inspector_store(tmp_path_factory) -> Path:
    """A SQLite store of the constructed runs and a grading (tests/inspecting.py), one per test
    module: the browser checks submit runs into theirs."""
    from inspecting import make_store_with_grading

    return make_store_with_grading(tmp_path_factory.mktemp("inspector-store"))


@pytest.fixture(scope="module")
def inspector_url(inspector_store):
    """The base URL of a `magis-ray serve` process over inspector_store, for the whole module."""
    from inspecting import serve

    with serve(inspector_store) as base:
        yield base


def interruptible() -> None:
    """For a child that a test stops with SIGINT: a shell that started the tests in the
    background ignores SIGINT, and the child would inherit that and never see Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_pytest(checkout: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=checkout,
        capture_output=True, text=True, timeout=120,
    )
