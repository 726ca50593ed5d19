"""Every runnable block of the documentation (README.md and docs/) runs as its page says: one test
per page, named by the page and how many blocks and commands it holds, its blocks run in one bash
session in a fresh folder with the calc example and the scripted model (tests/docs_blocks.py). The
pages' commands join the module's Ray (conftest.py's module_ray), as a user's join a warm Ray.

    .venv/bin/python -m pytest tests/test_docs_runnable.py -v   # the pages and their counts"""
from __future__ import annotations

import pytest
from docs_blocks import ROOT, Mismatch, blocks_of, run_page, runnable_pages

PAGES = runnable_pages()


def _name(page) -> str:
    blocks = blocks_of(page)
    commands = sum(len(block.commands) for block in blocks)
    return f"{page.relative_to(ROOT)} ({len(blocks)} blocks, {commands} commands)"


@pytest.mark.parametrize("page", PAGES, ids=[_name(page) for page in PAGES])
def test_the_runnable_blocks_of_a_page_print_what_it_says(page, tmp_path, module_ray):
    try:
        ran, mismatch = run_page(page, tmp_path / "page", ray=module_ray), ""
    except Mismatch as failed:
        ran, mismatch = 0, str(failed)
    if mismatch:  # the page and line, the command, what was missing, what it printed; no traceback
        pytest.fail(mismatch, pytrace=False)
    assert ran > 0
