"""What a recipe needs of the machine itself, which no environment installs: the Debian packages a
SWE-bench spec installs in its image (apt-get), and the locales it generates. A test run sees this
machine's; one that lacks them is unsupported, named with the command that adds them."""
from __future__ import annotations

import re
import shlex
import subprocess

from .recipe import EnvironmentUnsupported


class SystemPackagesMissing(EnvironmentUnsupported):
    pass


def system_packages_of(command: str) -> tuple[str, ...] | None:
    """The Debian packages an `apt-get install` command installs (None: it is no such command)."""
    if "apt-get" not in command and "apt " not in command:
        return None
    found: list[str] = []
    for part in re.split(r"&&|;", command):
        words = shlex.split(part)
        while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=\S*", words[0]):  # DEBIAN_FRONTEND=noninteractive apt-get ...
            words = words[1:]
        if "install" in words and words and words[0] in ("apt-get", "apt"):
            found += [w for w in words[words.index("install") + 1:] if not w.startswith("-")]
    return tuple(found)


def missing_system_packages(packages: tuple[str, ...]) -> list[str]:
    """The Debian packages of `packages` that this machine has not installed, nor any installed
    package provides (Debian's libfreetype-dev provides the libfreetype6-dev a spec names)."""
    if not packages:
        return []
    listed = subprocess.run(["dpkg-query", "-W", "-f=${Package}\t${Status}\t${Provides}\n"], capture_output=True, text=True)
    present: set[str] = set()
    for line in listed.stdout.splitlines():
        name, status, provides = (line.split("\t") + ["", ""])[:3]
        if "install ok installed" in status:
            present.add(name.split(":")[0])
            present.update(p.strip().split(" ")[0].split(":")[0] for p in provides.split(",") if p.strip())
    return [p for p in packages if p not in present]


def check_system_packages(packages: tuple[str, ...]) -> None:
    missing = missing_system_packages(packages)
    if missing:
        raise SystemPackagesMissing(f"needs system packages not on this machine: {', '.join(missing)} "
                                    f"(apt-get install {' '.join(missing)})")


def locale_name(name: str) -> str:
    """`locale -a` spells en_US.UTF-8 as en_US.utf8."""
    return name.lower().replace("utf-8", "utf8")


def check_system_locales(locales: tuple[str, ...]) -> None:
    """The spec generates these locales in its image (locale-gen); a test run sees this machine's."""
    if not locales:
        return
    listed = subprocess.run(["locale", "-a"], capture_output=True, text=True)
    present = {locale_name(line.strip()) for line in listed.stdout.splitlines()}
    missing = [name for name in locales if locale_name(name) not in present]
    if missing:
        names = " ".join(missing)
        patterns = [name.replace(".", "[.]") for name in missing]
        setup = "; ".join(f"sed -i '/^# *{pattern} /s/^# *//' /etc/locale.gen" for pattern in patterns)
        prefix = "apt-get install locales && " if missing_system_packages(("locales",)) else ""
        raise SystemPackagesMissing(f"needs the locale {names}, which this machine has not generated "
                                    f"({prefix}{setup} && locale-gen)")
