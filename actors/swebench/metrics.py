"""The paper's evaluation metrics (MAGIS appendices A and C), as pure functions of paths, diffs
and base texts; reading runs, repositories and tests is the caller's business (cli/evaluate.py).

- file-localization recall: |G ∩ R| / |R|, G the files located, R the gold files;
- line-localization coverage: Σ_i Σ_j |[s_i, e_i] ∩ [s'_j, e'_j]| / Σ_i (e_i − s_i + 1), over the
  gold patch's changed line ranges (i) and the run's (j), in base-file line numbers;
- change complexity (the paper's Table 5): files, functions, hunks, added, deleted and changed
  lines, and the first and last changed line.
"""
from __future__ import annotations

import ast
import re
from dataclasses import asdict, dataclass
from statistics import mean
from typing import Iterable, Mapping, Sequence

from magis_ray.actors.code.diffs import changed_line_ranges

Ranges = Mapping[str, Sequence[tuple[int, int]]]  # path -> (start, end) in base lines; (p, p - 1) inserts before p


# --- file localization --------------------------------------------------------------------


def file_recall(located: Iterable[str], gold: Iterable[str]) -> float | None:
    """The share of gold files among the located ones (0..1); None when there is no gold file."""
    gold_set = set(gold)
    if not gold_set:
        return None
    return len(gold_set & set(located)) / len(gold_set)


def recall_curve(rankings: Sequence[tuple[Sequence[str], Sequence[str]]], max_k: int) -> list[dict]:
    """Recall of a ranking's top k for k = 1..max_k, averaged over (ranking, gold files) pairs,
    each point with the average number of files located (a ranking may be shorter than k)."""
    scored = [(ranking, gold) for ranking, gold in rankings if gold]
    if not scored:
        return []
    return [
        {
            "k": k,
            "files": mean(min(k, len(ranking)) for ranking, _ in scored),
            "recall": mean(file_recall(ranking[:k], gold) for ranking, gold in scored),
        }
        for k in range(1, max_k + 1)
    ]


# --- line localization --------------------------------------------------------------------


def line_coverage(generated: Ranges, gold: Ranges) -> float | None:
    """MAGIS's coverage of the gold ranges by the generated ones (0..1); None without gold ranges.

    The formula gives a pure insertion (an empty range) no weight, so a fix that only adds lines
    could never be scored. Here a gold insertion before line p weighs one line, covered when a
    generated range touches that point: an insertion at p, or a change of line p - 1 or p.
    Generated ranges are merged first, so overlapping ones do not count a line twice.
    """
    hit = total = 0
    for path, gold_ranges in gold.items():
        ranges = list(generated.get(path, ()))
        changed = {line for start, end in ranges for line in range(start, end + 1)}
        for start, end in gold_ranges:
            if end >= start:
                total += end - start + 1
                hit += sum(1 for line in range(start, end + 1) if line in changed)
            else:
                total += 1
                hit += any(s <= start and e >= start - 1 for s, e in ranges)
    return hit / total if total else None


def histogram(values: Iterable[float], bins: int = 10) -> list[int]:
    """Counts of values in [0, 1] over `bins` equal bins; 1.0 falls in the last."""
    counts = [0] * bins
    for value in values:
        counts[min(int(value * bins), bins - 1)] += 1
    return counts


# --- change complexity --------------------------------------------------------------------

_HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")


@dataclass(frozen=True)
class Complexity:
    files: int
    functions: int
    hunks: int
    added: int
    deleted: int
    changed: int  # added + deleted, as in the paper's Table 5
    start: int  # first changed base line (over all files); 0 when nothing changed
    end: int  # last changed base line (an insertion before line p ends at p - 1)

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


METRICS = ("files", "functions", "hunks", "added", "deleted", "start", "end", "changed")  # Table 5's rows, in its order


def hunk_counts(diff: str) -> tuple[int, int, int]:
    """(hunks, added lines, deleted lines) of a unified diff; the "@@" counts, not a line's
    look, end a hunk, so a removed line reading "--- x" is not taken for a file header."""
    hunks = added = deleted = 0
    old_left = new_left = 0
    for line in diff.split("\n"):
        if old_left > 0 or new_left > 0:
            kind = line[:1]
            if kind == "+":
                added += 1
                new_left -= 1
            elif kind == "-":
                deleted += 1
                old_left -= 1
            elif kind != "\\":  # context (" ", or a blank line whose space was trimmed)
                old_left -= 1
                new_left -= 1
            continue
        match = _HUNK.match(line)
        if match:
            hunks += 1
            old_left = int(match.group(1) if match.group(1) is not None else 1)
            new_left = int(match.group(2) if match.group(2) is not None else 1)
    return hunks, added, deleted


def scopes(base_text: str) -> list[tuple[int, int, str]]:
    """(first line, last line, qualified name) of every def and class of Python source, decorators
    included; [] for text that does not parse as Python."""
    try:
        tree = ast.parse(base_text)
    except (SyntaxError, ValueError):
        return []
    found: list[tuple[int, int, str]] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                found.append((first, child.end_lineno or child.lineno, name))
                walk(child, name + ".")
            else:
                walk(child, prefix)

    walk(tree, "")
    return found


def enclosing(scope_list: Sequence[tuple[int, int, str]], line: int) -> str | None:
    """The innermost def/class holding base line `line`, or None at module level."""
    inside = [s for s in scope_list if s[0] <= line <= s[1]]
    return max(inside, key=lambda s: s[0])[2] if inside else None


def changed_functions(ranges: Ranges, base_texts: Mapping[str, str]) -> set[tuple[str, str]]:
    """The distinct (path, def/class) enclosing the changed base lines. An insertion before line
    p belongs to what holds line p - 1, the line it follows (the end of a body, or a def line)."""
    found: set[tuple[str, str]] = set()
    for path, file_ranges in ranges.items():
        scope_list = scopes(base_texts.get(path, ""))
        if not scope_list:
            continue
        for start, end in file_ranges:
            lines = range(start, end + 1) if end >= start else [start - 1]
            found.update((path, name) for line in lines if (name := enclosing(scope_list, line)) is not None)
    return found


def complexity(diff: str, base_texts: Mapping[str, str]) -> Complexity:
    """The change complexity of `diff`; `base_texts`: the base text of each file it changes
    (functions are counted in it; a file missing there, e.g. a new one, has none)."""
    ranges = changed_line_ranges(diff)
    hunks, added, deleted = hunk_counts(diff)
    spans = [r for file_ranges in ranges.values() for r in file_ranges]
    return Complexity(
        files=len(ranges), functions=len(changed_functions(ranges, base_texts)), hunks=hunks,
        added=added, deleted=deleted, changed=added + deleted,
        start=min((s for s, _ in spans), default=0), end=max((e for _, e in spans), default=0),
    )


def complexity_summary(values: Sequence[Complexity]) -> dict[str, dict[str, float]]:
    """Min, max and mean of each Table 5 metric over `values` ({} when there are none)."""
    if not values:
        return {}
    return {
        metric: {
            "min": min(getattr(v, metric) for v in values),
            "max": max(getattr(v, metric) for v in values),
            "mean": mean(getattr(v, metric) for v in values),
        }
        for metric in METRICS
    }
