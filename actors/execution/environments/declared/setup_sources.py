"""setuptools' own places, read last: setup.cfg's `[options.extras_require]` and `tests_require`,
and setup.py's `extras_require` (its literals, or a requirement file it reads) and `tests_require`;
and in both, `setup_requires`: what setuptools fetches itself when it builds the project, at
today's releases and outside any constraint, unless the environment already holds it."""
from __future__ import annotations

from .project import Project
from .requirement_files import RequirementFile
from .result import BUILD, TEST, Source
from .roles import roles
from .values import ini_value, lines, strings


def setup_cfg_sources(project: Project) -> list[Source]:
    setup_cfg = project.setup_cfg
    if setup_cfg is None:
        return []
    sources = []
    if setup_cfg.has_section("options.extras_require"):
        declared = dict(setup_cfg.items("options.extras_require"))
        for name, role in roles(declared).items():
            where = f"setup.cfg [options.extras_require] {name}"
            sources.append(project.source(where, "setup-cfg", role, project.valid(lines(declared[name]), where),
                                          [name.split(":")[0]], through_extras=True))
    tests_require = ini_value(setup_cfg, "options", "tests_require")
    if tests_require:
        sources.append(project.source("setup.cfg [options] tests_require", "setup-cfg", TEST,
                                      project.valid(lines(tests_require), "setup.cfg [options] tests_require")))
    setup_requires = ini_value(setup_cfg, "options", "setup_requires")
    if setup_requires:
        sources.append(project.source("setup.cfg [options] setup_requires", "setup-cfg", BUILD,
                                      project.valid(lines(setup_requires), "setup.cfg [options] setup_requires")))
    return sources


def setup_py_sources(project: Project) -> list[Source]:
    declared = project.setup_py.extras()
    from_files = project.setup_py.extras_files()
    sources = []
    for name, role in roles([*declared, *from_files]).items():
        if name in declared:
            where = f"setup.py extras_require {name}"
            sources.append(project.source(where, "setup-py", role, project.valid(declared[name], where),
                                          [name.split(":")[0]], through_extras=True))
        else:
            parsed = RequirementFile(project.files, [from_files[name]])
            sources.append(project.source(f"setup.py extras_require {name} ({from_files[name]})", "setup-py", role,
                                          parsed.requirements, [name, *parsed.extras], parsed.constraints,
                                          parsed.files, through_extras=True))
    tests_require = project.setup_py.keyword("tests_require")
    if isinstance(tests_require, list) and tests_require:
        sources.append(project.source("setup.py tests_require", "setup-py", TEST,
                                      project.valid(strings(tests_require), "setup.py tests_require")))
    setup_requires = project.setup_py.keyword("setup_requires")
    if isinstance(setup_requires, list) and setup_requires:
        sources.append(project.source("setup.py setup_requires", "setup-py", BUILD,
                                      project.valid(strings(setup_requires), "setup.py setup_requires")))
    return sources
