"""The runnable-block collector itself (tests/docs_blocks.py): it finds blocks and their commands,
matches output as the contract says, and runs real blocks of the calc example: a real block passes,
the same block with a wrong flag fails and says where, an `[exit 2]` block passes, `...` matches."""
from __future__ import annotations

import pytest
from docs_blocks import (
    Mismatch, NotRunnable, blocks_of, documentation_pages, printed_lines, run_page, runnable_pages, unmatched,
)

CONFIG_BLOCK = """\
<!-- runnable -->
```console
$ magis-ray config --repo .magis/example/calc
project:  (none in ...calc)
...
[run]
top-k                      10   ...default
[endpoint]
llm ... auto ... default
```
"""
SUBMIT_BLOCK = """\
<!-- runnable -->
```console
$ magis-ray submit examples/calc/issue.json --repo .magis/example/calc \\
    --llm scripted:examples/calc/script.json --tests off
run ...: calc__calc-1 (example/calc @ 2386d9171d)
...
outcome:  patch...
$ magis-ray runs
RUN ... INSTANCE ... STATUS ...
... calc__calc-1 ... finished ...
```
"""


def page(tmp_path, text: str, name: str = "page.md"):
    path = tmp_path / name
    path.write_text(f"# A page\n\nSome words.\n\n{text}\nMore words.\n")
    return path


def test_a_block_s_commands_continuations_outputs_and_exit_codes_are_read(tmp_path):
    blocks = blocks_of(page(tmp_path, SUBMIT_BLOCK + "\n```console\n$ not runnable\n```\n<!-- runnable -->\n"
                                       "```console\n$ false\n[exit 1]\n```\n"))
    assert [len(block.commands) for block in blocks] == [2, 1]
    submit, runs = blocks[0].commands
    assert submit.text == ("magis-ray submit examples/calc/issue.json --repo .magis/example/calc \\\n"
                           "    --llm scripted:examples/calc/script.json --tests off")
    assert submit.expected[0].startswith("run ...") and submit.expected[1] == "..." and submit.line == 7
    assert runs.expected[-1] == "... calc__calc-1 ... finished ..." and runs.exit_code == 0
    assert blocks[1].commands[0].exit_code == 1 and blocks[1].commands[0].expected == []


def test_a_marker_not_before_a_console_block_is_refused(tmp_path):
    with pytest.raises(NotRunnable, match="page.md:5: <!-- runnable --> must come directly before"):
        blocks_of(page(tmp_path, "<!-- runnable -->\n```bash\n$ ls\n```\n"))


def test_expected_lines_are_an_in_order_subset_with_dots_for_any_text():
    printed = printed_lines("\x1b[32mrun 1a2b: calc\x1b[0m\nworking 10%\rworking 100%\noutcome:  patch (1 file)\n")
    assert unmatched(["run ...: calc", "working 100%", "outcome:  patch ..."], printed) is None
    assert unmatched(["...", "outcome: ..."], printed) is None  # a line of dots matches nothing by itself
    assert unmatched(["outcome: ...", "run ...: calc"], printed) == "run ...: calc"  # order counts
    assert unmatched(["outcome:  patch"], printed) == "outcome:  patch"  # a whole line, unless dots say more
    assert unmatched(["run"], printed) == "run"


def test_a_real_block_passes_and_the_same_block_with_a_wrong_flag_fails_saying_where(tmp_path):
    assert run_page(page(tmp_path, CONFIG_BLOCK), tmp_path / "right") == 1
    wrong = page(tmp_path, CONFIG_BLOCK.replace("--repo", "--repository"), "wrong.md")
    with pytest.raises(Mismatch) as failed:
        run_page(wrong, tmp_path / "wrong")
    message = str(failed.value)
    assert "wrong.md:7: $ magis-ray config --repository .magis/example/calc" in message
    assert "exited 2, the page says 0" in message and "No such option '--repository'" in message


def test_an_expected_line_not_printed_is_named_with_the_output(tmp_path):
    with pytest.raises(Mismatch) as failed:
        run_page(page(tmp_path, CONFIG_BLOCK.replace("top-k                      10", "top-k  11")), tmp_path / "run")
    assert "the expected line was not printed: 'top-k  11   ...default'" in str(failed.value)
    assert "[endpoint]" in str(failed.value)  # the output is shown


def test_an_exit_2_block_passes_and_blocks_of_a_page_share_one_shell(tmp_path):
    text = """\
<!-- runnable -->
```console
$ magis-ray submit examples/calc/issue.json --repo .magis/example/calc --top-k 0
magis-ray: error: --top-k: top-k must be at least 1, not 0
[exit 2]
$ cd .magis/example/calc && WHERE=calc
```

Then, in the same session:

<!-- runnable -->
```console
$ echo "$WHERE" && git log --format=%s | tail -1
calc
...
```
"""
    assert run_page(page(tmp_path, text), tmp_path / "run") == 3
    with pytest.raises(Mismatch, match="exited 2, the page says 0"):
        run_page(page(tmp_path, text.replace("[exit 2]\n", ""), "no-exit.md"), tmp_path / "no-exit")


@pytest.mark.slow
def test_a_scripted_submit_block_passes_and_fails_with_a_wrong_flag(tmp_path):
    assert run_page(page(tmp_path, SUBMIT_BLOCK), tmp_path / "right") == 2
    with pytest.raises(Mismatch, match="No such option '--test'"):
        run_page(page(tmp_path, SUBMIT_BLOCK.replace("--tests off", "--test off"), "wrong.md"), tmp_path / "wrong")


def test_the_documentation_s_runnable_blocks_are_well_formed_and_counted():
    pages = runnable_pages()
    blocks = [block for p in pages for block in blocks_of(p)]
    commands = sum(len(block.commands) for block in blocks)
    print(f"runnable: {len(blocks)} blocks, {commands} commands on {len(pages)} of {len(documentation_pages())} pages")
    assert all(block.commands for block in blocks)
