"""A testbed's interpreter prefix, and what its install runs with in it.

Why a prefix and not a venv: the harness's conda environment is a real prefix, and tools rely on
it. tox-current-env (sphinx's test command) links `.tox/py39/bin/python` to sys.executable; a link
to a venv's python starts the base interpreter without the venv (Python looks for pyvenv.cfg
beside the link), while a link to a prefix's python finds its prefix. The prefix sees the
environment's packages through a .pth file that adds the environment's site-packages after its
own, and carries the environment's console scripts with their first line pointing at its own
interpreter (`pytest`, `tox` then run with the testbed's packages). Its standard library is the
interpreter's own files, linked (read-only to the sandbox's users); a system interpreter (under
/usr, laid out by its distribution) gets a venv instead.

While its install runs, the prefix carries two hooks, each started by a .pth line (every Python
process of the install reads the .pth files): the install's trace (install_trace_hook.py) and the
node's cache of Cython's generated C (cython_cache_hook.py). Test runs and other testbeds never see
them."""
from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from magis_ray.actors.execution.environments import BuildFailed, Environment
from magis_ray.actors.execution.environments.dated import requirement_name
from magis_ray.actors.execution.sandbox.identities import build_identity, give_to

TRACE = "trace"  # the install's trace (install_trace_hook.py), in the testbed's folder
TRACE_HOOK = "_magis_install_trace"
CYTHON_HOOK = "_magis_cython_cache"  # cython_cache_hook.py, beside the trace hook while an install runs
HOOKED_ROOT = "/testbed"  # where the install sees the tree: what the trace watches


def make_prefix(base: Path, prefix: Path) -> None:
    """An interpreter prefix at `prefix` made of `base`'s files, hard-linked (copied across file
    systems): its binaries and links under bin/ and lib/, its standard library, and an empty
    site-packages. Scripts (pip, idle) and installed packages stay behind."""
    def place(source: Path, target: Path) -> None:
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
            return
        try:
            os.link(source, target)
        except OSError:  # another file system
            shutil.copy2(source, target)

    prefix.mkdir()
    for top in ("bin", "lib", "include"):
        origin = base / top
        if not origin.is_dir():
            continue
        for folder, folders, files in os.walk(origin):
            here = Path(folder)
            relative = here.relative_to(base)
            (prefix / relative).mkdir(exist_ok=True)
            if here.name == "site-packages" and here.parent.parent.name == "lib":
                folders[:] = []
                continue
            for name in folders:
                if (here / name).is_symlink():
                    place(here / name, prefix / relative / name)
            folders[:] = [name for name in folders if not (here / name).is_symlink()]
            for name in files:
                source = here / name
                if top == "bin" and not source.is_symlink() and source.read_bytes()[:2] == b"#!":
                    continue  # a script of the base's own (pip, idle): not this prefix's
                place(source, prefix / relative / name)


def chain(env: Environment, prefix: Path) -> None:
    """Make the interpreter at `prefix` see the environment's packages and carry its console scripts."""
    site = Path(site_packages_of(prefix))
    base = next((Path(env.venv) / "lib").glob("python*/site-packages"), None)
    if base is None:
        raise BuildFailed("prefix", f"no site-packages in {env.venv}")
    # site.addsitedir, not a bare path: the environment's own .pth files (editable installs,
    # setuptools' distutils shim) must be read too, and after the testbed's. sys.real_prefix (the
    # mark of a virtualenv) makes pip treat the environment's packages as outside this prefix:
    # it installs another version here rather than uninstall one there.
    # Not inside pip's isolated build environments (their PYTHONPATH names pip-build-env-*): their
    # sitecustomize hides this interpreter's own site-packages, but not what a .pth adds, so the
    # environment's setuptools would build in place of the one the project asks for (pylint 2.15
    # asks for setuptools~=62.6 and gets a setup.py develop; 3.0 for ~=66.1 and its metadata).
    (site / "_magis_environment.pth").write_text(
        f"import os, site, sys; 'pip-build-env-' in os.environ.get('PYTHONPATH', '') or "
        f"(site.addsitedir({str(base)!r}), setattr(sys, 'real_prefix', {env.interpreter_prefix!r}))\n")
    own_bin, base_bin = prefix / "bin", Path(env.venv) / "bin"
    own_python = next((own_bin / name for name in (f"python{env.python_version.rsplit('.', 1)[0]}", "python3", "python")
                       if (own_bin / name).exists()), own_bin / "python")
    for name in ("python", "python3"):
        if not (own_bin / name).exists() and not (own_bin / name).is_symlink():
            (own_bin / name).symlink_to(own_python.name)
    for script in base_bin.iterdir():
        target = own_bin / script.name
        if target.exists() or target.is_symlink() or script.is_symlink() or not script.is_file():
            continue
        head = script.read_bytes()[:512]
        if not head.startswith(b"#!") or str(base_bin).encode() not in head:
            continue
        lines = script.read_bytes().split(b"\n", 3)
        lines[:3] = [line.replace(f"{base_bin}/python".encode(), str(own_python).encode()) for line in lines[:3]]
        target.write_bytes(b"\n".join(lines))
        target.chmod(0o755)


def site_packages_of(prefix: Path) -> str:
    found = next((Path(prefix) / "lib").glob("python*/site-packages"), None)
    if found is None:
        raise BuildFailed("prefix", f"no site-packages in {prefix}")
    return str(found)


def give_own_files(folder: Path, identity) -> None:
    """The build's uid may write in `folder`: the folder and the files made for it become its own,
    never a file linked from the interpreter (its owner is the interpreter's, read-only)."""
    if not identity.drop:
        return
    os.chown(folder, identity.uid, identity.gid)
    for root, folders, files in os.walk(folder):
        for name in (*folders, *files):
            path = os.path.join(root, name)
            info = os.lstat(path)
            if os.path.islink(path) or info.st_nlink == 1 or os.path.isdir(path):
                os.chown(path, identity.uid, identity.gid, follow_symlinks=False)


def readable_by_all(root: Path) -> None:
    """Every file readable and every folder enterable by anyone (git writes some files 0600)."""
    for folder, folders, files in os.walk(root):
        for name in folders:
            path = os.path.join(folder, name)
            os.chmod(path, os.stat(path).st_mode | 0o555)
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                os.chmod(path, os.stat(path).st_mode | 0o444)


def installed_names(venv: str) -> set[str]:
    """The distributions a virtual environment has (normalized names)."""
    site = next((Path(venv) / "lib").glob("python*/site-packages"), None)
    if site is None:
        return set()
    return {requirement_name(entry.name.split("-")[0]) for entry in site.iterdir()
            if entry.name.endswith((".dist-info", ".egg-info"))}


def start_hooks(folder: Path, prefix: Path, cython_cache: Path) -> None:
    """The install's hooks in the prefix while its install runs, each started by its .pth line
    (every Python process of the install reads the .pth files): the trace hook, with where to
    write and what to watch, and the hook that gives Cython the node's cache of generated C."""
    site = Path(site_packages_of(prefix))
    here = Path(__file__).parent
    shutil.copy(here / "install_trace_hook.py", site / f"{TRACE_HOOK}.py")
    (site / f"{TRACE_HOOK}.pth").write_text(f"import {TRACE_HOOK}; {TRACE_HOOK}.start({str(folder / TRACE)!r}, [{HOOKED_ROOT!r}])\n")
    shutil.copy(here / "cython_cache_hook.py", site / f"{CYTHON_HOOK}.py")
    (site / f"{CYTHON_HOOK}.pth").write_text(f"import {CYTHON_HOOK}; {CYTHON_HOOK}.start({str(cython_cache)!r})\n")


def stop_hooks(prefix: Path) -> None:
    """The prefix without the install's hooks: test runs and other testbeds never see them."""
    site = Path(site_packages_of(prefix))
    for hook in (TRACE_HOOK, CYTHON_HOOK):
        for path in (site / f"{hook}.py", site / f"{hook}.pth", *(site / "__pycache__").glob(f"{hook}.*")):
            path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        (site / "__pycache__").rmdir()  # only when the hooks' was all it held


def writable_by_builds(folder: Path) -> None:
    """A cache folder of the node's that the builds' uid writes into."""
    identity = build_identity()
    if identity.drop and folder.stat().st_uid != identity.uid:
        give_to(folder, identity)
