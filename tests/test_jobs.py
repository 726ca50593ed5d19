"""The documented cluster flow, on this machine: a Ray head started with `ray start --head` (its
dashboard serves the job API), a batch submitted with Ray's JobSubmissionClient as
`magis-ray submit DATASET.jsonl ...` in a working dir, its logs, and the results read back: the
predictions file and the store. The scripted model serves on loopback in this process."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from checks import assert_consistent_log
from rayheads import ray_head_started
from scenarios import BOTH_ISSUE, MEAN_FIX, SHOUT_FIX, STATS, TEXTS, calc_issue, make_calc_repo
from waiting import WaitTimedOut, wait_until

from magis_ray.actors.code.diffs import file_diff
from magis_ray.actors.code.edits import apply_edits
from magis_ray.actors.model.scripted_server import ScriptedServer
from magis_ray.actors.model.scripted_team import ScriptedTeam
from magis_ray.events.projections import final_diff, fold
from magis_ray.events.schema import RunFinished, RunStarted
from magis_ray.store import open_store

EXPECTED_DIFF = file_diff("calc/stats.py", STATS, apply_edits(STATS, [MEAN_FIX])) + file_diff(
    "calc/texts.py", TEXTS, apply_edits(TEXTS, [SHOUT_FIX])
)
START_TIMEOUT_S = 60
JOB_TIMEOUT_S = 180


@pytest.fixture
def ray_head():
    """A local head whose dashboard serves the job API (see rayheads). Ray's token authentication
    is on, with a token of this head's own (env RAY_AUTH_TOKEN; the job and its actors inherit it):
    the client sends it as a bearer token. Yields the head's process, the dashboard's address, the
    client's headers and the temp dir."""
    with ray_head_started(
        "mrjob-", "--include-dashboard=true", "--dashboard-host=127.0.0.1", "--dashboard-port={port0}",
        "--dashboard-agent-listen-port={port1}", "--dashboard-agent-grpc-port={port2}", "--ray-client-server-port={port3}",
        "--runtime-env-agent-port={port4}", ports=5,
    ) as head:
        yield head.process, f"http://127.0.0.1:{head.ports[0]}", {"Authorization": f"Bearer {head.token}"}, head.root


def wait_for_dashboard(client_factory, head: subprocess.Popen, address: str, headers: dict, root: str):
    """The JobSubmissionClient once the dashboard answers; skip, with Ray's reason, if it never will."""
    last = None

    def client():
        nonlocal last
        try:
            return client_factory(address, headers=headers)
        except Exception as exc:  # noqa: BLE001 - connection refused while it starts
            last = exc
            return None

    try:
        return wait_until(client, "the Ray dashboard answers", timeout_s=START_TIMEOUT_S, poll_s=0.5, while_running=head)
    except WaitTimedOut:
        pass
    reason = f"the Ray dashboard at {address} never answered ({type(last).__name__}: {last})"
    logs = sorted((Path(root) / "ray").glob("session_*/logs/dashboard.*"))
    tail = "".join(p.read_text(errors="replace")[-2000:] for p in logs if p.suffix in (".err", ".log"))
    start_log = (Path(root) / "ray-start.log").read_text(errors="replace")[-2000:]
    print(f"{reason}\n--- ray start ---\n{start_log}\n--- dashboard logs ---\n{tail}", file=sys.stderr)
    pytest.skip(f"{reason}; ray start said: {start_log.strip().splitlines()[-1] if start_log.strip() else 'nothing'}")


def test_a_batch_submitted_as_a_ray_job_predicts_every_instance(ray_head, tmp_path):
    from ray.job_submission import JobStatus, JobSubmissionClient

    head, address, headers, root = ray_head
    repos = tmp_path / "repos"
    _, base = make_calc_repo(repos / "calc__calc")
    job_dir = tmp_path / "job"  # the job's working dir: the dataset, nothing else
    job_dir.mkdir()
    lines = []
    for i in (1, 2):
        record = msgspec.to_builtins(calc_issue(repos / "calc__calc", base, BOTH_ISSUE, instance_id=f"calc__calc-{i}"))
        record.pop("repo_path")
        # a whole SWE-bench record: the gold patch and the tests that judge it come along
        record.update(patch=EXPECTED_DIFF, FAIL_TO_PASS='["tests/test_calc.py::test_mean", "tests/test_calc.py::test_shout"]',
                      PASS_TO_PASS='["tests/test_calc.py::test_median", "tests/test_calc.py::test_whisper"]')
        lines.append(json.dumps(record))
    (job_dir / "dataset.jsonl").write_text("\n".join(lines) + "\n")
    out, store = tmp_path / "results" / "preds.jsonl", tmp_path / "results" / "store"
    out.parent.mkdir()

    client = wait_for_dashboard(JobSubmissionClient, head, address, headers, root)
    team = ScriptedTeam({"calc/stats.py": [MEAN_FIX], "calc/texts.py": [SHOUT_FIX]}, delay_s=0.05)
    with ScriptedServer(team) as server:
        job = client.submit_job(
            entrypoint=(
                f"magis-ray submit dataset.jsonl --repos-dir {repos} --out {out} --store {store} "
                f"--base-url {server.base_url} --model m --workers 2 --top-k 4"
            ),
            runtime_env={"working_dir": str(job_dir), "env_vars": {"MAGIS_LOG_LEVEL": "warning"}},
        )
        ended = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED)
        try:
            status = wait_until(lambda: (s := client.get_job_status(job)) in ended and s, "the job ends",
                                timeout_s=JOB_TIMEOUT_S, poll_s=0.5)
        except WaitTimedOut:
            client.stop_job(job)
            pytest.fail(f"the job did not finish in {JOB_TIMEOUT_S} s; its logs:\n{client.get_job_logs(job)}")
        logs = client.get_job_logs(job)
        info = client.get_job_info(job)
        asked = server.count()
    assert status == JobStatus.SUCCEEDED, f"{info.message}\n{logs}"
    assert "2 instances: 2 finished; 2 patched" in logs and "Traceback" not in logs, logs
    assert asked > 0  # the job's actors reached the scripted model on this machine's loopback
    preds = [json.loads(line) for line in out.read_text().splitlines()]
    assert [p["instance_id"] for p in preds] == ["calc__calc-1", "calc__calc-2"]
    assert all(p["model_patch"] == EXPECTED_DIFF and p["model_name_or_path"] == "magis-ray/m" for p in preds)
    with open_store(str(store)) as s:
        runs = {info.run_id: s.read(info.run_id) for info in s.list_runs()}
    assert sorted(events[0].event.instance_id for events in runs.values()) == ["calc__calc-1", "calc__calc-2"]
    for events in runs.values():
        assert_consistent_log(events)
        assert isinstance(events[0].event, RunStarted) and events[0].event.settings.batch == "preds"
        assert isinstance(events[-1].event, RunFinished) and final_diff(fold(events)) == EXPECTED_DIFF
        # every actor ran on the head's node: the job joined the head's Ray, it started none of its own
        assert {r.node for r in events} == {info.driver_node_id}
