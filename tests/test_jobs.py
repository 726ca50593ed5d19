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
from scenarios import BOTH_DIFF, BOTH_ISSUE, MEAN_FIX, SHOUT_FIX, calc_issue, make_calc_repo
from waiting import GENEROUS_S, WaitTimedOut, wait_until

from magis_ray.actors.model.scripted_server import ScriptedServer
from magis_ray.actors.model.scripted_team import ScriptedTeam
from magis_ray.events.projections import final_diff, fold
from magis_ray.events.schema import RunFinished, RunStarted
from magis_ray.store import open_store

EXPECTED_DIFF = BOTH_DIFF
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


def submitted(client, head: subprocess.Popen, **job) -> str:
    """The id of the job once the dashboard takes it. On a loaded machine the head's job agent may
    not be ready when the dashboard already answers: Ray then refuses the job ("No available agent
    to submit job, please try again later") before it exists, and it is sent again."""
    def submit() -> str | None:
        try:
            return client.submit_job(**job)
        except RuntimeError as exc:
            if "No available agent to submit job" not in str(exc):
                raise
            return None

    return wait_until(submit, "the head's job agent takes the job", timeout_s=GENEROUS_S, poll_s=0.5, while_running=head)


# One instance: the job is what this shows (its working dir, its logs, the head's Ray joined); a
# batch of several instances on a joined Ray is
# test_batch.py::test_two_batches_of_one_name_started_together_predict_every_instance_once_and_report_bad_ones.
# slow: a job's `magis-ray submit` is a driver that joins the head's Ray, as test_batch.py's and the docs'
# pages' commands join the module's, and what a job changes in magis-ray (its env_vars carry the
# settings, the driver carries none) is test_shared_services.py's
# test_only_a_driver_that_joins_a_cluster_outside_a_job_carries_its_settings_and_never_a_node_s_own.
# Ray's own part, the job API with its token and the working dir's upload, runs only here.
@pytest.mark.slow
def test_a_batch_submitted_as_a_ray_job_predicts_every_instance(ray_head, tmp_path):
    from ray.job_submission import JobStatus, JobSubmissionClient

    head, address, headers, root = ray_head
    repos = tmp_path / "repos"
    _, base = make_calc_repo(repos / "calc__calc")
    job_dir = tmp_path / "job"  # the job's working dir: the dataset, nothing else
    job_dir.mkdir()
    record = msgspec.to_builtins(calc_issue(repos / "calc__calc", base, BOTH_ISSUE, instance_id="calc__calc-1"))
    record.pop("repo_path")
    # a whole SWE-bench record: the gold patch and the tests that judge it come along
    record.update(patch=EXPECTED_DIFF, FAIL_TO_PASS='["tests/test_calc.py::test_mean", "tests/test_calc.py::test_shout"]',
                  PASS_TO_PASS='["tests/test_calc.py::test_median", "tests/test_calc.py::test_whisper"]')
    (job_dir / "dataset.jsonl").write_text(json.dumps(record) + "\n")
    out, store = tmp_path / "results" / "preds.jsonl", tmp_path / "results" / "store"
    out.parent.mkdir()

    client = wait_for_dashboard(JobSubmissionClient, head, address, headers, root)
    team = ScriptedTeam({"calc/stats.py": [MEAN_FIX], "calc/texts.py": [SHOUT_FIX]})
    with ScriptedServer(team) as server:
        job = submitted(
            client, head,
            entrypoint=(
                f"magis-ray submit dataset.jsonl --repos-dir {repos} --out {out} --store {store} "
                f"--base-url {server.base_url} --model m --top-k 4"
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
    assert "1 instances: 1 finished; 1 patched" in logs and "Traceback" not in logs, logs
    assert asked > 0  # the job's actors reached the scripted model on this machine's loopback
    preds = [json.loads(line) for line in out.read_text().splitlines()]
    assert [p["instance_id"] for p in preds] == ["calc__calc-1"]
    assert all(p["model_patch"] == EXPECTED_DIFF and p["model_name_or_path"] == "magis-ray/m" for p in preds)
    with open_store(str(store)) as s:
        runs = {info.run_id: s.read(info.run_id) for info in s.list_runs()}
    assert [events[0].event.instance_id for events in runs.values()] == ["calc__calc-1"]
    for events in runs.values():
        assert_consistent_log(events)
        assert isinstance(events[0].event, RunStarted) and events[0].event.settings.batch == "preds"
        assert isinstance(events[-1].event, RunFinished) and final_diff(fold(events)) == EXPECTED_DIFF
        # every actor ran on the head's node: the job joined the head's Ray, it started none of its own
        assert {r.node for r in events} == {info.driver_node_id}
