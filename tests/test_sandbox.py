"""The sandbox against an attacker, one test per attack, through the real bubblewrap sandbox as
whoever runs the suite (root in CI), and the attacks that can be arranged again as an unprivileged
user (uid 65534). Each attack is real: it tries to escape, read, flood, fill or exhaust, and the
test checks both that it was stopped and that the host saw nothing of it; an attack on the host's
memory, that it cost the host no more than the sandbox's budget."""
from __future__ import annotations

import importlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import uuid
from pathlib import Path

import pytest
from waiting import wait_until

from magis_ray.actors.execution.sandbox import GiB, Limits, MiB, Mount, BubblewrapSandbox, Scratch, bwrap_path

pytestmark = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap (bwrap) is not installed")
ROOT = os.geteuid() == 0


@pytest.fixture
def seed(tmp_path):
    """A workspace's content: what the sandbox copies to /testbed."""
    folder = tmp_path / "seed"
    folder.mkdir()
    (folder / "README").write_text("the workspace\n")
    folder.chmod(0o755)
    return folder


def run(script: str, seed: Path | None = None, **limits) -> object:
    scratches = [Scratch("/testbed", str(seed) if seed else None)]
    return BubblewrapSandbox().run(script, cwd="/testbed", scratches=scratches, limits=Limits(**{'wall_seconds': 120, 'memory_bytes': 8 * GiB, **limits}))


def test_remount_and_mount_are_refused(seed):
    probe = f"magis-escape-{uuid.uuid4().hex}"
    outcome = run(f"""
        mount -o remount,bind,rw /usr && echo REMOUNTED
        mount -o remount,rw /etc && echo REMOUNTED
        mount -t tmpfs none /usr/local && echo MOUNTED
        unshare --user --map-root-user sh -c 'mount -o remount,rw /usr && echo NESTED-REMOUNTED'
        touch /usr/{probe} /etc/{probe} /{probe} 2>&1
        grep -i '^Cap\\(Eff\\|Prm\\|Bnd\\)' /proc/self/status
        id -u
        """, seed)
    assert "REMOUNTED" not in outcome.output and "MOUNTED" not in outcome.output
    for path in (f"/usr/{probe}", f"/etc/{probe}", f"/{probe}"):
        assert not os.path.exists(path)
    assert "Read-only file system" in outcome.output
    capabilities = [line.split()[1] for line in outcome.output.splitlines() if line.startswith("Cap")]
    assert capabilities and set(capabilities) == {"0000000000000000"}, outcome.output
    assert outcome.output.strip().splitlines()[-1] != "0"  # not root inside


def test_the_hosts_home_is_neither_readable_nor_writable(seed):
    home = Path.home()
    secret = home / f".magis-secret-{uuid.uuid4().hex}"
    secret.write_text("the host's secret\n")
    before = sorted(os.listdir(home))
    try:
        outcome = run(f"""
            cat {secret} ; ls -a {home} ; ls /home /root
            echo escaped > {home}/magis-written-{uuid.uuid4().hex}
            """, seed)
    finally:
        secret.unlink()
    assert "the host's secret" not in outcome.output
    assert "No such file or directory" in outcome.output
    assert sorted(p for p in os.listdir(home)) == [p for p in before if p != secret.name]


def test_secrets_in_files_and_in_the_environment_stay_out(seed, tmp_path, monkeypatch):
    store = tmp_path / "store"
    store.mkdir()
    (store / "events.sqlite3").write_text("sk-the-stores-secret")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-the-environments-secret")
    monkeypatch.setenv("MAGIS_API_KEY", "sk-the-environments-secret")
    outcome = run(f"""
        env; cat {store}/events.sqlite3; cat /etc/shadow
        ls /work /opt /var/lib /srv /farm 2>&1 | head -5
        """, seed)
    assert "sk-the" not in outcome.output
    assert "OPENAI_API_KEY" not in outcome.output
    if ROOT and os.path.exists("/etc/shadow"):
        assert "Permission denied" in outcome.output  # readable only by root, and the code is not root


def test_there_is_no_network_not_even_to_the_hosts_loopback(seed):
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted: list = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                accepted.append(server.accept())
            except OSError:
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()  # the server is really there
        outcome = run(f"""
            python3 -c 'import socket; socket.create_connection(("127.0.0.1", {port}), timeout=5)' 2>&1 | tail -1
            python3 -c 'import socket; print(socket.getaddrinfo("pypi.org", 443))' 2>&1 | tail -1
            """, seed)
    finally:
        stop.set()
        thread.join()
        server.close()
    assert "ConnectionRefusedError" in outcome.output and "gaierror" in outcome.output
    assert len(accepted) == 1  # only the host's own probe


FLOOD = """
import json, sys
from magis_ray.actors.execution.sandbox import GiB, Limits, BubblewrapSandbox
log = sys.argv[1]
outcome = BubblewrapSandbox().run("yes 'magis-ray flood' | head -c 2300000000; echo done", cwd="/", log_path=log,
                        limits=Limits(wall_seconds=600, memory_bytes=8 * GiB, log_bytes=64 * 1024 * 1024))
# VmHWM, not ru_maxrss: after fork and exec, ru_maxrss starts from the parent's (pytest's) peak
peak_kb = int(next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:")))
print(json.dumps({"rss_kb": peak_kb, "limits": outcome.limits,
                  "total": outcome.output_bytes, "kept": len(outcome.output), "ok": outcome.ok}))
"""


def test_an_output_flood_of_over_2_gib_leaves_the_caller_small(tmp_path):
    log = tmp_path / "flood.log"
    done = subprocess.run([sys.executable, "-c", FLOOD, str(log)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["ok"] and result["total"] >= 2 * GiB
    assert result["rss_kb"] < 300 * 1024, result  # the caller's peak RSS, whatever the code prints
    assert log.stat().st_size == 64 * MiB  # the log file stops at its cap
    assert result["kept"] <= 65 * 1024  # the head and the tail, in memory
    assert any(limit.startswith("output cut at 64 MiB") for limit in result["limits"]), result


def test_a_scratch_folder_is_the_same_folder_at_its_other_names(seed, tmp_path):
    """What is written under one name is there under the other, over the read-only folder that was
    at that name; only on disk (a folder of the sandbox's memory has no host path to bind twice)."""
    if not BubblewrapSandbox().scratch_on_disk():
        pytest.skip("scratch folders stay in memory here (no loop devices)")
    shown = tmp_path / "testbeds" / "key"
    (shown / "tree").mkdir(parents=True)
    (shown / "tree" / "original").write_text("read-only\n")
    tmp_path.chmod(0o755)
    outcome = BubblewrapSandbox().run("echo written > /testbed/new && cat tree/new tree/README && ls tree && [ tree -ef /testbed ] && echo same",
                            cwd=str(shown), mounts=[Mount(str(shown), str(shown))],
                            scratches=[Scratch("/testbed", str(seed), aliases=(str(shown / "tree"),))],
                            limits=Limits(wall_seconds=120, memory_bytes=8 * GiB))
    assert outcome.exit_code == 0, outcome.output
    assert outcome.output.split() == ["written", "the", "workspace", "README", "new", "same"]
    assert not (shown / "tree" / "new").exists()


def test_tmp_is_bounded(seed):
    outcome = run("head -c 300000000 /dev/zero > /tmp/fill; echo exit=$?; head -c 300000000 /dev/zero > /dev/shm/fill",
                  seed, tmp_bytes=64 * MiB)
    assert "No space left on device" in outcome.output and "exit=1" in outcome.output
    assert "/tmp full (64 MiB)" in outcome.limits and "/dev/shm full (64 MiB)" in outcome.limits


def test_the_workspace_is_bounded_and_the_host_disk_untouched(seed):
    outcome = run("head -c 300000000 /dev/zero > /testbed/fill; echo exit=$?", seed, scratch_bytes=64 * MiB)
    assert "No space left on device" in outcome.output and "exit=1" in outcome.output
    assert "/testbed full (64 MiB)" in outcome.limits
    assert sorted(p.name for p in seed.iterdir()) == ["README"]  # the seed is only read


def test_a_workspace_larger_than_its_limit_is_reported(tmp_path):
    big = tmp_path / "big"
    big.mkdir()
    (big / "blob").write_bytes(os.urandom(2 * MiB))
    big.chmod(0o755)
    outcome = BubblewrapSandbox().run("echo ran", cwd="/testbed", scratches=[Scratch("/testbed", str(big))],
                            limits=Limits(wall_seconds=60, memory_bytes=8 * GiB, scratch_bytes=1 * MiB))
    assert outcome.exit_code == 125 and "ran" not in outcome.output
    assert "/testbed could not be filled within 1 MiB" in outcome.limits


BOMB = """
import os, time
count = 0
try:
    while True:
        if os.fork() == 0:
            try:
                os.fork()  # every child forks again: a real bomb
            except OSError:
                pass
            time.sleep(60)
            os._exit(0)
        count += 1
except OSError as exc:
    print("fork refused:", exc, "after", count, flush=True)
    time.sleep(2)  # hold every process for a while: the host must go on meanwhile
"""


def test_a_fork_bomb_is_bounded_and_the_host_goes_on(seed, tmp_path):
    (seed / "bomb.py").write_text(BOMB)
    answers: list[int] = []
    stop = threading.Event()

    def host_keeps_forking() -> None:
        while not stop.is_set():
            answers.append(subprocess.run(["true"]).returncode)

    thread = threading.Thread(target=host_keeps_forking, daemon=True)
    thread.start()
    try:
        outcome = run("python3 bomb.py", seed, processes=128)
    finally:
        stop.set()
        thread.join()
    assert "fork refused" in outcome.output
    assert "process limit reached (128)" in outcome.limits, (outcome.limits, outcome.peak_processes)
    assert outcome.peak_processes <= 128 + 2  # bwrap's init and ours are counted too
    assert answers and set(answers) == {0}  # every host fork during the bomb worked
    assert not outcome.timed_out


def test_a_cpu_burn_is_stopped_at_its_cpu_limit(seed):
    outcome = run("python3 -c 'while True: pass'", seed, cpu_seconds=2)
    assert outcome.exit_code == 152 and not outcome.timed_out  # 128 + SIGXCPU
    assert "CPU time limit reached (2 s per process)" in outcome.limits
    assert outcome.duration_s < 60


def alive_fifo(tmp_path: Path) -> tuple[Path, int]:
    """A FIFO in a folder the sandbox may write, and the host's reading end of it: a read returns
    nothing only once every process that opened it for writing is gone."""
    shared = tmp_path / "shared"
    shared.mkdir()
    fifo = shared / "alive"
    os.mkfifo(fifo)
    fifo.chmod(0o666)  # the sandbox's uid writes it
    shared.chmod(0o777)
    return shared, os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)


def read_until_no_writer(reader: int) -> bytes:
    os.set_blocking(reader, True)
    received = b""
    while chunk := os.read(reader, 64):
        received += chunk
    return received


def test_a_daemon_left_behind_is_killed(seed, tmp_path):
    """The daemon double-forks into a session of its own and keeps a FIFO of the host open."""
    shared, reader = alive_fifo(tmp_path)
    try:
        outcome = BubblewrapSandbox().run(
            "setsid sh -c 'exec 3>/shared/alive; echo up >&3; (sleep 600 <&- >&- 2>&- &) ; exec sleep 600' "
            "</dev/null >/dev/null 2>&1 & sleep 1; echo started",
            cwd="/testbed", mounts=[Mount(str(shared), "/shared", writable=True)], scratches=[Scratch("/testbed", str(seed))],
            limits=Limits(wall_seconds=60, memory_bytes=8 * GiB))
        received = read_until_no_writer(reader)
    finally:
        os.close(reader)
    assert outcome.ok and "started" in outcome.output
    assert outcome.leftover_processes >= 1
    assert received == b"up\n"


def test_the_time_limit_kills_the_whole_tree(seed, tmp_path):
    shared, reader = alive_fifo(tmp_path)
    try:
        outcome = BubblewrapSandbox().run("sh -c 'exec 3>/shared/alive; echo up >&3; exec sleep 600' & wait",
                                cwd="/testbed", mounts=[Mount(str(shared), "/shared", writable=True)],
                                scratches=[Scratch("/testbed", str(seed))], limits=Limits(wall_seconds=3, memory_bytes=8 * GiB))
        received = read_until_no_writer(reader)
    finally:
        os.close(reader)
    assert outcome.timed_out and outcome.exit_code is None and outcome.duration_s < 60
    assert "time limit reached (3 s)" in outcome.limits
    assert received == b"up\n"


# --- the same attacks as an unprivileged user ----------------------------------------------------

UNPRIVILEGED = """
import json, os, resource, socket, sys
from magis_ray.actors.execution.sandbox import GiB, Limits, BubblewrapSandbox, Scratch
report = {"uid": os.getuid()}
sandbox = BubblewrapSandbox()
limits = Limits(wall_seconds=120, memory_bytes=8 * GiB)
o = sandbox.run("mount -o remount,rw /usr && echo REMOUNTED; unshare --user true && echo NESTED; "
                "cat " + sys.argv[1] + "; grep CapEff /proc/self/status", cwd="/", limits=limits)
report["remount"] = o.output
o = sandbox.run("env", cwd="/", env={"PATH": "/usr/bin:/bin"}, limits=limits)
report["env"] = o.output
o = sandbox.run("python3 -c 'import socket; socket.create_connection((\\"127.0.0.1\\", 9), timeout=5)' 2>&1 | tail -1",
                cwd="/", limits=limits)
report["network"] = o.output
o = sandbox.run("python3 bomb.py", cwd="/testbed", limits=Limits(wall_seconds=120, memory_bytes=8 * GiB, processes=64),
                scratches=[Scratch("/testbed", sys.argv[2])])
report["bomb"] = [o.output, list(o.limits), o.peak_processes]
o = sandbox.run("head -c 300000000 /dev/zero > /tmp/fill", cwd="/", limits=Limits(wall_seconds=120, memory_bytes=8 * GiB, tmp_bytes=64 * 1024 * 1024))
report["tmp"] = list(o.limits)
o = sandbox.run("python3 -c 'while True: pass'", cwd="/", limits=Limits(wall_seconds=120, memory_bytes=8 * GiB, cpu_seconds=2))
report["cpu"] = list(o.limits)
print(json.dumps(report))
"""

NOBODY = 65534
# The sandbox's package knows nothing of the rest of magis-ray but the node's settings and the
# errors' root (tests/test_layout.py): those and it are all an unprivileged user needs of it.
SANDBOX_PACKAGE = ("actors", "execution", "sandbox")
SANDBOX_NEEDS = ("events/settings.py", "events/errors.py")
SANDBOX_LIBRARIES = ("psutil", "msgspec")  # what those modules import beyond the standard library


@pytest.fixture
def public_tmp():
    """A temporary folder an unprivileged user can reach (pytest's own are root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="magis-unprivileged-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def as_nobody(*argv: str) -> list[str]:
    return ["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups", *argv]


@pytest.fixture
def nobody_python(public_tmp):
    """(an interpreter uid 65534 can run, the PYTHONPATH of a copy of the sandbox's own modules and
    of the libraries they import: the interpreter may be the system's, without them)."""
    if not ROOT or shutil.which("setpriv") is None:
        pytest.skip("needs root to become an unprivileged user")
    python = next((p for p in (sys.executable, shutil.which("python3"), "/usr/bin/python3")
                   if p and subprocess.run(as_nobody(p, "-c", "import sys; assert sys.version_info >= (3, 10)"),
                                           capture_output=True).returncode == 0), None)
    if python is None:
        pytest.skip("no Python >= 3.10 that uid 65534 can run")
    root = Path(__file__).resolve().parents[1]
    package = public_tmp / "pkg" / "magis_ray" / Path(*SANDBOX_PACKAGE)
    shutil.copytree(root / Path(*SANDBOX_PACKAGE), package, ignore=shutil.ignore_patterns("__pycache__"))
    for folder in (package.parent, package.parent.parent):
        (folder / "__init__.py").write_text("")
    (public_tmp / "pkg" / "magis_ray" / "events").mkdir()
    (public_tmp / "pkg" / "magis_ray" / "events" / "__init__.py").write_text("")
    for name in SANDBOX_NEEDS:
        shutil.copy(root / name, public_tmp / "pkg" / "magis_ray" / name)
    for library in SANDBOX_LIBRARIES:
        shutil.copytree(Path(importlib.import_module(library).__file__).parent, public_tmp / "pkg" / library)
    subprocess.run(["chmod", "-R", "a+rX", str(public_tmp)], check=True)
    return python, str(public_tmp / "pkg")


def test_the_attacks_fail_the_same_as_an_unprivileged_user(nobody_python, public_tmp):
    """The sandbox's own modules, run as uid 65534 by an interpreter that user can reach."""
    python, pythonpath = nobody_python
    seed = public_tmp / "seed"
    seed.mkdir()
    (seed / "bomb.py").write_text(BOMB)
    secret = Path.home() / f".magis-secret-{uuid.uuid4().hex}"
    secret.write_text("the host's secret\n")
    subprocess.run(["chmod", "-R", "a+rX", str(seed)], check=True)
    try:
        done = subprocess.run(
            as_nobody(python, "-c", UNPRIVILEGED, str(secret), str(seed)),
            capture_output=True, text=True, timeout=600, cwd="/",
            env={"PATH": "/usr/bin:/bin", "HOME": "/tmp", "PYTHONPATH": pythonpath, "OPENAI_API_KEY": "sk-secret"})
    finally:
        secret.unlink()
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["uid"] == NOBODY
    assert "REMOUNTED" not in report["remount"] and "NESTED" not in report["remount"]
    assert "the host's secret" not in report["remount"] and "CapEff:\t0000000000000000" in report["remount"]
    assert "sk-secret" not in report["env"]
    assert "ConnectionRefusedError" in report["network"] or "Network is unreachable" in report["network"]
    assert "/tmp full (64 MiB)" in report["tmp"]
    assert "CPU time limit reached (2 s per process)" in report["cpu"]
    output, limits, peak = report["bomb"]
    assert "fork refused" in output and "process limit reached (64)" in limits and peak <= 64 + 2, report["bomb"]


# --- the host's memory: one budget per sandbox -----------------------------------------------------
# Each attack runs in a process of its own (as root, or as uid 65534), which measures what the
# sandbox cost the host: how far the host's available memory fell below what it was at the start
# (and, where that process is in a memory cgroup, how far what the kernel charged to it rose).

MEMORY_ATTACK = r"""
import json, sys, threading, time
from pathlib import Path
from magis_ray.actors.execution.sandbox.memory_budget import own_place
from magis_ray.actors.execution.sandbox import GiB, Limits, BubblewrapSandbox, Scratch

def available():
    with open("/proc/meminfo") as meminfo:
        return next(int(line.split()[1]) * 1024 for line in meminfo if line.startswith("MemAvailable:"))

PLACE = own_place(Path("/proc/self/cgroup").read_text(), Path("/proc/self/mountinfo").read_text())

def charged():
    # What the kernel charges to this process's memory cgroup and those beneath (the sandbox's):
    # anonymous memory and tmpfs, which cannot be reclaimed (its statistics may lag a moment behind
    # a fast allocation, never a held one). 0 without a memory cgroup.
    names = ("total_rss", "total_shmem") if PLACE and PLACE.version == 1 else ("anon", "shmem")
    try:
        lines = (PLACE.folder / "memory.stat").read_text().splitlines() if PLACE else []
    except OSError:
        return 0
    return sum(int(line.split()[1]) for line in lines if line.split()[0] in names)

HOLD = "import time; hog = b'1' * (1536 * 1024 ** 2); print('holding', len(hog), flush=True); time.sleep(60)"
ATTACKS = {  # each holds what it took for a while, where the measures see it
    "tmp": "head -c 2G /dev/zero > /tmp/fill; echo exit=$?; sleep 2",
    "workspace": "head -c 2G /dev/zero > /testbed/fill; echo exit=$?; sleep 2",
    "three": f"for n in 1 2 3; do python3 -c \"{HOLD}\" & done; wait; echo all ended",
}
attack, control, budget, scratch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
start = lowest = available()
charged_at_start = highest = charged()
done = threading.Event()

def watch():
    global lowest, highest
    while not done.wait(0.01):
        lowest, highest = min(lowest, available()), max(highest, charged())

watcher = threading.Thread(target=watch)
watcher.start()
try:
    outcome = BubblewrapSandbox(memory_control=control).run(
        ATTACKS[attack], cwd="/testbed", scratches=[Scratch("/testbed")],
        limits=Limits(wall_seconds=300, memory_bytes=budget, tmp_bytes=scratch, scratch_bytes=scratch))
finally:
    done.set()
    watcher.join()
# The host's available memory also moves with whatever else the machine runs (other users' work);
# what the kernel charged to this process's cgroup moves with this process's own work alone. The
# sandbox's cost shows in both; the lower of the two leaves out the noise that only one of them has.
measures = {"available": start - lowest, **({"charged": highest - charged_at_start} if PLACE else {})}
print(json.dumps({"cost": min(measures.values()), "measures": measures, "limits": list(outcome.limits), "control": outcome.memory_control,
                  "scratch": outcome.scratch, "peak": outcome.peak_memory_bytes, "output": outcome.output[-2000:],
                  "pid": __import__("os").getpid()}))
"""
MARGIN = 512 * MiB  # what the host may lose beyond the budget: the kernel's and the watchdog's lag, and the noise
# (budget, size of /tmp and of the workspace) by attack. A filling attack writes more than its scratch
# holds, and the scratch holds MARGIN more than the host may lose (budget + MARGIN): a scratch kept
# in memory and left out of the budget would fail the test. The three processes hold 4.5 GiB.
SIZES = {"tmp": (512 * MiB, 1536 * MiB), "workspace": (512 * MiB, 1536 * MiB), "three": (2 * GiB, 3 * GiB)}
EXPECTED = {  # the limit each attack runs into, by where the scratch is
    ("tmp", "disk"): "/tmp full (1.5 GiB)", ("workspace", "disk"): "/testbed full (1.5 GiB)",
    ("three", "disk"): "memory limit reached (2 GiB)",
    ("tmp", "memory"): "memory limit reached (512 MiB)", ("workspace", "memory"): "memory limit reached (512 MiB)",
    ("three", "memory"): "memory limit reached (2 GiB)",
}


def own_memory_cgroup() -> Path | None:
    from magis_ray.actors.execution.sandbox.memory_budget import own_place

    place = own_place(Path("/proc/self/cgroup").read_text(), Path("/proc/self/mountinfo").read_text())
    return place.folder if place is not None else None


def attack_through_the_sandbox(attack: str, control: str, scratch_dir: Path, wrap=(), env=None) -> dict:
    environment = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "HOME": "/tmp", "MAGIS_SCRATCH_DIR": str(scratch_dir), **(env or {})}
    command = [environment.pop("PYTHON", sys.executable), "-c", MEMORY_ATTACK, attack, control, *map(str, SIZES[attack])]
    done = subprocess.run([*wrap, *command], capture_output=True, text=True, timeout=600, cwd="/", env=environment)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def assert_held(result: dict, attack: str, control: str) -> None:
    budget, _ = SIZES[attack]
    assert EXPECTED[(attack, result["scratch"])] in result["limits"], result
    assert result["control"] == control, result
    # The lower of the two measures, and the one that only this test's own work moves on its own.
    assert result["cost"] <= budget + MARGIN, f"the host lost {result['cost'] / GiB:.2f} GiB: {result}"
    assert result["measures"].get("charged", 0) <= budget + MARGIN, result
    # what the cgroup or the watchdog saw: it really got to the budget, and not far past it
    assert result["peak"] <= budget + MARGIN, result
    if any(limit.startswith("memory limit reached") for limit in result["limits"]):
        assert result["peak"] >= budget - 64 * MiB, result
    assert "all ended" not in result["output"] or attack != "three"


def nothing_left(scratch_dir: Path, pid: int, cgroups: Path | None) -> None:
    """The attack's cgroup is gone, and so are its images and their loop devices."""
    if cgroups is not None:
        assert not list(cgroups.glob(f"magis-sandbox-{pid}-*"))
    assert not list(scratch_dir.iterdir())

    def loops_of_the_attack() -> list[str]:
        listed = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout if shutil.which("losetup") else ""
        return [line for line in listed.splitlines() if str(scratch_dir) in line]

    wait_until(lambda: not loops_of_the_attack(), "the attack's loop devices to be freed")


def expected_control(unprivileged: bool = False) -> str:
    from magis_ray.actors.execution.sandbox.memory_budget import find_place, why_no_cgroup

    if unprivileged or why_no_cgroup():
        return "watchdog"
    return f"cgroup v{find_place()[0].version}"


@pytest.mark.parametrize("attack", ["tmp", "workspace", "three"])
def test_a_memory_attack_costs_the_host_at_most_its_budget(attack, tmp_path):
    """As whoever runs the suite (root in CI: a cgroup of its own, scratch on disk)."""
    scratch_dir = tmp_path / "scratch"
    scratch_dir.mkdir()
    control = expected_control()
    result = attack_through_the_sandbox(attack, "auto", scratch_dir)
    assert_held(result, attack, control)
    nothing_left(scratch_dir, result["pid"], own_memory_cgroup())


def test_three_processes_over_the_budget_are_ended_by_the_watchdog_too(tmp_path):
    """What a machine without a cgroup for it gets (cgroup v2 without delegation, say)."""
    scratch_dir = tmp_path / "scratch"
    scratch_dir.mkdir()
    result = attack_through_the_sandbox("three", "watchdog", scratch_dir)
    assert_held(result, "three", "watchdog")
    nothing_left(scratch_dir, result["pid"], own_memory_cgroup())


@pytest.mark.parametrize("attack", ["tmp", "workspace", "three"])
def test_a_memory_attack_costs_the_host_at_most_its_budget_as_an_unprivileged_user(attack, nobody_python, public_tmp):
    """uid 65534: no cgroup of its own here and no filesystem images: scratch in memory, counted
    in the budget, which the watchdog holds."""
    python, pythonpath = nobody_python
    scratch_dir = public_tmp / "scratch"
    scratch_dir.mkdir(mode=0o777)
    scratch_dir.chmod(0o777)
    result = attack_through_the_sandbox(attack, "auto", scratch_dir, wrap=as_nobody(),
                                        env={"PYTHON": python, "PYTHONPATH": pythonpath})
    assert result["scratch"] == "memory"
    assert_held(result, attack, expected_control(unprivileged=True))
    nothing_left(scratch_dir, result["pid"], own_memory_cgroup())


@pytest.fixture
def delegated_cgroup():
    """A memory cgroup beneath ours, given to uid 65534 (as a cgroup v2 host delegates one)."""
    parent = own_memory_cgroup() if ROOT else None
    if parent is None or not (parent / "memory.limit_in_bytes").exists() or not os.access(parent, os.W_OK):
        pytest.skip("needs root and a cgroup v1 memory hierarchy to delegate from")
    folder = parent / f"magis-test-delegated-{uuid.uuid4().hex[:12]}"
    folder.mkdir()
    subprocess.run(["chown", "-R", f"{NOBODY}:{NOBODY}", str(folder)], check=True)
    yield folder
    wait_until(lambda: not (folder / "cgroup.procs").read_text().split(), "the delegated cgroup to empty")
    left = [child.name for child in folder.iterdir() if child.is_dir()]
    folder.rmdir()
    assert not left, f"cgroups left behind: {left}"


def test_an_unprivileged_user_with_a_delegated_cgroup_gets_the_kernels_budget(delegated_cgroup, nobody_python, public_tmp):
    python, pythonpath = nobody_python
    scratch_dir = public_tmp / "scratch"
    scratch_dir.mkdir(mode=0o777)
    scratch_dir.chmod(0o777)
    enter = ["sh", "-c", f'echo $$ > {delegated_cgroup}/cgroup.procs && exec "$@"', "enter"]
    result = attack_through_the_sandbox("three", "auto", scratch_dir, wrap=[*enter, *as_nobody()],
                                        env={"PYTHON": python, "PYTHONPATH": pythonpath})
    assert_held(result, "three", "cgroup v1")
    nothing_left(scratch_dir, result["pid"], delegated_cgroup)


# --- where the budget comes from, on each kind of host ---------------------------------------------

MOUNTINFO_V1 = """\
25 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
30 25 0:26 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 30 0:32 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
MOUNTINFO_V2 = """\
25 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
30 25 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate
"""
MOUNTINFO_CONTAINER = """\
25 1 0:50 / / rw - overlay overlay rw
31 25 0:31 /docker/abc /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory
"""


def test_the_memory_controllers_cgroup_is_found_on_each_kind_of_host():
    from magis_ray.actors.execution.sandbox.memory_budget import CgroupPlace, own_place

    hybrid = "4:memory:/process_api/abc\n1:cpu:/\n0::/\n"
    assert own_place(hybrid, MOUNTINFO_V1) == CgroupPlace(1, Path("/sys/fs/cgroup/memory/process_api/abc"))
    # v1 with memory bound to it: the unified hierarchy has no memory controller to offer
    assert own_place("0::/user.slice\n4:cpu:/\n", MOUNTINFO_V1) is None
    assert own_place("0::/user.slice/user-1000.slice/session-2.scope\n", MOUNTINFO_V2) == \
        CgroupPlace(2, Path("/sys/fs/cgroup/user.slice/user-1000.slice/session-2.scope"))
    # a container's view: its cgroup is the mount's root
    assert own_place("6:memory:/docker/abc\n", MOUNTINFO_CONTAINER) == CgroupPlace(1, Path("/sys/fs/cgroup/memory"))
    assert own_place("6:memory:/elsewhere\n", MOUNTINFO_CONTAINER) is None
    assert own_place("", MOUNTINFO_V2) is None


@pytest.mark.parametrize("version", [1, 2])
def test_a_kill_between_two_looks_still_reports_the_kernels_peak(tmp_path, version):
    """The kernel keeps its own high-water mark; a sandbox killed between two of our looks reports
    it, and one that was not killed reports only what could not be reclaimed (no file cache)."""
    from magis_ray.actors.execution.sandbox.memory_budget import CgroupBudget, CgroupPlace

    budget = CgroupBudget(CgroupPlace(version, tmp_path), 2 * GiB)
    folder = budget.folder
    if version == 1:
        stat, kills, high_water = "total_rss {}\ntotal_shmem 0\ntotal_cache 0\n", "memory.oom_control", "memory.max_usage_in_bytes"
    else:
        stat, kills, high_water = "anon {}\nshmem 0\nfile 0\n", "memory.events", "memory.peak"
    (folder / "memory.stat").write_text(stat.format(300 * MiB))
    (folder / high_water).write_text(str(1900 * MiB))  # its file cache, before any kill
    (folder / kills).write_text("oom_kill 0\n")
    assert not budget.over(os.getpid()) and budget.peak == 300 * MiB
    (folder / "memory.stat").write_text(stat.format(100 * MiB))  # what was left after the kill
    (folder / high_water).write_text(str(2 * GiB))
    (folder / kills).write_text("oom_kill 1\n")
    assert budget.over(os.getpid()) and budget.peak == 2 * GiB
    for name in ("memory.stat", high_water, kills, "memory.limit_in_bytes", "memory.memsw.limit_in_bytes",
                 "memory.max", "memory.swap.max", "memory.oom.group"):
        (folder / name).unlink(missing_ok=True)
    budget.close()
    assert not folder.exists()


def test_a_v2_cgroup_without_memory_for_its_children_gives_the_watchdog(tmp_path, monkeypatch):
    """cgroup v2 lets a cgroup with processes in it give no controller to its children: unless
    one is delegated (memory in cgroup.subtree_control), the watchdog holds the budget."""
    from magis_ray.actors.execution.sandbox.memory_budget import WatchdogBudget, find_place, open_budget

    folder = tmp_path / "delegated"
    folder.mkdir()
    (folder / "cgroup.controllers").write_text("cpu io memory pids\n")
    (folder / "cgroup.subtree_control").write_text("cpu\n")
    monkeypatch.setenv("MAGIS_SANDBOX_CGROUP", str(folder))
    place, why = find_place()
    assert place is None and "memory controller is not enabled for the children" in why
    assert isinstance(open_budget(GiB), WatchdogBudget)
    (folder / "cgroup.subtree_control").write_text("cpu memory\n")
    assert find_place()[0].version == 2
    monkeypatch.setenv("MAGIS_SANDBOX_CGROUP", str(tmp_path))
    assert "not a cgroup folder" in find_place()[1]


def test_the_workers_are_lowered_to_what_the_machines_memory_holds():
    from magis_ray.actors.execution.sandbox.memory_budget import host_memory, workers_within_memory

    host = host_memory()
    assert host > 0
    assert workers_within_memory(2, host // 4) == (2, "")
    workers, note = workers_within_memory(5, host // 2)
    assert workers == 2 and note.startswith("--workers 5 at a memory budget of ") and "2 at once instead" in note
    assert workers_within_memory(1, host + GiB)[0] == 0
    assert workers_within_memory(3, 0) == (3, "")  # no budget, no check


def test_the_watchdog_counts_the_pages_a_fork_shares_once(seed):
    """1.2 GiB shared by a parent and its forked child: 2.4 GiB of resident sets, but 1.2 GiB held,
    within a 2 GiB budget."""
    share = ("import os, time; hog = b'1' * (1200 * 1024 ** 2); child = os.fork()\n"
             "if child == 0:\n    time.sleep(2); os._exit(0)\n"
             "os.waitpid(child, 0); print('both held it', len(hog))")
    (seed / "share.py").write_text(share)
    outcome = BubblewrapSandbox(memory_control="watchdog").run("python3 share.py", cwd="/testbed", scratches=[Scratch("/testbed", str(seed))],
                                                     limits=Limits(wall_seconds=120, memory_bytes=2 * GiB))
    assert outcome.ok and "both held it" in outcome.output, (outcome.limits, outcome.output)
    assert not outcome.limits and 1.1 * GiB < outcome.peak_memory_bytes < 2 * GiB
