"""One configuration: a setting's default is written in one place (events/settings.py), and
changing it there changes it everywhere: `magis-ray config`, the record a run writes, the audit
of that run, and what resume gives a run that did not record it.

The default is changed as a user of the code would change it, by editing its one line: each
command runs with events/settings.py's source, one default replaced, loaded in place of the
module before anything else imports it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import magis_ray.events.settings as settings_module
from waiting import COMMAND_S

EXAMPLE = Path(__file__).parents[1] / "examples" / "calc"
DEFAULT_LINE = "timeout: Seconds = 120.0"
CHANGED_LINE = "timeout: Seconds = 42.0"
# Run the magis-ray command, or a script, with the one default line changed
PREAMBLE = f"""
import sys, types
from pathlib import Path
import magis_ray.events
path = Path(magis_ray.events.__file__).with_name("settings.py")
source = path.read_text()
assert source.count({DEFAULT_LINE!r}) == 1
module = types.ModuleType("magis_ray.events.settings")
module.__file__ = str(path)
sys.modules[module.__name__] = module
exec(compile(source.replace({DEFAULT_LINE!r}, {CHANGED_LINE!r}), str(path), "exec"), module.__dict__)
magis_ray.events.settings = module
"""
COMMAND = PREAMBLE + "from magis_ray.cli.main import main\nmain(sys.argv[1:])\n"


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAGIS_", "OPENAI_"))}
    return {**env, "MAGIS_LOG_LEVEL": "warning", "XDG_CONFIG_HOME": "/nonexistent"}


def magis(args: list[str], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", COMMAND, *args], cwd=cwd, env=environment(), capture_output=True,
                          text=True, timeout=timeout)


def test_the_default_is_written_once_in_the_model():
    source = Path(settings_module.__file__).read_text()
    assert source.count(DEFAULT_LINE) == 1 and settings_module.EndpointSettings().timeout == 120.0


def test_one_default_changed_in_its_one_place_is_seen_by_config_the_run_s_record_its_audit_and_resume(tmp_path):
    subprocess.run([sys.executable, str(EXAMPLE / "make_repo.py"), str(tmp_path / "calc")], check=True, capture_output=True)

    shown = magis(["config", "--repo", "calc"], tmp_path)
    assert shown.returncode == 0, shown.stderr
    rows = {line.split()[0]: line.split()[1:] for line in shown.stdout.splitlines() if line.strip()}
    assert rows["timeout"] == ["42.0", "default"]

    done = magis(["submit", str(EXAMPLE / "issue.json"), "--repo", "calc", "--store", "store",
                  "--llm", f"scripted:{EXAMPLE / 'script.json'}", "--tests", "off"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    run_id = next(line.split(":", 1)[1].strip() for line in done.stdout.splitlines() if line.startswith("run:"))

    events = magis(["events", run_id, "--store", "store"], tmp_path)
    started = json.loads(events.stdout.splitlines()[0])["event"]
    assert started["type"] == "RunStarted" and started["settings"]["endpoint"]["timeout"] == 42.0

    audit = json.loads(magis(["audit", run_id, "--store", "store", "--format", "json"], tmp_path).stdout)
    assert audit["instance"]["settings"]["endpoint"]["timeout"] == 42.0

    # resume lays the record over the layers beneath it: a run that recorded its endpoint but not
    # (as version 2 wrote "not recorded") its timeout is given the one default
    older = json.loads(events.stdout.splitlines()[0])
    older["schema_version"] = 2
    older["event"]["settings"] = {"model": "scripted", "llm": {"kind": "openai", "base_url": "http://h/v1", "timeout_s": 0.0}}
    script = PREAMBLE + f"""
from magis_ray.cli.config import effective_settings
from magis_ray.cli.endpoint import Endpoint, gateway_config
from magis_ray.cli.resume import recorded_layer
from magis_ray.cli.settings import flag_layer
from magis_ray.cli.submit import run_settings
from magis_ray.events.codec import decode_recorded
recorded = decode_recorded({json.dumps(older)!r}).event.settings
flags = flag_layer({{}})
resumed = run_settings(effective_settings(flags, None, recorded_layer(recorded, flags)).settings)
config = gateway_config(Endpoint("http://h/v1"), resumed)
print(recorded.endpoint.timeout, resumed.endpoint.llm, resumed.endpoint.base_url, config.endpoint.timeout)
"""
    resumed = subprocess.run([sys.executable, "-c", script], env=environment(), capture_output=True, text=True, timeout=COMMAND_S)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.split() == ["42.0", "openai", "http://h/v1", "42.0"]


@pytest.mark.parametrize("value", ["0", "soon"])
def test_the_changed_default_keeps_its_field_s_bounds(tmp_path, value):
    result = subprocess.run([sys.executable, "-c", COMMAND, "config"], cwd=tmp_path, env={**environment(), "MAGIS_TIMEOUT": value},
                            capture_output=True, text=True, timeout=COMMAND_S)
    assert result.returncode == 2 and f"MAGIS_TIMEOUT={value!r}: timeout must be" in result.stderr
