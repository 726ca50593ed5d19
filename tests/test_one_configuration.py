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
    """No setting of the suite's, nor of the user's; a Ray of the run's own, never another session's
    that `ray start --head` left on the machine (a node setting, which `config` does not show)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAGIS_", "OPENAI_"))}
    return {**env, "MAGIS_LOG_LEVEL": "warning", "MAGIS_RAY": "own", "XDG_CONFIG_HOME": "/nonexistent"}


def test_the_default_is_written_once_in_the_model():
    source = Path(settings_module.__file__).read_text()
    assert source.count(DEFAULT_LINE) == 1 and settings_module.EndpointSettings().timeout == 120.0


# config, submit, events and audit, one after the other in one process (with the default changed
# once), then resume's settings settled from a record of version 2 made of the run's own
EVERYWHERE = PREAMBLE + """
import contextlib, io, json
from magis_ray.cli.main import main

def command(*args):
    # streams with the bytes beneath them, as a process's own are (`events` writes its bytes)
    out, err = (io.TextIOWrapper(io.BytesIO(), encoding="utf-8") for _ in range(2))
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(args))
        except SystemExit as exc:
            code = exc.code
    out.flush()
    err.flush()
    return {"code": code, "out": out.buffer.getvalue().decode(), "err": err.buffer.getvalue().decode()}

example = sys.argv[1]
done = {"config": command("config", "--repo", "calc"),
        "submit": command("submit", example + "/issue.json", "--repo", "calc", "--store", "store",
                          "--llm", "scripted:" + example + "/script.json", "--tests", "off")}
if done["submit"]["code"] == 0:
    run_id = next(line.split(":", 1)[1].strip() for line in done["submit"]["out"].splitlines() if line.startswith("run:"))
    done["events"] = command("events", run_id, "--store", "store")
    done["audit"] = command("audit", run_id, "--store", "store", "--format", "json")

    # resume lays the record over the layers beneath it: a run that recorded its endpoint but not
    # (as version 2 wrote "not recorded") its timeout is given the one default
    from magis_ray.cli.config import effective_settings
    from magis_ray.cli.endpoint import Endpoint, gateway_config
    from magis_ray.cli.resume import recorded_layer
    from magis_ray.cli.settings import flag_layer
    from magis_ray.cli.submit import run_settings
    from magis_ray.events.codec import decode_recorded
    older = json.loads(done["events"]["out"].splitlines()[0])
    older["schema_version"] = 2
    older["event"]["settings"] = {"model": "scripted", "llm": {"kind": "openai", "base_url": "http://h/v1", "timeout_s": 0.0}}
    recorded = decode_recorded(json.dumps(older)).event.settings
    flags = flag_layer({})
    resumed = run_settings(effective_settings(flags, None, recorded_layer(recorded, flags)).settings)
    config = gateway_config(Endpoint("http://h/v1"), resumed)
    done["resumed"] = [recorded.endpoint.timeout, resumed.endpoint.llm, resumed.endpoint.base_url, config.endpoint.timeout]
print(json.dumps(done))
"""


def test_one_default_changed_in_its_one_place_is_seen_by_config_the_run_s_record_its_audit_and_resume(tmp_path):
    subprocess.run([sys.executable, str(EXAMPLE / "make_repo.py"), str(tmp_path / "calc")], check=True, capture_output=True)
    everywhere = subprocess.run([sys.executable, "-c", EVERYWHERE, str(EXAMPLE)], cwd=tmp_path, env=environment(),
                                capture_output=True, text=True, timeout=COMMAND_S)
    assert everywhere.returncode == 0, everywhere.stderr
    done = json.loads(everywhere.stdout.splitlines()[-1])

    shown = done["config"]
    assert shown["code"] == 0, shown["err"]
    rows = {line.split()[0]: line.split()[1:] for line in shown["out"].splitlines() if line.strip()}
    assert rows["timeout"] == ["42.0", "default"]

    assert done["submit"]["code"] == 0, done["submit"]["out"] + done["submit"]["err"]
    started = json.loads(done["events"]["out"].splitlines()[0])["event"]
    assert started["type"] == "RunStarted" and started["settings"]["endpoint"]["timeout"] == 42.0

    audit = json.loads(done["audit"]["out"])
    assert audit["instance"]["settings"]["endpoint"]["timeout"] == 42.0

    assert done["resumed"] == [42.0, "openai", "http://h/v1", 42.0]


@pytest.mark.parametrize("value", ["0", "soon"])
def test_the_changed_default_keeps_its_field_s_bounds(tmp_path, value):
    result = subprocess.run([sys.executable, "-c", COMMAND, "config"], cwd=tmp_path, env={**environment(), "MAGIS_TIMEOUT": value},
                            capture_output=True, text=True, timeout=COMMAND_S)
    assert result.returncode == 2 and f"MAGIS_TIMEOUT={value!r}: timeout must be" in result.stderr
