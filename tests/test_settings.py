"""Settings in a file: magis.toml or pyproject.toml's [tool.magis-ray] in the project, and the
user's config.toml; flags, then the environment, then the project, then the user, then the
defaults; `magis-ray config` shows each setting's source and never the key."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from commands import magis

from magis_ray.cli.settings import Layer, env_layer, flag_layer, project_layer, resolve, role_flags, user_layer, value_of
from magis_ray.events.settings import RunSettings
from magis_ray.events.errors import BadInput

KEY = "sk-never-shown-0042"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_each_layer_gives_way_to_the_one_before_it(tmp_path):
    project = Layer("project p", values={"top-k": 4, "max-files": 4, "model": "m-project", "tests": False})
    user = Layer("user u", values={"top-k": 5, "max-files": 5, "max-review-rounds": 5, "candidates": 5})
    env = env_layer({"MAGIS_MAX_FILES": "7", "MAGIS_MODEL": "m-env", "MAGIS_TIMEOUT": "30"})
    got = resolve([flag_layer({"model": "m-flag"}), env, project, user])
    assert isinstance(got.settings, RunSettings)
    assert {key: (value_of(got.settings, key), got.source(key)) for key in (
        "model", "top-k", "max-files", "max-review-rounds", "candidates", "tests", "timeout", "rpm")} == {
        "model": ("m-flag", "flag --model"),
        "top-k": (4, "project p"),
        "max-files": (7, "env MAGIS_MAX_FILES"),
        "max-review-rounds": (5, "user u"),
        "candidates": (5, "user u"),
        "tests": (False, "project p"),
        "timeout": (30.0, "env MAGIS_TIMEOUT"),
        "rpm": (0, "default"),
    }


@pytest.mark.parametrize("environ, says", [
    ({"MAGIS_TOP_K": "ten"}, "MAGIS_TOP_K='ten': top-k must be an integer"),
    ({"MAGIS_TOP_K": "0"}, "MAGIS_TOP_K='0': top-k must be at least 1"),
    ({"MAGIS_SANDBOX": "docker"}, "MAGIS_SANDBOX='docker': sandbox must be one of bwrap, none"),
    ({"MAGIS_LLM": "gpt"}, "MAGIS_LLM='gpt': llm must be one of auto, local, openai, scripted:FILE, not 'gpt'"),
    ({"MAGIS_LLM": "scripted:"}, "llm must be one of auto, local, openai, scripted:FILE, not 'scripted:'"),
    ({"MAGIS_GRADE_TIMEOUT": "soon"}, "MAGIS_GRADE_TIMEOUT='soon': grade.timeout must be a number, not 'soon'"),
    ({"MAGIS_GRADE_MEMORY": "lots"}, "grade.memory must be a size (e.g. 4G, 512M, 0 for no limit), not 'lots'"),
    ({"MAGIS_GRADE_NETWORK": "maybe"}, "grade.network must be on or off, not 'maybe'"),
])
def test_a_bad_environment_variable_is_one_line_naming_it(environ, says):
    with pytest.raises(BadInput) as caught:
        env_layer(environ)
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_magis_toml_comes_before_pyproject_and_a_script_is_found_beside_the_file(tmp_path):
    write(tmp_path / "pyproject.toml", '[project]\nname = "x"\n[tool.magis-ray]\ntop-k = 6\n')
    layer = project_layer(tmp_path)
    assert layer.values == {"top-k": 6} and layer.name == f"project {tmp_path / 'pyproject.toml'} [tool.magis-ray]"
    write(tmp_path / "magis.toml", 'top_k = 2\nllm = "scripted:model/script.json"\ntests = false\n'
                                   '[models]\ncustodian = "small"\ndeveloper = { model = "big", base-url = "http://h:1/v1" }\n')
    layer = project_layer(tmp_path)
    assert layer.values == {"top-k": 2, "llm": f"scripted:{tmp_path / 'model' / 'script.json'}", "tests": False,
                            "models.custodian": "small", "models.developer": "big", "models.developer.base-url": "http://h:1/v1"}
    assert project_layer(tmp_path / "nowhere").values == {} and project_layer(None).values == {}


@pytest.mark.parametrize("text, says", [
    ('api_key = "sk-x"', "api_key does not belong in a settings file; set OPENAI_API_KEY"),
    ('openai-api-key = "sk-x"', "does not belong in a settings file"),
    ("top-k = 'ten'", "top-k must be an integer, not 'ten'"),
    ("tests = 'sometimes'", "tests must be on or off, not 'sometimes'"),
    ("timeout = 0", "timeout must be more than 0, not 0"),
    ("rpm = -1", "rpm must be not negative, not -1"),
    ("sandbox = 'docker'", "sandbox must be one of bwrap, none, not 'docker'"),
    ("llm = 'bogus'", "llm must be one of auto, local, openai, scripted:FILE, not 'bogus'"),
    ("topk = 3", "unknown setting 'topk'"),
    ("[models]\ntester = 'm'", "[models] has no role 'tester'"),
    ("[models]\ndeveloper = { model = 'm', temperature = 1 }", "takes model and base-url, not 'temperature'"),
    ("top-k = ", "not valid TOML"),
    ("[grade]\ntimeout = 0", "grade.timeout must be more than 0, not 0"),
    ("[grade]\ntimout = 3", "[grade]: unknown setting 'timout' (known: sandbox, timeout, memory"),
    ("grade = 3", "[grade] must be a table of settings"),
])
def test_a_bad_file_is_one_line_naming_the_file(tmp_path, text, says):
    path = write(tmp_path / "magis.toml", text + "\n")
    with pytest.raises(BadInput) as caught:
        project_layer(tmp_path)
    assert str(path) in str(caught.value) and says in str(caught.value) and "\n" not in str(caught.value)


def test_the_grade_section_is_its_own_beside_a_run_s_and_holds_the_grading_s_defaults(tmp_path):
    from magis_ray.actors.swebench.grading_service import GradingOptions
    from magis_ray.events.settings import GradeSettings, size_bytes

    write(tmp_path / "magis.toml", 'timeout = 30\nsandbox = "none"\n[grade]\ntimeout = 600\nmemory = "512M"\n')
    got = resolve([flag_layer({"grade.workers": 3}), env_layer({"MAGIS_GRADE_NETWORK": "on"}), project_layer(tmp_path)])
    assert (got.settings.endpoint.timeout, got.settings.sandbox) == (30.0, "none")  # the run's own, apart
    assert got.grade == GradeSettings(timeout=600.0, memory="512M", workers=3, network=True)
    assert got.given("grade.workers") == "--workers 3" and got.given("grade.network") == "MAGIS_GRADE_NETWORK='on'"
    assert got.given("grade.sandbox") == "grade.sandbox = bwrap (default)"
    # the service holds the section whole: its defaults are the section's
    assert GradingOptions(dataset="d", repos_dir="r", store="s").grade == GradeSettings()


def test_role_models_from_flags_and_files():
    flags = flag_layer({**role_flags(("developer=big",), "--role-model"), **role_flags(("developer=http://h/v1",), "--role-base-url")})
    got = resolve([flags, env_layer({"MAGIS_MODEL_QA": "reviewer"}), Layer("p", values={"models.custodian": "small"})])
    assert [(r.role, r.model, r.base_url) for r in got.settings.endpoint.models] == [
        ("custodian", "small", ""), ("developer", "big", "http://h/v1"), ("qa", "reviewer", "")]
    with pytest.raises(BadInput, match="ROLE=VALUE"):
        role_flags(("tester=m",), "--role-model")
    with pytest.raises(BadInput, match="give the role a model"):
        resolve([env_layer({"MAGIS_BASE_URL_QA": "http://h/v1"})])


def config(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`magis-ray config ARGS` in a shell with none of the suite's settings and no key."""
    return magis("config", *args, cwd=cwd, env=env, without=("MAGIS_", "OPENAI_"), timeout=60)


def test_magis_ray_config_prints_each_setting_with_its_source_and_never_the_key(tmp_path):
    project = tmp_path / "proj"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    write(project / "magis.toml", 'model = "gpt-4o"\ntop-k = 4\n[models]\ncustodian = "gpt-4o-mini"\n[grade]\ntimeout = 600\n')
    user = write(tmp_path / "home" / "magis-ray" / "config.toml", 'top-k = 5\nmax-files = 5\nenv-setup = "pip install -e .[test]"\n')
    (project / "sub").mkdir()
    result = config(project / "sub",  # from a subfolder: the repository's root holds the project's file
                    env={"XDG_CONFIG_HOME": str(tmp_path / "home"), "MAGIS_MAX_FILES": "2", "OPENAI_API_KEY": KEY,
                         "MAGIS_SCRATCH_DIR": "/big/disk", "MAGIS_LEASE_S": "soon",
                         "MAGIS_GRADE_WORKERS": "2"})
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line.split(None, 2)[1:] for line in result.stdout.splitlines() if line and not line.endswith(":")}
    assert rows["model"] == ["gpt-4o", f"project {project.resolve() / 'magis.toml'}"]
    assert rows["top-k"] == ["4", f"project {project.resolve() / 'magis.toml'}"]
    assert rows["max-files"] == ["2", "env MAGIS_MAX_FILES"]
    assert rows["env-setup"][1].endswith(f"user {user}") and rows["env-setup"][0] == "pip"
    assert rows["max-review-rounds"] == ["3", "default"] and rows["tests"] == ["on", "default"]
    assert rows["models.custodian"] == ["gpt-4o-mini", f"project {project.resolve() / 'magis.toml'}"]
    assert [line for line in result.stdout.splitlines() if line.startswith("[")] == ["[run]", "[endpoint]", "[grade]", "[node]"]
    # the grade section: its own timeout beside the endpoint's, by its qualified key
    assert rows["grade.timeout"] == ["600.0", f"project {project.resolve() / 'magis.toml'}"]
    assert rows["grade.workers"] == ["2", "env MAGIS_GRADE_WORKERS"] and rows["grade.memory"] == ["8G", "default"]
    assert rows["timeout"] == ["120.0", "default"] and rows["use-qa"] == ["on", "default"]
    assert rows["scratch-dir"] == ["/big/disk", "env MAGIS_SCRATCH_DIR"]
    assert rows["lease-s"] == ["30.0", "default (MAGIS_LEASE_S='soon' ignored)"]
    assert "api key:  set in OPENAI_API_KEY (never shown)" in result.stdout
    assert KEY not in result.stdout + result.stderr


def test_a_key_in_a_settings_file_is_refused_and_not_echoed(tmp_path):
    write(tmp_path / "home" / "magis-ray" / "config.toml", f'api-key = "{KEY}"\n')
    result = config(tmp_path, env={"XDG_CONFIG_HOME": str(tmp_path / "home")})
    assert result.returncode == 2 and result.stderr.startswith("magis-ray: error: ") and len(result.stderr.splitlines()) == 1
    assert "set OPENAI_API_KEY" in result.stderr and KEY not in result.stderr + result.stdout


def test_a_file_on_the_user_s_machine_is_read_from_xdg_or_home(tmp_path):
    write(tmp_path / "h" / ".config" / "magis-ray" / "config.toml", "rpm = 60\n")
    assert user_layer({"HOME": str(tmp_path / "h")}).values == {"rpm": 60}
    assert user_layer({"HOME": str(tmp_path / "h"), "XDG_CONFIG_HOME": str(tmp_path / "x")}).values == {}


def test_resume_lays_the_record_by_the_settings_own_names_under_the_flags():
    from magis_ray.cli.resume import recorded_layer
    from magis_ray.events.settings import EndpointSettings, RoleModel

    recorded = RunSettings(model="gpt-4o", top_k=4, endpoint=EndpointSettings(
        llm="openai", base_url="http://h/v1", timeout=7.0, rpm=60, models=(RoleModel("qa", "judge"),)))
    layer = recorded_layer(recorded, flag_layer({}))
    assert layer.values == {"llm": "openai", "base-url": "http://h/v1", "response-format": "json_schema", "timeout": 7.0,
                            "concurrency": 8, "rpm": 60, "tpm": 0, "model": "gpt-4o", "models.qa": "judge"}
    got = resolve([flag_layer({"timeout": 9.0}), layer, env_layer({"MAGIS_RPM": "5", "MAGIS_TOP_K": "2"})])
    assert (got.settings.endpoint.timeout, got.source("timeout")) == (9.0, "flag --timeout")
    assert (got.settings.endpoint.rpm, got.source("rpm")) == (60, "record")
    assert got.settings.top_k == 2  # the team's settings resume from the run's own record, not from here
    # flags that name another endpoint: the recorded model's name and URL stay behind, its limits come along
    other = recorded_layer(recorded, flag_layer({"llm": "scripted:/s.json"}))
    assert "llm" not in other.values and "model" not in other.values and other.values["timeout"] == 7.0
    # a run from before the endpoint was recorded gives its model's name only
    assert recorded_layer(RunSettings(model="m"), flag_layer({})).values == {"model": "m"}


# A copy of the package in which the settings model says other defaults, imported instead of the
# installed one: what a grading's and a team's test runs are limited by must follow the model.
OTHER_DEFAULTS = """
import json, sys
sys.meta_path[:] = [finder for finder in sys.meta_path if "editable" not in repr(finder).lower()]
sys.path.insert(0, sys.argv[1])
from magis_ray.events.settings import GradeSettings, RunSettings
import magis_ray.events.settings
assert magis_ray.events.settings.__file__.startswith(sys.argv[1]), magis_ray.events.settings.__file__
from magis_ray.actors.runtime.bench import BenchSetup, ExecutionBench
from magis_ray.actors.swebench.grading_batch import test_runner
graded = test_runner(GradeSettings()).limits
team = ExecutionBench(BenchSetup(record={"repo": "o/n", "base_commit": "0" * 40}, repo_path=".", settings=RunSettings()))
print(json.dumps([graded.wall_seconds, graded.memory_bytes, team._runner.limits.wall_seconds, team._runner.limits.memory_bytes]))
"""


def test_a_default_changed_in_the_settings_model_is_what_test_runs_are_limited_by(tmp_path):
    """No default of a test run's limits is written twice: changed in the settings model alone, the
    limits of a grading's test runs and of a team's follow."""
    root = Path(__file__).resolve().parents[1]
    package = tmp_path / "magis_ray"
    for folder in ("actors", "events", "store", "cli"):
        shutil.copytree(root / folder, package / folder, ignore=shutil.ignore_patterns("__pycache__"))
    model = package / "events" / "settings.py"
    text = model.read_text()
    for old, new in (('timeout: Seconds = 1800.0', 'timeout: Seconds = 321.0'), ('memory: Size = "8G"', 'memory: Size = "3G"'),
                     ('test_timeout: Seconds = 600.0', 'test_timeout: Seconds = 123.0'),
                     ('test_memory: Size = "4G"', 'test_memory: Size = "2G"')):
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    model.write_text(text)
    done = subprocess.run([sys.executable, "-c", OTHER_DEFAULTS, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [321.0, 3 << 30, 123.0, 2 << 30]
