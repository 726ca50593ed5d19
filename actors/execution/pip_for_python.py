"""`python -m magis_ray.actors.execution.pip_for_python VERSION ARGS...`: this interpreter's pip,
resolving for CPython VERSION (era.resolve_from_wheels).

pip's `--python-version` chooses wheels for that Python but decides environment markers with the
interpreter that runs it, so a dependency such as pikepdf's `lxml<5; python_version < "3.10"`
would be dropped for a Python 3.8 environment resolved from 3.11, and the environment's install
then conflicts. Here the markers see VERSION."""
from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    import pip._vendor.packaging.markers as markers
    from pip._internal.cli.main import main as pip_main

    version, arguments = argv[0], argv[1:]
    running = markers.default_environment

    def target() -> dict[str, str]:
        return {**running(), "python_version": ".".join(version.split(".")[:2]), "python_full_version": version,
                "implementation_version": version}

    markers.default_environment = target
    return pip_main(arguments)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
