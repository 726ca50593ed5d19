"""BM25 file localization: which files of a repository an issue is most likely about.

Two schemes:
- code (default): BM25 over identifiers split on snake_case / camelCase, the file's path
  weighted into its document and its import statements left out; its score, scaled to the best
  file's, plus evidence weighed by RankingSettings: files defining the names the issue uses
  (symbols.py; the project's own name left out), a BM25 over the words of the names each file
  defines (its own field), files whose folder or module name it uses as a
  word (path_evidence.py), files it names (paths, dotted modules, distinctive module names such
  as "L031", the module a quoted test file tests; less when only quoted on an import line) and,
  strongest, where its stack traces end; a generated module ranks just below its source
  (path_evidence.generated_companions). Template text (HTML comments, URLs, environment
  reports) leaves the query, and copies of other projects' assets the index (is_bundled_asset);
- plain: the SWE-bench paper's baseline (lowercase word split of "path\\ncontents",
  no identifier splitting, no boost), kept so a benchmark can compare the two.

PREVIOUS_RANKING is the code scheme as it was before the symbol evidence (tuned on 22
instances), kept so benchmarks/localization.py can compare old and new on the same instances.
"""
from __future__ import annotations

import functools
import math
import posixpath
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from rank_bm25 import BM25Okapi

from magis_ray.actors.code.path_evidence import (PathWordIndex, generated_companions, modules_under_test, project_names,
                                                  without_paths)
from magis_ray.actors.code.symbols import SymbolIndex, defined_names, is_test_module, issue_names, without_imports

if TYPE_CHECKING:
    from magis_ray.actors.code.repository import RepoSnapshot

# --- tokens ----------------------------------------------------------------------------------

_WORD = re.compile(r"\w+")
# "HTTPServerError2" -> HTTP, Server, Error, 2
_CAMEL_PART = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")

# Words in nearly every Python file or issue: they only add work and noise. Kept small on
# purpose; BM25's idf already discounts what is common.
STOPWORDS = frozenset(
    """
    def class self cls return if else elif import from in is not and or for while with as
    none true false pass the an to of it this that be on are was we can but have has at by
    """.split()
)


@functools.lru_cache(maxsize=1 << 18)
def _word_tokens(word: str) -> tuple[str, ...]:
    """The tokens of one identifier: itself (lowercased) and, if compound, its parts.

    "getUserName" -> getusername, get, user, name; "L031" -> l031 (the parts "l" and
    "031" are dropped: 1-character and all-digit tokens match everything or nothing).
    """
    full = word.strip("_").lower()
    parts = [
        part.lower()
        for chunk in word.split("_")
        if chunk
        for part in (_CAMEL_PART.findall(chunk) if chunk.isascii() else [chunk])
    ]
    candidates = [full, *parts] if len(parts) > 1 else [full]
    return tuple(t for t in candidates if len(t) > 1 and not t.isdigit() and t not in STOPWORDS)


def code_tokens(text: str) -> list[str]:
    """Code-aware tokens of `text`, in order (identifiers and their parts)."""
    return [token for word in _WORD.findall(text) for token in _word_tokens(word)]


def _code_token_counts(text: str) -> Counter[str]:
    # Count words first (in C), then expand each distinct word once: several times
    # faster than code_tokens on real files, where words repeat a lot.
    counts: Counter[str] = Counter()
    for word, n in Counter(_WORD.findall(text)).items():
        for token in _word_tokens(word):
            counts[token] += n
    return counts


def plain_bm25_tokens(text: str) -> list[str]:
    """The plain baseline: lowercase, split on whitespace and punctuation, nothing more."""
    return _WORD.findall(text.lower())


def issue_query(problem_statement: str, hints_text: str = "") -> list[str]:
    """The code-aware query of an issue (and its hints, when used)."""
    return code_tokens(problem_statement) + code_tokens(hints_text)


# The path is the best short description of a file ("rules/L031.py"), but only a handful
# of tokens among thousands; counting it several times keeps it from drowning.
PATH_WEIGHT = 3


def document_token_counts(path: str, text: str, *, plain: bool = False, index_imports: bool = True) -> Counter[str]:
    """The bag of tokens BM25 indexes for one file (without its import statements unless
    `index_imports`)."""
    if plain:
        return Counter(plain_bm25_tokens(f"{path}\n{text}"))
    counts = _code_token_counts(text if index_imports else without_imports(text))
    for token in code_tokens(path):
        counts[token] += PATH_WEIGHT
    return counts


# --- the index -------------------------------------------------------------------------------


class _CountedBM25(BM25Okapi):
    """rank-bm25's Okapi BM25 (its idf floor, k1, b), built from token Counters.

    The stock constructor counts every token in a Python loop; given counts, building
    an index of a few thousand files takes a fraction of the time.
    """

    def _initialize(self, corpus: list[Counter[str]]) -> dict[str, int]:
        document_frequency: Counter[str] = Counter()
        total = 0
        for counts in corpus:
            length = sum(counts.values())
            self.doc_len.append(length)
            self.doc_freqs.append(counts)
            document_frequency.update(counts.keys())
            total += length
        self.corpus_size = len(corpus)
        self.avgdl = total / self.corpus_size
        self.document_frequency = dict(document_frequency)
        return self.document_frequency


def _counted_bm25(counts: Sequence[Counter[str]], **parameters: float) -> _CountedBM25 | None:
    # rank-bm25 cannot index nothing (it divides by the corpus and vocabulary sizes).
    return _CountedBM25(counts, **parameters) if any(counts) else None


class BM25Index:
    """BM25 over a set of files; build once, then rank for any number of queries."""

    def __init__(self, documents: Sequence[tuple[str, str]], *, plain: bool = False, index_imports: bool = True) -> None:
        self.paths = [path for path, _ in documents]
        self.plain = plain
        counts = [document_token_counts(path, text, plain=plain, index_imports=index_imports) for path, text in documents]
        self._bm25 = _counted_bm25(counts)

    @classmethod
    def of_counts(cls, paths: Sequence[str], counts: Sequence[Counter[str]], *, b: float) -> BM25Index:
        """An index of ready-made token counts (one field of each file) with length normalization `b`."""
        index = cls.__new__(cls)
        index.paths, index.plain, index._bm25 = list(paths), False, _counted_bm25(counts, b=b)
        return index

    def document_frequency(self) -> dict[str, int]:
        """token -> how many documents have it."""
        return {} if self._bm25 is None else self._bm25.document_frequency

    def scores(self, query_tokens: Iterable[str]) -> np.ndarray:
        """One BM25 score per path, as rank-bm25's get_scores(query_tokens) computes it."""
        scores = np.zeros(len(self.paths))
        bm25 = self._bm25
        if bm25 is None:
            return scores
        doc_len = np.asarray(bm25.doc_len, dtype=float)
        length_norm = bm25.k1 * (1 - bm25.b + bm25.b * doc_len / bm25.avgdl)
        # A repeated query token counts once per occurrence, as in get_scores, but its
        # term frequencies are gathered only once.
        for token, repeats in Counter(query_tokens).items():
            idf = bm25.idf.get(token)
            if not idf:
                continue
            tf = np.fromiter((d.get(token, 0) for d in bm25.doc_freqs), dtype=float, count=len(self.paths))
            scores += repeats * idf * (tf * (bm25.k1 + 1) / (tf + length_norm))
        return scores

    def top(
        self, query_tokens: Iterable[str], k: int, *, boosted: Iterable[str] = (), first: Iterable[str] = ()
    ) -> list[tuple[str, float]]:
        """The k best (path, score), best first, ties by path.

        Files with no matching token are left out. `boosted` files (e.g. named in the issue)
        outrank all others, and `first` files (e.g. where a stack trace ends) outrank those:
        a boosted score is raised by the best plain score + 1, a first one by twice that, so
        within each tier the files' own BM25 scores decide.
        """
        if k < 0:
            raise ValueError(f"k must be at least 0, got {k}")
        scores = self.scores(query_tokens)
        lift = (float(scores.max()) if len(scores) else 0.0) + 1.0
        position = {path: i for i, path in enumerate(self.paths)}
        top_tier = set(first)
        for path, raise_by in [*((p, lift) for p in set(boosted) - top_tier), *((p, 2 * lift) for p in top_tier)]:
            if path in position:
                scores[position[path]] += raise_by
        ranked = sorted(
            ((path, float(score)) for path, score in zip(self.paths, scores) if score > 0),
            key=lambda item: (-item[1], item[0]),
        )
        return ranked[:k]


def rank_files(
    documents: Sequence[tuple[str, str]],
    query_tokens: Iterable[str],
    k: int,
    *,
    plain: bool = False,
    boosted: Iterable[str] = (),
    first: Iterable[str] = (),
) -> list[tuple[str, float]]:
    """The k files of `documents` ((path, text) pairs) that best match the query."""
    return BM25Index(documents, plain=plain).top(query_tokens, k, boosted=boosted, first=first)


@dataclass(frozen=True)
class RankingSettings:
    """How the code scheme weighs its evidence. A file's score is its BM25 score divided by the
    best file's (so 1 at most) plus the weights of the evidence it has. The defaults were chosen
    by cross-validation on 191 SWE-bench instances (benchmarks/localization.py --folds 2)."""

    # Files defining names the issue uses, per name: weight x rarity (SymbolIndex.scores).
    symbol_weight: float = 0.15
    # A plain lowercase name ("copy") counts this share of a compound one ("as_set", "Contains").
    plain_name_weight: float = 0.3
    # Files the issue names by path, dotted module or distinctive module name.
    mention_weight: float = 0.5
    # Files named only on an import line the issue quotes ("from pkg.mod import x"): the bug
    # is as likely to be in what uses x as in pkg/mod.py.
    import_mention_weight: float = 0.5
    # Beyond this many files named, each counts proportionally less: a list of a dozen modules
    # (a configuration, an environment report) points at none of them.
    mention_share: float = 2.0
    # Where a stack trace in the issue ends.
    crash_weight: float = 3.0
    # Files whose folder or module name the issue uses as a word, per word: weight x the word's
    # rarity in the code (path_evidence.PathWordIndex).
    path_weight: float = 0.8
    # BM25 over the words of the names a file defines ("serialize_repr_crash" -> serialize, repr,
    # crash), scaled to the best file's: what a file is about, apart from the words its bodies use.
    definition_weight: float = 0.6
    # A generated module (a parser table, "do not edit") changes with the module it is generated
    # from and named after (cds_parsetab.py, cds.py): it ranks at this share of that one's score.
    generated_share: float = 0.99
    # Whether the project's own package names ("Sphinx", "sympy") are left out of the names a file
    # can define for the issue: every issue says them.
    ignore_project_names: bool = True
    # Whether words of a file's import statements count in its BM25 document.
    index_imports: bool = False
    # Whether code made of test functions, or under a top-level testing/ folder, is indexed.
    index_test_modules: bool = False
    # Whether copies of other projects' web assets are indexed (is_bundled_asset): jquery-3.5.1.js
    # or a minified bundle says every word of an issue about a page.
    index_bundled_assets: bool = False
    # Whether HTML comments (issue templates) and URLs are dropped from the BM25 query and names.
    strip_issue_markup: bool = True


# Length normalization (BM25's b) of the definitions field. Lower than the text's 0.75: a module
# of many helpers defines many names for a reason. Chosen by cross-validation (0.3 against 0,
# 0.75 and 0.9; benchmarks/localization.py --folds 2).
DEFINITIONS_LENGTH_NORMALIZATION = 0.3


def definition_token_counts(names: Iterable[str]) -> Counter[str]:
    """The definitions field of a file: the tokens of each name it defines, each name once."""
    return Counter(token for name in names for token in _word_tokens(name))


# The ranking before symbol evidence: named files in a tier above all others, crash sites above
# those (weights above the 1 a BM25 score can reach), imports and test modules indexed.
PREVIOUS_RANKING = RankingSettings(
    symbol_weight=0.0, mention_weight=1.5, import_mention_weight=1.5, mention_share=math.inf, crash_weight=3.0, path_weight=0.0,
    definition_weight=0.0, generated_share=0.0,
    index_imports=True, index_test_modules=True, strip_issue_markup=False, ignore_project_names=False, index_bundled_assets=True,
)

# RunSettings.ranking -> the settings it names.
RANKINGS = {"previous": PREVIOUS_RANKING, "symbols": RankingSettings()}


def ranking_settings(name: str) -> RankingSettings:
    try:
        return RANKINGS[name]
    except KeyError:
        raise ValueError(f"unknown ranking {name!r}: one of {', '.join(RANKINGS)}") from None


_HTML_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL)
_URL = re.compile(r"\b(?:https?|ftp)://\S+")
# An import line quoted in an issue, in a session (">>> from x import y") or a script.
_QUOTED_IMPORT = re.compile(r"^[ \t]*(?:>>>[ \t]*)?(?:from[ \t]+[\w.]+[ \t]+import\b.*|import[ \t]+[\w., \t]+)$", re.MULTILINE)


# A line of an environment report ("xarray: 2022.10.0", "- Sphinx version: 3.0.1", "LC_ALL: None",
# "numpy==1.24", "Matplotlib 3.6.3"), which bug-report templates ask for: it lists every optional
# dependency by name, and a repository has modules named after many of them (backends, plugins).
_ENVIRONMENT_LINE = re.compile(
    r"^[ \t>*-]*(?:[\w .()/-]{1,40}?:[ \t]*(?:None|v?\d+(?:\.\w+)+[\w.+-]*)|[A-Za-z][\w.-]*(?:==|[ \t]+)v?\d+(?:\.\w+)+[\w.+-]*)[ \t\r]*$",
    re.MULTILINE,
)


# The language of a fenced code block ("```python", "```julia", "~~~ sql"): a word of markup, not of
# the issue, and a repository may have a module of that name (sympy/printing/julia.py).
_FENCE_LANGUAGE = re.compile(r"^([ \t>]*(?:```|~~~))[ \t]*[\w+#.-]+", re.MULTILINE)


def without_markup(text: str) -> str:
    """An issue without HTML comments (a template's instructions), URLs (host names, ids),
    environment reports (dependency names and versions) and code blocks' language names."""
    text = _ENVIRONMENT_LINE.sub("", _URL.sub(" ", _HTML_COMMENT.sub(" ", text)))
    return _FENCE_LANGUAGE.sub(r"\1", text)


# Inline code (`xr.where(..., keep_attrs=True)`), not a fenced block: what the reporter singled out.
_INLINE_CODE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")


def emphasized(issue: str) -> str:
    """What an issue stresses: its title (the first line) and its inline code. Its tokens count
    twice in the BM25 query and its names twice as symbol evidence: a reporter names the broken
    thing there, while the body also carries reproductions, logs and template text."""
    title = issue.strip().split("\n", 1)[0]
    return "\n".join([title, *_INLINE_CODE.findall(issue)])


@dataclass(frozen=True)
class Evidence:
    """What an issue says about each file of a FileRanker, before any weighing (RankingSettings
    weighs it in FileRanker.weigh): cheap to weigh many ways."""

    bm25: np.ndarray  # BM25 score over the best file's (0..1)
    compound_names: np.ndarray  # SymbolIndex: the compound or capitalized names the file defines
    plain_names: np.ndarray  # SymbolIndex: the plain lowercase names it defines
    path_words: np.ndarray  # PathWordIndex: the path words of the file the issue uses
    definitions: np.ndarray  # BM25 over the words of the names the file defines, over the best file's (0..1)
    named: tuple[str, ...]  # files the issue names (outside quoted import lines), or tests by a quoted test file
    imported: tuple[str, ...]  # files named only on quoted import lines
    crashed: tuple[str, ...]  # where its stack traces end


class FileRanker:
    """The code scheme over one set of documents; build once, rank for any number of issues.

    The settings that shape the index (index_imports) and the query (strip_issue_markup) are
    fixed when it is built; the weights can differ per call, so a benchmark can try several
    on one index and one Evidence.
    """

    def __init__(self, documents: Sequence[tuple[str, str]], settings: RankingSettings = RankingSettings()) -> None:
        self.settings = settings
        self.paths = [path for path, _ in documents]
        self._texts = [text for _, text in documents]
        self._bm25 = BM25Index(documents, index_imports=settings.index_imports)
        self._symbols: SymbolIndex | None = None  # built on first use: PREVIOUS_RANKING never needs it
        self._definitions: BM25Index | None = None  # likewise
        self._path_words: PathWordIndex | None = None  # likewise
        self._generated = generated_companions(documents)
        self._project = project_names(self.paths) if settings.ignore_project_names else frozenset()
        self._position = {path: i for i, path in enumerate(self.paths)}

    def rank(
        self, problem_statement: str, hints_text: str = "", k: int = 10, settings: RankingSettings | None = None
    ) -> list[tuple[str, float]]:
        """The k best (path, score) for an issue, best first, ties by path; files with no
        evidence at all are left out."""
        return self.weigh(self.evidence(problem_statement, hints_text), k, settings)

    def evidence(self, problem_statement: str, hints_text: str = "") -> Evidence:
        issue = f"{problem_statement}\n{hints_text}"
        query_text = without_markup(issue) if self.settings.strip_issue_markup else issue
        stressed = emphasized(query_text)
        query = code_tokens(query_text) + code_tokens(stressed)
        bm25 = _scaled_to_best(self._bm25.scores(query))
        if self.settings.symbol_weight:
            if self._symbols is None:
                definitions = [defined_names(text) for text in self._texts]
                self._symbols = SymbolIndex(definitions)
                self._definitions = BM25Index.of_counts(self.paths, [definition_token_counts(names) for names in definitions],
                                                        b=DEFINITIONS_LENGTH_NORMALIZATION)
            defined = _scaled_to_best(self._definitions.scores(query))
            compound, plain = np.zeros(len(self.paths)), np.zeros(len(self.paths))
            for text in (query_text, stressed):
                names = {name for name in issue_names(text) if name.lower() not in self._project}
                more_compound, more_plain = self._symbols.scores(names)
                compound += more_compound
                plain += more_plain
            if self._path_words is None:
                self._path_words = PathWordIndex(
                    self.paths, self._bm25.document_frequency(), len(self.paths), self._project)
            # Import lines and paths name files, weighed as such; their words do not count twice.
            path_words = self._path_words.scores(code_tokens(without_paths(_QUOTED_IMPORT.sub("", query_text))))
        else:
            compound = plain = path_words = defined = np.zeros(len(self.paths))
        quoted_imports = "\n".join(_QUOTED_IMPORT.findall(issue))
        prose = _QUOTED_IMPORT.sub("", issue)
        named = dict.fromkeys(
            mentioned_paths(prose, self.paths) + named_modules(prose, self.paths) + modules_under_test(issue, self.paths))
        imported = dict.fromkeys(
            p for p in mentioned_paths(quoted_imports, self.paths) + named_modules(quoted_imports, self.paths) if p not in named
        )
        return Evidence(bm25, compound, plain, path_words, defined, tuple(named), tuple(imported),
                        tuple(crash_sites(issue, self.paths)))

    def weigh(self, evidence: Evidence, k: int = 10, settings: RankingSettings | None = None) -> list[tuple[str, float]]:
        """The k best (path, score) by `settings` (by default the ranker's own)."""
        if k < 0:
            raise ValueError(f"k must be at least 0, got {k}")
        settings = settings or self.settings
        for name in ("index_imports", "strip_issue_markup", "ignore_project_names"):
            if getattr(settings, name) != getattr(self.settings, name):
                raise ValueError(f"{name} differs from the ranker's; build a FileRanker with these settings")
        if (settings.symbol_weight > 0) != (self.settings.symbol_weight > 0):
            raise ValueError("symbol evidence is on in one of the settings only; build a FileRanker with these settings")
        scores = evidence.bm25 + settings.symbol_weight * (
            evidence.compound_names + settings.plain_name_weight * evidence.plain_names
        ) + settings.path_weight * evidence.path_words + settings.definition_weight * evidence.definitions
        share = min(1.0, settings.mention_share / len(evidence.named)) if evidence.named else 1.0
        for paths, weight in (
            (evidence.named, settings.mention_weight * share),
            (evidence.imported, settings.import_mention_weight),
            (evidence.crashed, settings.crash_weight),
        ):
            for path in paths:
                scores[self._position[path]] += weight
        if settings.generated_share:
            for generated, source in self._generated:
                scores[generated] = max(scores[generated], settings.generated_share * scores[source])
        ranked = sorted(
            ((path, float(score)) for path, score in zip(self.paths, scores) if score > 0),
            key=lambda item: (-item[1], item[0]),
        )
        return ranked[:k]


def _scaled_to_best(scores: np.ndarray) -> np.ndarray:
    """Scores over the best one (0..1), so that evidence weights mean the same in any repository."""
    best = float(scores.max()) if len(scores) else 0.0
    return scores / best if best > 0 else scores


def localize_files(
    documents: Sequence[tuple[str, str]],
    problem_statement: str,
    hints_text: str = "",
    k: int = 10,
    *,
    plain: bool = False,
    settings: RankingSettings = RankingSettings(),
) -> list[tuple[str, float]]:
    """Rank files for an issue: the code scheme (FileRanker, weighed by `settings`), or the
    plain baseline."""
    if plain:
        return rank_files(documents, plain_bm25_tokens(f"{problem_statement}\n{hints_text}"), k, plain=True)
    if settings == PREVIOUS_RANKING:
        # Exactly as before, scores included (tiers raised by the best BM25 score + 1, not the
        # scaled sum FileRanker computes): logs recorded with it replay unchanged.
        issue = f"{problem_statement}\n{hints_text}"
        paths = [path for path, _ in documents]
        mentioned = mentioned_paths(issue, paths) + named_modules(issue, paths)
        query = issue_query(problem_statement, hints_text)
        return rank_files(documents, query, k, boosted=mentioned, first=crash_sites(issue, paths))
    return FileRanker(documents, settings).rank(problem_statement, hints_text, k)


# --- files the issue names -------------------------------------------------------------------

# Runs of path characters; quotes, colons, commas and spaces end a mention, which cuts
# a stack-trace line `File "/x/pkg/mod.py", line 12` down to /x/pkg/mod.py.
_PATH_RUN = re.compile(r"[\w./\\-]+")
_FILE_NAME = re.compile(r"^[\w-]+(\.\w+)*\.[A-Za-z]\w*$")
# A mention that fits more files than this ("__init__.py", "utils.py") names none of them.
MAX_FILES_PER_MENTION = 3


def mentioned_paths(text: str, all_paths: Iterable[str]) -> list[str]:
    """The repository paths `text` names, in order of first mention.

    Recognizes paths ("pkg/mod.py", "mod.py", absolute or URL paths ending in a repo
    path, Windows "\\" paths), stack-trace lines (`File ".../pkg/mod.py", line 3`) and
    dotted modules ("pkg.mod.Class" -> pkg/mod.py). A mention
    matches a repository path by whole trailing path components; the longest matching
    tail wins, and a mention fitting more than MAX_FILES_PER_MENTION files is dropped.
    """
    by_tail = _paths_by_tail(all_paths)
    found: dict[str, None] = {}  # ordered set
    for run in _PATH_RUN.findall(text):
        mention = run.replace("\\", "/").rstrip(".-")
        for path in _match_file_mention(mention, by_tail) or _match_module_mention(mention, by_tail):
            found.setdefault(path, None)
    return list(found)


def _paths_by_tail(all_paths: Iterable[str]) -> dict[str, list[str]]:
    """Every trailing run of components ("c.py", "b/c.py", "a/b/c.py") -> the paths ending so."""
    by_tail: dict[str, list[str]] = {}
    for path in all_paths:
        parts = path.split("/")
        for i in range(len(parts)):
            by_tail.setdefault("/".join(parts[i:]), []).append(path)
    return by_tail


def _match_file_mention(mention: str, by_tail: dict[str, list[str]]) -> list[str]:
    parts = [part for part in mention.split("/") if part not in ("", ".")]
    if ".." in parts:  # only what follows the last ".." can be a repository path
        parts = parts[len(parts) - parts[::-1].index("..") :]
    if not parts or not _FILE_NAME.match(parts[-1]):
        return []
    for i in range(len(parts)):
        matches = by_tail.get("/".join(parts[i:]))
        if matches:
            return matches if len(matches) <= MAX_FILES_PER_MENTION else []
    return []


def _match_module_mention(mention: str, by_tail: dict[str, list[str]]) -> list[str]:
    """A dotted name naming a module file. A package's __init__.py is not taken: "ray.data"
    or "django.db" set the scene in an issue far more often than they point at a fix."""
    names = mention.split(".")
    if len(names) < 2 or not all(name.isidentifier() for name in names):
        return []
    # "pkg.mod.Class.method": try the longest module path first, down to two names.
    for n in range(len(names), 1, -1):
        matches = by_tail.get("/".join(names[:n]) + ".py")
        if matches:
            return matches if len(matches) <= MAX_FILES_PER_MENTION else []
    return []


# A Python traceback lists the innermost call last; pytest prints "path.py:12: in f" lines
# in the same order. Either way the last frame in the repository is where the error arose.
_TRACEBACK_START = re.compile(r"Traceback \(most recent call last\)")
_FRAME = re.compile(r'File "([^"\n]+)", line \d+|^[ \t]*([\w./\\-]+\.py):\d+:', re.MULTILINE)


def crash_sites(text: str, all_paths: Iterable[str]) -> list[str]:
    """The repository file of each stack trace's innermost frame in `text`, in order.

    Frames outside the repository (the standard library, other packages) are passed over;
    a frame naming more than one repository file names none.
    """
    by_tail = _paths_by_tail(all_paths)
    sites: dict[str, None] = {}
    for trace in _TRACEBACK_START.split(text):
        innermost = None
        for frame in _FRAME.finditer(trace):
            found = _match_file_mention((frame.group(1) or frame.group(2)).replace("\\", "/"), by_tail)
            if len(found) == 1:
                innermost = found[0]
        if innermost is not None:
            sites.setdefault(innermost, None)
    return list(sites)


def _distinctive_stem(stem: str) -> bool:
    """A module name no prose uses by chance: with a digit or an inner underscore ("L031",
    "linted_file"), unlike "base", "fields" or "dataset", which issues say all the time."""
    core = stem.strip("_")
    return len(core) > 2 and (any(c.isdigit() for c in core) or "_" in core) and stem.isidentifier()


def named_modules(text: str, all_paths: Iterable[str]) -> list[str]:
    """Files the issue names by their bare module name ("rule L031", "`linted_file`"), in order
    of first mention; only distinctive names, fitting at most MAX_FILES_PER_MENTION files."""
    by_stem: dict[str, list[str]] = {}
    for path in all_paths:
        stem, extension = posixpath.splitext(posixpath.basename(path))
        if extension == ".py" and _distinctive_stem(stem):
            by_stem.setdefault(stem, []).append(path)
    found: dict[str, None] = {}
    for word in _WORD.findall(text):
        matches = by_stem.get(word, [])
        if len(matches) <= MAX_FILES_PER_MENTION:
            found.update(dict.fromkeys(matches))
    return list(found)


# --- what gets indexed -----------------------------------------------------------------------

MAX_DOCUMENT_BYTES = 512 * 1024

# Source code only: docs, data and configuration mention every identifier without
# being where a fix goes (SWE-bench's own BM25 retrieval indexes .py files only).
SOURCE_EXTENSIONS = frozenset(
    """
    .py .pyi .pyx .pxd .c .h .cc .cpp .cxx .hpp .hh .java .kt .scala .go .rs .rb .php
    .js .jsx .mjs .ts .tsx .cs .swift .m .mm .sh .pl .lua .r .jl
    """.split()
)

# Folders of copied-in third-party code and tooling caches.
VENDORED_DIRS = frozenset(
    """
    node_modules vendor vendored _vendor third_party thirdparty extern externals
    site-packages __pycache__ .tox .nox .venv venv .eggs
    """.split()
)

# Documentation and example scripts ("doc/conf.py", "examples/plot_x.py") use the library's
# names everywhere without being where its fixes go.
DOCUMENTATION_DIRS = frozenset({"doc", "docs", "example", "examples"})

GENERATED_SUFFIXES = ("_pb2.py", "_pb2_grpc.py", "_pb2.pyi", ".min.js", ".bundle.js")


def is_test_path(path: str) -> bool:
    """Test code, which a fix for an issue does not change (SWE-bench keeps test changes
    apart). A folder named "tests", or a test-looking file name; deliberately not any
    folder named "test" or "testing": django/test/ and sympy/testing/ are library code."""
    folder, name = posixpath.split(path)
    stem = posixpath.splitext(name)[0]
    return (
        "tests" in folder.split("/")
        or stem.startswith("test_")
        or stem.endswith("_test")
        or stem in ("tests", "conftest")
    )


def is_indexed_path(path: str, *, include_tests: bool = False) -> bool:
    """Whether select_documents considers a file, judging by its path alone."""
    lowered = path.lower()
    if posixpath.splitext(lowered)[1] not in SOURCE_EXTENSIONS:
        return False
    if lowered.endswith(GENERATED_SUFFIXES):
        return False
    if any(part in VENDORED_DIRS or part in DOCUMENTATION_DIRS for part in lowered.split("/")[:-1]):
        return False
    return include_tests or not is_test_path(path)


# Top-level folders of test code under another name than "tests" (pytest's own testing/). Only at
# the top: a package's testing/ subpackage (sympy/testing/) is library code its users import.
TEST_ROOTS = frozenset({"testing"})


def is_test_code(path: str, text: str) -> bool:
    """Test code by its path (is_test_path), its top-level folder (TEST_ROOTS) or its content
    (symbols.is_test_module): what no fix changes, however its folder is named."""
    return is_test_path(path) or path.split("/", 1)[0] in TEST_ROOTS or is_test_module(text)


# A file name carrying a release number: a copy of another project's release ("jquery-3.5.1.js",
# "underscore-1.13.1.js").
_RELEASE_FILE_NAME = re.compile(r"[-_.]v?\d+\.\d+(?:\.\d+)*(?:[-.]\w+)?\.[a-z]+$")
# GitHub linguist's test for minified code: lines this long on average.
MINIFIED_LINE_LENGTH = 110


def is_bundled_asset(path: str, text: str) -> bool:
    """A copy of another project's asset shipped with this one, which no fix here changes: outside
    Python, a file named with a release number, a minified file (average line over
    MINIFIED_LINE_LENGTH characters), or a compiled translation under a gettext LC_MESSAGES folder.
    Python files are never judged so: generated parser tables have long lines and do change."""
    folder, name = posixpath.split(path)
    if name.endswith((".py", ".pyi", ".pyx", ".pxd")):
        return False
    if _RELEASE_FILE_NAME.search(name) or "LC_MESSAGES" in folder.split("/"):
        return True
    return len(text) > MINIFIED_LINE_LENGTH * (text.count("\n") + 1)


def select_documents(
    snapshot: RepoSnapshot,
    *,
    include_tests: bool = False,
    max_bytes: int = MAX_DOCUMENT_BYTES,
    settings: RankingSettings = RankingSettings(),
) -> list[tuple[str, str]]:
    """The (path, text) of every file worth indexing at the snapshot's commit.

    Source files (SOURCE_EXTENSIONS) of at most `max_bytes`, not binary, not vendored
    (VENDORED_DIRS) or generated (GENERATED_SUFFIXES), and not tests unless asked: not by
    their path, nor (unless settings.index_test_modules) by their content (is_test_code).
    Nor (unless settings.index_bundled_assets) copies of other projects' assets (is_bundled_asset).
    """
    documents = []
    for entry in snapshot.files():
        if entry.size > max_bytes or not is_indexed_path(entry.path, include_tests=include_tests):
            continue
        if snapshot.is_binary(entry.path):
            continue
        text = snapshot.read_text(entry.path)
        if not include_tests and not settings.index_test_modules and is_test_code(entry.path, text):
            continue
        if not settings.index_bundled_assets and is_bundled_asset(entry.path, text):
            continue
        documents.append((entry.path, text))
    return documents
