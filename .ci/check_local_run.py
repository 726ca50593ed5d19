"""The quick start's run on the bundled model, checked from its log (`magis-ray events`): the log is
whole (tests/checks.py's rule), the model that answered is the bundled one and wrote tokens, and the
command's exit status matches how the run ended (0 finished, 2 failed in one error line).

Usage: check_local_run.py EVENTS.jsonl EXIT_STATUS TERMINAL.txt"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from checks import assert_consistent_log  # noqa: E402

from magis_ray.events.codec import decode_recorded  # noqa: E402
from magis_ray.events.schema import LLMExchanged, RunFailed, RunFinished  # noqa: E402

events = [decode_recorded(line) for line in Path(sys.argv[1]).read_text().splitlines() if line.strip()]
status = int(sys.argv[2])
terminal = Path(sys.argv[3]).read_text()


def fail(why: str) -> None:
    sys.exit(f"quick start: {why}\n--- terminal ---\n{terminal}")


try:
    assert_consistent_log(events)
except AssertionError as exc:
    fail(f"the log is not whole: {exc}")
exchanges = [r.event for r in events if isinstance(r.event, LLMExchanged)]
if not exchanges or any(x.model != "smollm2-135m-instruct" for x in exchanges):
    fail(f"the bundled model did not answer every exchange: {sorted({x.model for x in exchanges})}")
if sum(x.completion_tokens for x in exchanges) == 0:
    fail("the model wrote no token")
end = events[-1].event
if isinstance(end, RunFinished) and status != 0:
    fail(f"the run finished but the command exited {status}")
if isinstance(end, RunFailed) and (status != 2 or not terminal.strip().splitlines()[-1].startswith("magis-ray: error:")):
    fail(f"the run failed but the command exited {status} without one error line")
print(f"quick start: {len(exchanges)} exchanges with the bundled model, "
      f"{sum(x.completion_tokens for x in exchanges)} tokens written; the run {type(end).__name__}")
