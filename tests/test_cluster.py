"""Scale out: a batch on a Ray cluster on this machine (`ray.cluster_utils.Cluster`: a head and a
worker, each its own raylet). Developers and QA Engineers spread over the nodes,
the store and the gateway are single actors every run shares, the results are those of the team
without Ray, and a node lost mid-batch costs neither a run nor a second payment for anything
recorded. On the same cluster, each node with a cache root of its own: `magis-ray doctor` prints a
row a node, and a grading whose node is lost mid-grading grades every instance exactly once with
the verdicts of a grading on one node (its test runs, `--sandbox none`, wait at a gate on the host
until the node is removed)."""
from __future__ import annotations

import hashlib
import socket
import tempfile
import threading
import time
import uuid
from pathlib import Path

import msgspec
import pytest
from checks import assert_consistent_log
from clusters import nodes_with_own_caches
from execfixtures import GOLD, make_calc_repos, new_file_patch, record, write_dataset
from scenarios import BOTH_DIFF, BOTH_ISSUE, MEAN_FIX, SHOUT_FIX, calc_issue, make_calc_repo
from test_cluster_placement import copies_in, grading_options, lose_a_worker_midway, verdicts, write_predictions
from waiting import wait_until

from magis_ray.actors.model.scripted_server import Rule, ScriptedServer
from magis_ray.actors.model.scripted_team import ScriptedTeam
from magis_ray.actors.runtime.deployment import WORKER_NICENESS
from magis_ray.events.projections import final_diff, fold, metrics
from magis_ray.events.schema import InstanceGraded, InstanceGradingStarted, LLMExchanged, RunFinished, RunSettings, TaskFinished
from magis_ray.events.streams import StreamKind
from magis_ray.store import open_store

FIXES = {"calc/stats.py": [MEAN_FIX], "calc/texts.py": [SHOUT_FIX]}
EXPECTED_DIFF = BOTH_DIFF
# The calls a Developer and its QA Engineer make: the work that spreads over the cluster.
TASK_PURPOSES = {"design_qa", "locate_lines", "write_code", "review_patch"}
# use_memory=False: each run summarizes its files afresh, so runs that share a store at the
# same time are each exactly the run the team makes alone (memory reuse depends on timing).
SETTINGS = RunSettings(tests=False, top_k=4, use_memory=False, model="m")


def test_the_cluster_config_is_one_ray_up_accepts():
    """ray_cluster.yaml against the schema Ray's cluster launcher checks, and Ray's own config
    preparation (defaults filled, node types checked; no cloud is called)."""
    import json
    from pathlib import Path

    import jsonschema
    import ray
    import yaml
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = yaml.safe_load((Path(__file__).parents[1] / "ray_cluster.yaml").read_text())
    schema = json.loads((Path(ray.__file__).parent / "autoscaler" / "ray-schema.json").read_text())
    jsonschema.validate(config, schema)
    validate_config(prepare_config(config))
    assert config["provider"]["type"] == "aws"
    assert {config["head_node_type"], "worker"} == set(config["available_node_types"])
    # every node installs magis-ray from the mounted checkout, with the Ray version these tests ran
    [checkout] = [remote for remote, local in config["file_mounts"].items() if local == "."]
    setup = " ".join(config["setup_commands"])
    assert f"-e {checkout}" in setup and f'"ray[default]=={ray.__version__}"' in setup
    assert any("--head" in c for c in config["head_start_ray_commands"])
    assert any("$RAY_HEAD_IP" in c for c in config["worker_start_ray_commands"])
    # every node's workers at the priority of the Ray magis-ray starts for itself
    starts = [c for c in config["head_start_ray_commands"] + config["worker_start_ray_commands"] if "ray start" in c]
    assert len(starts) == 2 and all(f"RAY_worker_niceness={WORKER_NICENESS} " in c for c in starts)


@pytest.fixture(scope="module")
def cluster():
    """A head (the driver's node: store, gateway, supervisors, Custodians) and a worker, each with a
    cache root of its own: work spread over the nodes shows on both, and a lost worker leaves the
    head to take its work over. A test that needs the worker asks for it first
    (`cluster.workers_at_least`): an earlier test may have lost it."""
    # the workers' priority as ray_cluster.yaml starts its nodes
    with nodes_with_own_caches("mrc-", workers=1, head={"_system_config": {"worker_niceness": WORKER_NICENESS}}) as started:
        yield started


def head_id(cluster) -> str:
    return cluster.head_node.node_id


def alive_workers(cluster) -> dict:
    """Worker node id -> its Node, for the workers not removed."""
    return {node.node_id: node for node in cluster.worker_nodes}


def scripted(task_delay_s: float, other_delay_s: float = 0.02):
    """The scripted team, its Developers' and QA Engineers' calls slowed to `task_delay_s`."""
    team = ScriptedTeam(FIXES)

    def respond(request):
        answer = team.answer(request)
        if answer is None:
            return None
        return Rule(json=answer, delay_s=task_delay_s if request.purpose in TASK_PURPOSES else other_delay_s)

    return respond


@pytest.fixture
def repos(tmp_path):
    """A repos dir holding calc/calc, and its base commit."""
    path = tmp_path / "repos"
    _, base = make_calc_repo(path / "calc__calc")
    return path, base


def items_of(repos, count: int):
    from magis_ray.actors.runtime.batch import BatchItem

    path, base = repos
    return [
        BatchItem(f"calc__calc-{i}", calc_issue(path / "calc__calc", base, BOTH_ISSUE, instance_id=f"calc__calc-{i}"))
        for i in range(1, count + 1)
    ]


def run_batch(server, store_path, repos, count, *, workers, concurrency=8, budget=0, batch="cluster"):
    from magis_ray.actors.runtime.batch import BatchRunner, batch_settings
    from magis_ray.actors.runtime.deployment import Deployment
    from magis_ray.actors.model.gateway import GatewayConfig
    from magis_ray.events.settings import EndpointSettings

    deployment = Deployment(str(store_path), GatewayConfig(
        base_url=server.base_url, api_key="k", model="m", backoff_base_s=0.01, endpoint=EndpointSettings(concurrency=concurrency),
    ))
    with open_store(str(store_path), create=True) as store:
        settings = batch_settings(SETTINGS, batch)
        return BatchRunner(deployment, store, settings, str(repos[0]), workers, budget=budget).run(items_of(repos, count))


def logs_of(store_path) -> dict[str, list]:
    with open_store(str(store_path)) as store:
        return {info.run_id: store.read(info.run_id) for info in store.list_runs()}


def is_task_lane(actor: str) -> bool:
    """A Developer's or QA Engineer's own lane ("developer:T1:meeting" is the Manager's meeting)."""
    kind, _, rest = actor.partition(":")
    return kind in ("developer", "qa") and ":" not in rest


def fingerprint(events) -> dict[str, list[tuple]]:
    """What each role lane did, placement and timing aside: its events' types, and for a model
    call its purpose and the exact prompt."""
    lanes: dict[str, list[tuple]] = {}
    for r in events:
        if r.actor == "supervisor":
            continue  # run start and end: they name the batch and the instance
        step = (type(r.event).__name__,)
        if isinstance(r.event, LLMExchanged):
            step += (r.event.purpose, hashlib.sha1(msgspec.json.encode(r.event.messages)).hexdigest())
        lanes.setdefault(r.actor, []).append(step)
    return lanes


def reference_run(repos) -> list:
    """The same issue by the team without Ray (every role in this process): what each cluster run must equal."""
    from magis_ray.actors.model.gateway import Gateway, GatewayConfig
    from magis_ray.actors.runtime.inprocess import LocalLLM, run_in_process
    from magis_ray.store.memory import InMemoryStore

    path, base = repos
    store = InMemoryStore()
    with ScriptedServer(scripted(0.0, 0.0)) as server:
        llm = LocalLLM(Gateway(GatewayConfig(base_url=server.base_url, api_key="k", model="m", backoff_base_s=0.01)))
        issue = calc_issue(path / "calc__calc", base, BOTH_ISSUE, instance_id="calc__calc-1")
        end = run_in_process(store=store, issue=issue, settings=SETTINGS, repo_path=str(path / "calc__calc"), llm=llm, run_id="ref")
        llm.close()
    assert isinstance(end, RunFinished) and end.outcome == "patched"
    return store.read("ref")


def sent_keys(requests) -> list[tuple]:
    return [(r.run, r.purpose, r.task, tuple(r.messages)) for r in requests]


def recorded_keys(logs: dict[str, list]) -> set[tuple]:
    return {
        (r.run_id, r.event.purpose, r.event.task_id, tuple(r.event.messages))
        for events in logs.values() for r in events if isinstance(r.event, LLMExchanged)
    }


def test_a_batch_spreads_over_the_nodes_shares_one_gateway_and_matches_the_team_without_ray(cluster, repos, tmp_path):
    cluster.workers_at_least(1)
    limit = 2
    store_path = tmp_path / "store"
    with ScriptedServer(scripted(0.15)) as server:
        results = run_batch(server, store_path, repos, 2, workers=2, concurrency=limit)
        most_in_flight = server.max_in_flight
    assert [(r.status, r.outcome) for r in results] == [("finished", "patched")] * 2
    # one gateway for the whole cluster: two runs' actors on two nodes, each run with two tasks
    # asking at once, reached its limit of requests in flight and never held more
    assert most_in_flight == limit
    logs = logs_of(store_path)
    expected = fingerprint(reference_run(repos))
    task_nodes = set()
    for run_id, events in logs.items():
        assert_consistent_log(events)
        assert final_diff(fold(events)) == EXPECTED_DIFF
        assert fingerprint(events) == expected, run_id
        # the driver's node holds the run's supervisor and Custodian
        assert {r.node for r in events if not is_task_lane(r.actor)} == {head_id(cluster)}
        task_nodes |= {r.node for r in events if is_task_lane(r.actor)}
    assert task_nodes == {head_id(cluster), *alive_workers(cluster)}, task_nodes


def test_the_batch_budget_holds_across_the_cluster(cluster, repos, tmp_path):
    store_path = tmp_path / "store"
    with ScriptedServer(scripted(0.05)) as server:
        # about one and a half runs' tokens for two runs at once
        full = metrics(fold(reference_run(repos)))["total"]
        budget = int(1.5 * (full["prompt_tokens"] + full["completion_tokens"]))
        results = run_batch(server, store_path, repos, 2, workers=2, budget=budget, batch="budget")
    logs = logs_of(store_path)
    spent = sum(metrics(fold(events))["total"][k] for events in logs.values() for k in ("prompt_tokens", "completion_tokens"))
    assert 0 < spent <= budget
    assert any(r.status == "failed" and "budget" in r.outcome for r in results), results
    for events in logs.values():
        assert_consistent_log(events)


def wait_for_task_lane_on_a_worker(store_path, workers: dict, batch: threading.Thread) -> tuple[str, str, str]:
    """(node id, run id, lane) of the first Developer event recorded on a worker node, waited for as
    long as the batch runs: on a loaded machine starting the actors' processes alone takes minutes."""
    def on_a_worker() -> tuple[str, str, str] | None:
        with open_store(str(store_path)) as store:
            for r in store.read_all():
                if r.actor.startswith("developer:") and is_task_lane(r.actor) and r.node in workers:
                    return r.node, r.run_id, r.actor
        return None

    # the batch's own deadlines bound it; this one only bounds a hang
    return wait_until(on_a_worker, "a Developer event is recorded on a worker node", timeout_s=1800, while_running=batch)


def role_processes_on(node) -> int:
    """How many Developer and QA actor processes the node's raylet runs (each has at most one model call in flight)."""
    from processes import children_of, cmdline_of

    raylet = node.all_processes["raylet"][0].process.pid
    return sum(any(name in cmdline_of(pid) for name in ("DeveloperService", "QAService")) for pid in children_of(raylet))


def explain(keys, logs, victim, removed_at, sent=()) -> str:
    """The lanes of the tasks that `keys` name, event by event: where and when each ran."""
    lines = [f"lost node {victim[:8]}"]
    for run, purpose, task, _ in keys:
        lines.append(f"{run} {purpose} {task} was sent {sent.count((run, purpose, task, _)) if sent else 'more than once'} times:")
        for r in logs[run]:
            if r.actor.partition(":")[2] == task:
                what = r.event.purpose if isinstance(r.event, LLMExchanged) else ""
                lines.append(f"  {r.time - removed_at:+6.2f}s {r.actor:14} {r.node[:8]} {type(r.event).__name__} {what}")
    return "\n".join(lines)


# --- the cluster as a grading and `magis-ray doctor` see it -----------------------------------

def test_doctor_on_the_cluster_prints_a_row_a_node(cluster, tmp_path):
    """RAY_ADDRESS names the cluster, each node with a cache root of its own: the checks run on
    each node, a row each."""
    from test_doctor import doctor, rows

    cluster.workers_at_least(1)

    result = doctor("--memory", "1G", cwd=tmp_path, RAY_ADDRESS=cluster.address)
    nodes = [node.node_id for node in [cluster.head_node, *cluster.worker_nodes]]
    assert result.returncode == 0, result.stdout + result.stderr
    table = rows(result)
    assert len(nodes) >= 2 and sorted(name.rsplit("(", 1)[1].rstrip(")") for name in table) == sorted(n[:8] for n in nodes), result.stdout
    assert all(row["SANDBOX"] == "bwrap" and row["MEMORY"] == "1 x 1 GiB fit" for row in table.values()), result.stdout


def test_a_node_lost_mid_grading_every_instance_is_graded_once_with_the_verdicts_of_one_node(cluster, tmp_path):
    from magis_ray.actors.swebench.grading_service import plan_grading, run_grading_plan

    cluster.workers_at_least(1)
    _, base = make_calc_repos(tmp_path / "repos")
    dataset = write_dataset(tmp_path / "calc.jsonl", [record(base, n) for n in (1, 2)])
    patches = {1: GOLD, 2: new_file_patch("calc/unused.py", "X = 1\n")}  # one fixes it, one does not
    predictions = write_predictions(tmp_path / "preds.jsonl", patches)
    gate = Path(tempfile.gettempdir()) / f"mrp-gate-{uuid.uuid4().hex}"
    plan = plan_grading(grading_options(tmp_path, dataset, predictions, gate, name="lost"))
    # every test run waits at the gate: one on a worker node is what the node takes down with it (a
    # node has a core, so the two instances go to two nodes, and one of any two is a worker)
    lost, done = lose_a_worker_midway(cluster, gate, lambda: run_grading_plan(plan), "the grading's test run")
    alive = {cluster.head_node.node_id, *(n.node_id for n in cluster.worker_nodes)}
    assert lost not in alive
    # every instance once, in the stream and in the report; none graded on the lost node
    with open_store(str(tmp_path / "store")) as store:
        events = [r.event for r in store.read(StreamKind.GRADING.stream_id("lost"))]
    ids = [f"calc__calc-{n}" for n in patches]
    assert sorted(e.instance_id for e in events if isinstance(e, InstanceGraded)) == ids
    assert sorted(e.instance_id for e in events if isinstance(e, InstanceGradingStarted)) == ids
    report = done.report
    assert (report["resolved_ids"], report["unresolved_ids"], report["error_ids"]) == (ids[:1], ids[1:], [])
    assert report["completed_instances"] == report["total_instances"] == 2
    assert all(r.node in alive and r.host == socket.gethostname() for r in done.results), [(r.node, r.host) for r in done.results]
    # each node that graded did so from its own copy of the repository's commit
    for node in {r.node for r in done.results}:
        assert copies_in(cluster.caches[node]), node
    # the same instances on one node (this process's threads, the gate open) give the same verdicts,
    # tested in the environment a node built
    built = cluster.caches[done.results[0].node]
    single = run_grading_plan(plan_grading(grading_options(tmp_path, dataset, predictions, gate, name="one", use_ray=False,
                                                           env_cache=str(built))))
    assert verdicts(done.results) == verdicts(single.results)


# a crashed node's actors raise ActorUnavailableError until the GCS declares the node dead
# (about 8 s of failed health checks here: clusters.py): the supervisor recreates them on any RayActorError
# A crashed node in the default run; one removed in order is the milder case, slow-marked for the
# suite's time.
@pytest.mark.parametrize("graceful", [pytest.param(True, id="removed", marks=pytest.mark.slow), pytest.param(False, id="crashed")])
def test_a_node_lost_mid_batch_its_runs_go_on_elsewhere_and_nothing_is_paid_twice(cluster, repos, tmp_path, graceful):
    cluster.workers_at_least(1)  # an earlier test may have taken it away
    store_path = tmp_path / "store"
    count = 2  # four Developers: SPREAD puts some on the worker
    open_store(str(store_path), create=True).close()
    outcome: dict = {}
    with ScriptedServer(scripted(0.8)) as server:
        batch = threading.Thread(target=lambda: outcome.update(results=run_batch(server, store_path, repos, count, workers=count)))
        batch.start()
        try:
            victim, victim_run, victim_lane = wait_for_task_lane_on_a_worker(store_path, alive_workers(cluster), batch)
            lost = alive_workers(cluster)[victim]
            in_flight_at_most = role_processes_on(lost)
            cluster.remove_node(lost, allow_graceful=graceful)
            removed_at = time.time()
            # what is recorded now was paid for: from here on, none of it may be asked again
            recorded_at_removal = recorded_keys(logs_of(store_path))
            sent_before = len(server.requests)
        finally:
            batch.join(timeout=600)  # a bound for a hang, not a timing: the batch takes seconds unloaded
        assert not batch.is_alive(), "the batch did not finish"
        requests = server.requests
    results = outcome["results"]
    assert [(r.status, r.outcome) for r in results] == [("finished", "patched")] * count, results
    logs = logs_of(store_path)
    assert len(logs) == count  # every instance ran once: its run went on, no second run was started
    for events in logs.values():
        assert_consistent_log(events)
        assert isinstance(events[-1].event, RunFinished) and final_diff(fold(events)) == EXPECTED_DIFF
        ids = [r.event_id for r in events]
        assert len(ids) == len(set(ids))
        exchanges = [(r.event.purpose, r.event.task_id, tuple(r.event.messages)) for r in events if isinstance(r.event, LLMExchanged)]
        assert len(exchanges) == len(set(exchanges)), "an exchange is in the log twice"
        # a crashed node's processes may finish an append in flight until they notice their raylet is
        # gone (seconds); the checks above show that even so nothing is in the log twice
        grace_s = 0.5 if graceful else 10.0
        assert not any(r.node == victim for r in events if r.time > removed_at + grace_s), "an event from the lost node"
    # the lane that was on the lost node finished elsewhere
    lane = [r for r in logs[victim_run] if r.actor == victim_lane]
    assert lane[0].node == victim and lane[-1].node != victim and isinstance(lane[-1].event, TaskFinished)
    # nothing recorded was sent to the model again...
    resent = set(sent_keys(requests[sent_before:])) & recorded_at_removal
    assert not resent, f"{len(resent)} recorded exchanges were sent to the model again"
    # ...and what was sent twice was a call a lost actor had made (the gateway may send it after the
    # removal; its answer died with the actor), asked again by the actor's successor: twice, no
    # more, and no more of them than the lost node had role actors
    sent = sent_keys(requests)
    twice = {key for key in sent if sent.count(key) > 1}
    assert all(sent.count(key) == 2 for key in twice), explain(twice, logs, victim, removed_at, sent)
    assert len(twice) <= in_flight_at_most, (in_flight_at_most, explain(twice, logs, victim, removed_at, sent))
