"""Two drivers on one Ray cluster share the store's actor and the gateway (named from the store's
path and the gateway's settings, detached): the gateway's concurrency limit holds between them,
and `magis-ray stop` ends the shared actors of its own store, never another store's. A driver that joins a cluster brings its MAGIS_*
settings to its actors (its prompt templates), and never its API key. Both drivers' tests join the module's Ray head
(conftest.py's module_ray): each has a store and a gateway of its own there."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from checks import assert_consistent_log
from commands import command_environment, magis as command, started
from scenarios import MEAN_DIFF, MEAN_FIX, calc_issue, write_issue

from magis_ray.actors.model import prompting
from magis_ray.actors.model.gateway import GatewayConfig
from magis_ray.events.settings import EndpointSettings
from magis_ray.actors.model.scripted_server import ScriptedServer
from magis_ray.actors.model.scripted_team import ScriptedTeam
from magis_ray.actors.runtime.deployment import JOB_CONFIG_VARIABLE, carried_settings
from magis_ray.actors.runtime.remote import gateway_name
from magis_ray.events.projections import final_diff, fold
from magis_ray.events.schema import LLMExchanged, RunFinished
from magis_ray.store import open_store

# The calc issue of one task (mean): what is shown is shared between drivers, not within a run.
EXPECTED_DIFF = MEAN_DIFF


def test_a_gateway_name_is_the_same_in_every_process_and_never_holds_the_key():
    config = GatewayConfig(base_url="http://127.0.0.1:1/v1", model="m", api_key="sk-secret", endpoint=EndpointSettings(concurrency=1))
    code = ("from magis_ray.actors.model.gateway import GatewayConfig\nfrom magis_ray.actors.runtime.remote import gateway_name\n"
            "from magis_ray.events.settings import EndpointSettings\n"
            "print(gateway_name(GatewayConfig(base_url='http://127.0.0.1:1/v1', model='m', api_key='sk-secret', endpoint=EndpointSettings(concurrency=1))))")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert other == gateway_name(config) and "secret" not in other
    assert gateway_name(GatewayConfig(base_url="http://127.0.0.1:1/v1", model="m", api_key="sk-secret", endpoint=EndpointSettings(concurrency=2))) != other


@pytest.fixture(scope="module")
def ray_cluster(module_ray):
    """The module's Ray head (conftest.py's module_ray): the variables a driver joins it with."""
    return {**module_ray, "OPENAI_API_KEY": "k"}


def magis(args, env, cwd):
    return started(*args, cwd=cwd, env=env)


def stop(store: str, env, cwd) -> str:
    stopped = command("stop", "--store", store, cwd=cwd, env=env, timeout=600)
    assert stopped.returncode == 0, stopped.stderr
    return stopped.stdout.strip()


def our_own_prompts(folder: Path) -> Path:
    """A prompts folder whose Custodian relevance template starts with a line of its own."""
    folder.mkdir()
    packaged = (Path(prompting.__file__).parent / "prompts" / "judge_relevance.txt").read_text()
    (folder / "judge_relevance.txt").write_text(packaged.replace("[system]\n", "[system]\nOUR OWN TEMPLATE.\n", 1))
    return folder


def test_drivers_on_one_cluster_share_one_gateway_limit_and_stop_ends_only_their_stores_actors(ray_cluster, calc_repo, tmp_path):
    """Drivers of two stores share the gateway (the same settings). `stop` of the first store ends
    its store's actor and leaves the gateway to the other store; `stop` of the other ends both. The
    second driver brings its own prompt templates (MAGIS_PROMPTS_DIR): its Custodian's actor reads
    them where it runs, on the cluster, whose workers never inherit a driver's environment; the
    first driver's run keeps the packaged ones, and no driver's API key reaches the model: the
    gateway uses its node's. (Two drivers of one store: test_batch.py's two batches.)"""
    repo_path, base = calc_repo
    issue = write_issue(tmp_path / "issue.json", calc_issue(repo_path, base))
    prompts = our_own_prompts(tmp_path / "prompts")
    with ScriptedServer(ScriptedTeam({"calc/stats.py": [MEAN_FIX]}, delay_s=0.05)) as server:
        config = ["--base-url", server.base_url, "--model", "m", "--concurrency", "1"]
        env = {"store": ray_cluster, "other": {**ray_cluster, "MAGIS_PROMPTS_DIR": str(prompts)}}
        drivers = [magis(["submit", str(issue), "--store", store, *config], env[store], tmp_path)
                   for store in ("store", "other")]
        outs = [d.communicate(timeout=300) for d in drivers]
        for driver, (out, err) in zip(drivers, outs):
            assert driver.returncode == 0 and "Traceback" not in err, err
        assert server.max_in_flight == 1  # one gateway for both drivers, and its limit held
        asked_for = {r.run for r in server.requests}
        keys = {r.headers.get("authorization") for r in server.requests}
    assert "Bearer k" not in keys
    first = re.fullmatch(rf"stopped 1 shared actor\(s\): store:{re.escape(str(tmp_path / 'store'))}; "
                         r"left (gateway:[0-9a-f]+): other stores' drivers use it too", stop("store", ray_cluster, tmp_path))
    assert first, "the first store's stop ended more, or less, than its own store's actor"
    gateway = first[1]
    assert stop("other", ray_cluster, tmp_path) == f"stopped 2 shared actor(s): store:{tmp_path / 'other'}, {gateway}"
    assert stop("store", ray_cluster, tmp_path) == "stopped 0 shared actor(s)"
    run_ids = set()
    for store, count in (("store", 1), ("other", 1)):
        with open_store(str(tmp_path / store)) as s:
            runs = [s.read(r.run_id) for r in s.list_runs()]
        assert len(runs) == count
        run_ids |= {events[0].run_id for events in runs}
        for events in runs:
            assert_consistent_log(events)
            assert isinstance(events[-1].event, RunFinished) and final_diff(fold(events)) == EXPECTED_DIFF
            exchanges = [r.event for r in events if isinstance(r.event, LLMExchanged)]
            ours = [e.purpose for e in exchanges if e.messages[0].content.startswith("OUR OWN TEMPLATE.")]
            judged = [e for e in exchanges if e.purpose == "judge_relevance"]
            assert judged and ours == ([e.purpose for e in judged] if store == "other" else []), store
    assert asked_for == run_ids  # every run asked the model, through that one gateway


def test_only_a_driver_that_joins_a_cluster_outside_a_job_carries_its_settings_and_never_a_node_s_own():
    environ = {"MAGIS_PROMPTS_DIR": "/p", "MAGIS_ENV_CACHE": "/e", "MAGIS_SCRATCH_DIR": "/s", "MAGIS_SANDBOX_UIDS": "1-2",
               "OPENAI_API_KEY": "sk-secret", "PATH": "/bin"}
    # a node's cache, scratch and sandbox uids are its own: each node resolves them from its environment
    assert carried_settings("127.0.0.1:6379", environ) == {"MAGIS_PROMPTS_DIR": "/p"}
    assert carried_settings("local", environ) == {}  # a Ray of its own inherits the driver's environment
    assert carried_settings("127.0.0.1:6379", {**environ, JOB_CONFIG_VARIABLE: "{}"}) == {}  # the job's env_vars do it
    assert carried_settings("127.0.0.1:6379", {"OPENAI_API_KEY": "sk-secret"}) == {}


CARRIED_TO_A_TASK = """
import os
from magis_ray.actors.runtime.deployment import ensure_ray
from magis_ray.actors.runtime.remote import on_every_node
ensure_ray()
print(sorted({found for _, _, found in on_every_node(lambda cores: os.environ.get("MAGIS_PROMPTS_DIR"))}))
"""


def test_a_task_on_the_cluster_takes_on_the_driver_s_settings(ray_cluster, tmp_path):
    """The node's workers start from the head's environment; the driver's MAGIS_PROMPTS_DIR reaches
    a task all the same (the Custodian's actor reading it is the test above)."""
    done = subprocess.run([sys.executable, "-c", CARRIED_TO_A_TASK], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env=command_environment({**ray_cluster, "MAGIS_PROMPTS_DIR": str(tmp_path / "ours")}))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == repr([str(tmp_path / "ours")])
