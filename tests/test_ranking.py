"""BM25 file localization (actors/code/ranking.py)."""
from __future__ import annotations

import random
from collections import Counter

import pytest
from gitfixtures import make_repo
from rank_bm25 import BM25Okapi

from magis_ray.actors.code.ranking import (
    BM25Index,
    code_tokens,
    crash_sites,
    document_token_counts,
    is_test_path,
    issue_query,
    localize_files,
    is_indexed_path,
    mentioned_paths,
    named_modules,
    plain_bm25_tokens,
    rank_files,
    select_documents,
)
from magis_ray.actors.code.repository import RepoSnapshot

# --- tokens ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("getUserName", ["getusername", "get", "user", "name"]),
        ("get_user_name", ["get_user_name", "get", "user", "name"]),
        ("HTTPServerError", ["httpservererror", "http", "server", "error"]),
        ("parse_URL2Path", ["parse_url2path", "parse", "url", "path"]),
        ("L031", ["l031"]),
        ("__init__", ["init"]),
        ("value", ["value"]),
        ("self.x = None  # 42", []),
        ("def f(self): return True", []),
        ("café_au_lait", ["café_au_lait", "café", "au", "lait"]),
        ("src/sqlfluff/rules/L031.py", ["src", "sqlfluff", "rules", "l031", "py"]),
        ("foo.bar(baz-qux)", ["foo", "bar", "baz", "qux"]),
    ],
)
def test_code_tokens(text, tokens):
    assert code_tokens(text) == tokens


def test_plain_tokens_do_not_split_identifiers():
    assert plain_bm25_tokens("getUserName(self, x_y) -> L031!") == ["getusername", "self", "x_y", "l031"]


def test_issue_query_adds_hints():
    assert issue_query("Crash in getUser", "see userCache") == [
        "crash", "getuser", "get", "user", "see", "usercache", "user", "cache"
    ]


def test_document_counts_weigh_the_path():
    counts = document_token_counts("pkg/rules/L031.py", "alias = 1\nalias = 2\n")
    assert counts["alias"] == 2 and counts["l031"] == 3 and counts["rules"] == 3
    plain = document_token_counts("pkg/rules/L031.py", "alias = 1", plain=True)
    assert plain == Counter({"pkg": 1, "rules": 1, "l031": 1, "py": 1, "alias": 1, "1": 1})


# --- a small, realistic corpus ----------------------------------------------------------------

CORPUS = {
    "src/shop/__init__.py": "from .cart import ShoppingCart\nfrom .users import UserProfile\n",
    "src/shop/cart.py": '''
class ShoppingCart:
    """Items a customer is about to buy."""

    def __init__(self, discount=None):
        self.items = {}
        self.discount = discount

    def add_item(self, sku, quantity=1, unit_price=0):
        self.items[sku] = (quantity, unit_price)

    def remove_item(self, sku):
        del self.items[sku]

    def total_price(self):
        subtotal = sum(q * p for q, p in self.items.values())
        if self.discount:
            subtotal = self.discount.apply(subtotal)
        return subtotal
''',
    "src/shop/payment.py": '''
class PaymentGateway:
    def charge(self, card_number, amount, currency="EUR"):
        if amount <= 0:
            raise ValueError("amount must be positive")
        return self._post("/charge", card_number=card_number, amount=amount)

    def refund(self, charge_id):
        return self._post("/refund", charge_id=charge_id)
''',
    "src/shop/users.py": '''
import re

EMAIL = re.compile(r"[^@]+@[^@]+")


class UserProfile:
    def __init__(self, first_name, last_name, email):
        self.first_name = first_name
        self.last_name = last_name
        self.email = email

    def get_user_name(self):
        return f"{self.first_name} {self.last_name}"

    def validate_email(self):
        return bool(EMAIL.fullmatch(self.email))
''',
    "src/shop/rules/L031.py": '''
"""Avoid table aliases in from clauses and join conditions."""


class Rule_L031:
    def _eval(self, segment):
        for alias in segment.aliases():
            yield self.violation(alias)
''',
    "src/shop/rules/L032.py": '''
"""Prefer specifying join keys instead of using USING."""


class Rule_L032:
    def _eval(self, segment):
        if segment.uses_using():
            yield self.violation(segment)
''',
    "src/shop/utils.py": '''
def format_currency(amount, currency="EUR"):
    return f"{amount:.2f} {currency}"


def slugify(text):
    return "-".join(text.lower().split())
''',
    "src/shop/http/client.py": '''
class HTTPClient:
    def __init__(self, base_url, timeout=10, retries=3):
        self.base_url = base_url
        self.timeout = timeout
        self.retries = retries

    def post(self, path, **payload):
        for attempt in range(self.retries):
            ...
''',
}
DOCUMENTS = sorted(CORPUS.items())


def top_paths(ranked):
    return [path for path, _ in ranked]


@pytest.mark.parametrize(
    ("issue", "expected"),
    [
        ("ShoppingCart.total_price ignores the discount after an item is removed", "src/shop/cart.py"),
        ("Refunds fail: the gateway charges the card twice", "src/shop/payment.py"),
        ("getUserName should include the middle name; validateEmail rejects valid emails", "src/shop/users.py"),
        ("Rule L031 wrongly flags table aliases in a self join", "src/shop/rules/L031.py"),
        ("HTTP client does not retry after a timeout", "src/shop/http/client.py"),
    ],
)
def test_the_obviously_relevant_file_ranks_first(issue, expected):
    ranked = localize_files(DOCUMENTS, issue, k=3)
    assert ranked[0][0] == expected
    assert [score for _, score in ranked] == sorted((score for _, score in ranked), reverse=True)


def test_identifier_splitting_finds_what_the_plain_baseline_misses():
    issue = "getUserName returns the wrong value"
    assert localize_files(DOCUMENTS, issue, k=1)[0][0] == "src/shop/users.py"
    assert "src/shop/users.py" not in top_paths(localize_files(DOCUMENTS, issue, k=10, plain=True))


def test_scores_equal_rank_bm25s_own():
    index = BM25Index(DOCUMENTS)
    reference = BM25Okapi([list(document_token_counts(p, t).elements()) for p, t in DOCUMENTS])
    query = issue_query("the cart total ignores the discount; cart total is wrong") + ["unknown"]
    assert index.scores(query) == pytest.approx(reference.get_scores(query))


def test_a_stack_trace_puts_the_named_file_first():
    issue = '''Removing an item from a ShoppingCart with a discount crashes total_price:

Traceback (most recent call last):
  File "/home/me/venv/lib/python3.11/site-packages/shop/utils.py", line 7, in slugify
KeyError: 'sku'
'''
    without_boost = rank_files(DOCUMENTS, issue_query(issue), k=3)
    assert without_boost[0][0] != "src/shop/utils.py"
    ranked = localize_files(DOCUMENTS, issue, k=3)
    assert ranked[0][0] == "src/shop/utils.py"
    assert ranked[0][1] > ranked[1][1]


def test_explicit_paths_and_modules_are_boosted_in_order_of_score():
    issue = "The cart discount is off. I think shop/utils.py or shop.rules.L032 is involved."
    # Without path words: "cart" names src/shop/cart.py as a word, the evidence this test leaves out.
    ranked = localize_files(DOCUMENTS, issue, k=4, settings=RankingSettings(path_weight=0.0, definition_weight=0.0))
    assert {path for path, _ in ranked[:2]} == {"src/shop/utils.py", "src/shop/rules/L032.py"}
    assert ranked[2][0] == "src/shop/cart.py"
    unboosted = dict(rank_files(DOCUMENTS, issue_query(issue), k=10))
    # among the boosted files, their own BM25 scores decide
    first, second = ranked[0][0], ranked[1][0]
    assert unboosted.get(first, 0) >= unboosted.get(second, 0)


def test_a_traceback_s_innermost_repository_frame_outranks_the_other_named_files():
    issue = '''Checkout crashes when the cart has an unknown SKU (see shop/payment.py for the caller):

Traceback (most recent call last):
  File "/app/checkout.py", line 3, in <module>
  File "/venv/site-packages/shop/cart.py", line 17, in total_price
  File "/venv/site-packages/shop/utils.py", line 7, in slugify
  File "/usr/lib/python3.11/re.py", line 99, in sub
KeyError: 'sku'
'''
    ranked = top_paths(localize_files(DOCUMENTS, issue, k=4))
    assert ranked[0] == "src/shop/utils.py"  # the innermost frame in the repository
    assert set(ranked[1:3]) == {"src/shop/cart.py", "src/shop/payment.py"}  # then the other files named


def test_first_outranks_boosted_outranks_the_rest():
    ranked = rank_files(DOCUMENTS, ["discount", "cart", "total"], k=3, boosted=["src/shop/utils.py"], first=["src/shop/payment.py"])
    assert top_paths(ranked) == ["src/shop/payment.py", "src/shop/utils.py", "src/shop/cart.py"]
    both = rank_files(DOCUMENTS, ["discount"], k=2, boosted=["src/shop/utils.py"], first=["src/shop/utils.py"])
    assert both[0][0] == "src/shop/utils.py" and both[0][1] == pytest.approx(2 * (both[1][1] + 1))  # raised once


def test_boost_ignores_paths_outside_the_index_and_files_without_any_match_stay_out():
    ranked = rank_files(DOCUMENTS, ["discount"], k=10, boosted=["not/indexed.py"])
    assert top_paths(ranked) == ["src/shop/cart.py"]
    assert rank_files(DOCUMENTS, ["discount"], k=0) == []
    assert rank_files([], ["discount"], k=5) == []
    assert rank_files([("a.py", ""), ("b.py", "")], ["x"], k=5) == []
    with pytest.raises(ValueError):
        rank_files(DOCUMENTS, ["discount"], k=-1)


def test_ranking_is_deterministic():
    twins = [("b/same.py", "alpha beta\n"), ("a/same.py", "alpha beta\n"), *DOCUMENTS]
    assert rank_files(twins, ["alpha"], k=5) == rank_files(list(reversed(twins)), ["alpha"], k=5)
    ranked = rank_files(twins, ["alpha"], k=5)
    assert top_paths(ranked) == ["a/same.py", "b/same.py"] and ranked[0][1] == ranked[1][1]
    shuffled = DOCUMENTS[:]
    random.Random(7).shuffle(shuffled)
    issue = "cart total and discount, user email, payment refund"
    assert localize_files(shuffled, issue, k=8) == localize_files(DOCUMENTS, issue, k=8)


# --- mentions ----------------------------------------------------------------------------------

PATHS = [
    "src/shop/__init__.py",
    "src/shop/cart.py",
    "src/shop/rules/__init__.py",
    "src/shop/rules/L031.py",
    "src/shop/http/__init__.py",
    "src/shop/http/client.py",
    "src/shop/legacy/cart.py",
    "docs/__init__.py",
    "setup.py",
]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("see src/shop/rules/L031.py.", ["src/shop/rules/L031.py"]),
        ("in shop/http/client.py:12: in post", ["src/shop/http/client.py"]),
        ("the file client.py", ["src/shop/http/client.py"]),
        ("cart.py is ambiguous but legacy/cart.py is not", ["src/shop/cart.py", "src/shop/legacy/cart.py", ]),
        ('File "/usr/lib/python3/site-packages/shop/cart.py", line 9, in total', ["src/shop/cart.py"]),
        (r"File C:\work\shop\rules\L031.py, line 2", ["src/shop/rules/L031.py"]),
        ("https://github.com/o/r/blob/main/src/shop/http/client.py#L10", ["src/shop/http/client.py"]),
        ("import shop.rules.L031 then shop.cart.ShoppingCart.total()", ["src/shop/rules/L031.py", "src/shop/cart.py"]),
        ("shop.http is a package", []),  # packages set the scene; their __init__ is no lead
        ("__init__.py is in every folder", []),  # fits 4 files: names none
        ("python setup.py install; ../../setup.py", ["setup.py"]),
        ("foo/bar.py, self.cart, e.g. np.float64, version 1.2.3", []),
        ("client.py then cart.py then client.py", ["src/shop/http/client.py", "src/shop/cart.py", "src/shop/legacy/cart.py"]),
    ],
)
def test_mentioned_paths(text, expected):
    assert mentioned_paths(text, PATHS) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('Traceback (most recent call last):\n  File "shop/cart.py", line 1\n  File "/x/shop/http/client.py", line 2\nError',
         ["src/shop/http/client.py"]),
        # chained exceptions: each traceback's innermost frame, in order
        ('Traceback (most recent call last):\n  File "a/shop/cart.py", line 1\nKeyError\n\nDuring handling...\n'
         'Traceback (most recent call last):\n  File "/s/shop/rules/L031.py", line 5\n  File "/usr/lib/json.py", line 2\n',
         ["src/shop/cart.py", "src/shop/rules/L031.py"]),
        ("shop/cart.py:12: in total\n    x()\nsrc/shop/http/client.py:40: KeyError\n", ["src/shop/http/client.py"]),
        ('File "/venv/shop/http/client.py", line 9\n  File "cart.py", line 3', ["src/shop/http/client.py"]),  # cart.py: 2 files
        ('File "C:\\work\\shop\\rules\\L031.py", line 2', ["src/shop/rules/L031.py"]),
        ("see shop/cart.py and client.py", []),  # named, but not in a stack trace
    ],
)
def test_crash_sites(text, expected):
    assert crash_sites(text, PATHS) == expected


def test_named_modules_takes_only_distinctive_module_names():
    paths = [*PATHS, "src/shop/rules/L032.py", "src/shop/linted_file.py", "src/shop/base.py", "a/utils_2.py", "b/utils_2.py",
             "c/utils_2.py", "d/utils_2.py", "src/shop/notes_1.txt"]
    text = "Rules L032 and L031 disagree on base and cart; linted_file and utils_2 too; notes_1 as well."
    assert named_modules(text, paths) == ["src/shop/rules/L032.py", "src/shop/rules/L031.py", "src/shop/linted_file.py"]
    assert named_modules("l031 __init__ cart", paths) == []


# --- which files are indexed ---------------------------------------------------------------------


def test_is_test_path():
    assert is_test_path("tests/test_cart.py") and is_test_path("pkg/tests/helpers.py")
    assert is_test_path("pkg/test_cart.py") and is_test_path("pkg/cart_test.py") and is_test_path("conftest.py")
    assert not is_test_path("django/test/testcases.py") and not is_test_path("sympy/testing/runtests.py")
    assert not is_test_path("src/_pytest/unittest.py") and not is_test_path("pkg/contest.py")


def test_documentation_and_examples_are_not_indexed():
    assert not is_indexed_path("doc/conf.py") and not is_indexed_path("docs/source/conf.py")
    assert not is_indexed_path("examples/01_basic_api_usage.py") and not is_indexed_path("pkg/example/demo.py")
    assert is_indexed_path("pkg/docstrings.py") and is_indexed_path("django/contrib/admindocs/views.py")


def test_select_documents(tmp_path):
    files = {
        "pkg/core.py": "def f():\n    return 1\n",
        "pkg/test/testcases.py": "class TestCase: ...\n",
        "pkg/ext.pyx": "cdef int x\n",
        "tests/test_core.py": "def test_f(): ...\n",
        "pkg/conftest.py": "",
        "pkg/_vendor/six.py": "# vendored\n",
        "node_modules/x/index.js": "module.exports = 1\n",
        "pkg/api_pb2.py": "# generated\n",
        "README.md": "# docs\n",
        "data.json": "{}\n",
        "pkg/huge.py": "x = 1\n" * 100_000,
        "pkg/weird.py": b"\x00\x01\x02binary",
        "docs/conf.py": "project = 'pkg'\n",
    }
    repo, commit = make_repo(tmp_path / "repo", files)
    snapshot = RepoSnapshot.open(tmp_path / "repo", commit)
    documents = select_documents(snapshot)
    assert documents == [
        ("pkg/core.py", files["pkg/core.py"]),
        ("pkg/ext.pyx", files["pkg/ext.pyx"]),
        ("pkg/test/testcases.py", files["pkg/test/testcases.py"]),
    ]
    with_tests = [path for path, _ in select_documents(snapshot, include_tests=True)]
    assert with_tests == ["pkg/conftest.py", "pkg/core.py", "pkg/ext.pyx", "pkg/test/testcases.py", "tests/test_core.py"]
    assert "pkg/huge.py" in [path for path, _ in select_documents(snapshot, max_bytes=10**6)]


# --- symbol evidence and what the new ranking leaves out (issue 15) --------------------------------

from magis_ray.actors.code.ranking import PREVIOUS_RANKING, FileRanker, RankingSettings, is_test_code  # noqa: E402
from magis_ray.actors.code.symbols import (  # noqa: E402
    SymbolIndex,
    defined_names,
    is_compound_name,
    is_test_module,
    issue_names,
    without_imports,
)


def test_defined_names_and_issue_names():
    text = "class Contains(Boolean):\n    def as_set(self):\n        async def inner(): ...\n\nx = Contains\n"
    assert defined_names(text) == {"Contains", "as_set", "inner"}
    assert issue_names("Contains.as_set fails in ./sympy/functions/piecewise.py, see https://x.org/a/b") == {
        "Contains", "as_set", "fails", "in", "see", "https"}
    assert [is_compound_name(n) for n in ("as_set", "Contains", "getUser", "L031", "copy", "in", "list", "URL")] == [
        True, True, True, True, False, None, None, False]


def test_symbol_index_weighs_rare_names_and_plain_names_apart():
    index = SymbolIndex([{"Contains", "copy"}, {"copy"}, {"as_set", "copy"}, set()])
    compound, plain = index.scores({"Contains", "as_set", "copy", "missing"})
    assert compound[0] == pytest.approx(1.0) and compound[2] == pytest.approx(1.0) and compound[1] == 0
    assert plain[0] == plain[1] == plain[2] == pytest.approx(0.2075, abs=1e-3) and plain[3] == 0


def test_without_imports_keeps_code_and_drops_every_import_form():
    text = "import os\nfrom .a import (\n    b,\n    c,\n)\nfrom x import y, \\\n    z\ndef f():\n    import json\n    return 1\n"
    assert without_imports(text) == "\n\n\ndef f():\n\n    return 1\n"


def test_test_code_is_found_by_content_and_by_a_top_level_testing_folder():
    tests = "import pytest\n\nclass TestCart:\n    def test_add(self): ...\n    def test_remove(self): ...\n"
    library = "def run_tests(paths): ...\ndef test(label): ...\ndef helper(): ...\ndef other(): ...\n"
    assert is_test_module(tests) and not is_test_module(library) and not is_test_module("x = 1\n")
    assert is_test_code("testing/python/metafunc.py", "x = 1\n") and is_test_code("src/pkg/checks.py", tests)
    assert not is_test_code("sympy/testing/runtests.py", library)


SYMBOL_CORPUS = {
    # Re-exports every name and uses the issue's words: ranked high by BM25 over all its words.
    "shop/__init__.py": "from shop.basket import Basket, BasketDiscountPolicy, apply_discount_policy\n"
                        "from shop.orders import (order_total, order_total_discount, order_total_policy,\n"
                        "    order_basket_total, basket_discount_policy, order_discount_policy)\n",
    "shop/basket.py": "class Basket:\n    def total(self):\n        return sum(self.items)\n\n"
                      + "def unrelated_helper(values, limit=3):\n    return [v for v in values if v < limit]\n" * 6
                      + "class BasketDiscountPolicy:\n    def apply_discount_policy(self, basket):\n        return basket\n",
    "shop/orders.py": "def order_total(basket, discount, policy):\n    return basket.total() - discount - policy\n",
    "shop/views.py": "def page(basket):\n    discount = policy = basket\n    return discount, policy, basket\n"
                     "# an order's basket discount policy is ignored when the basket discount policy ignores it\n",
}


SYMBOL_DOCS = sorted({**CORPUS, **SYMBOL_CORPUS}.items())  # enough files for words to be rare


def test_the_file_defining_the_named_class_outranks_files_that_use_its_words(tmp_path):
    repo, commit = make_repo(tmp_path / "repo", dict(SYMBOL_DOCS))
    documents = select_documents(RepoSnapshot.open(tmp_path / "repo", commit))
    issue = "BasketDiscountPolicy.apply_discount_policy ignores the basket discount policy of an order"
    assert top_paths(localize_files(documents, issue, k=4))[0] == "shop/basket.py"
    without_symbols = RankingSettings(symbol_weight=0.0)
    assert top_paths(localize_files(documents, issue, k=4, settings=without_symbols))[0] != "shop/basket.py"


def test_a_re_exporting_init_no_longer_outranks_the_module_that_defines_the_names():
    issue = "the order total is wrong with a discount policy"
    assert top_paths(localize_files(SYMBOL_DOCS, issue, k=4, settings=PREVIOUS_RANKING))[0] == "shop/__init__.py"
    ranked = top_paths(localize_files(SYMBOL_DOCS, issue, k=12))
    assert ranked[0] == "shop/orders.py" and "shop/__init__.py" not in ranked  # its document is empty without imports


def test_an_import_line_counts_less_than_a_crash_site_or_a_path_in_prose():
    docs = SYMBOL_DOCS
    issue = ('>>> from shop.views import page\n>>> page(b)\nTraceback (most recent call last):\n'
             '  File "/venv/shop/orders.py", line 3, in order_total\nTypeError\n')
    ranked = top_paths(localize_files(docs, issue, k=4))
    assert ranked[0] == "shop/orders.py" and ranked[1] == "shop/views.py"
    ranker = FileRanker(docs)
    evidence = ranker.evidence("see shop/basket.py\n" + issue)
    assert evidence.imported == ("shop/views.py",) and evidence.named == ("shop/basket.py", "shop/orders.py")
    assert evidence.crashed == ("shop/orders.py",)
    weak_imports = ranker.weigh(evidence, 4, RankingSettings(import_mention_weight=0.0, mention_weight=1.0))
    assert top_paths(weak_imports)[:2] == ["shop/orders.py", "shop/basket.py"]


def test_many_named_files_share_the_mention_weight():
    docs = SYMBOL_DOCS
    ranker = FileRanker(docs)
    evidence = ranker.evidence("see shop/views.py shop/orders.py shop/basket.py src/shop/cart.py")
    shared = dict(ranker.weigh(evidence, 20))
    whole = dict(ranker.weigh(evidence, 20, RankingSettings(mention_share=float("inf"))))
    assert len(evidence.named) == 4
    assert whole["shop/views.py"] - shared["shop/views.py"] == pytest.approx(0.5 - 0.5 * 2 / 4)


def test_select_documents_leaves_out_test_code_by_content_unless_the_settings_index_it(tmp_path):
    files = {"pkg/core.py": "def f():\n    return 1\n", "testing/helpers.py": "def make(): ...\n",
             "pkg/checks.py": "def test_one(): ...\ndef test_two(): ...\n"}
    repo, commit = make_repo(tmp_path / "repo", files)
    snapshot = RepoSnapshot.open(tmp_path / "repo", commit)
    assert [p for p, _ in select_documents(snapshot)] == ["pkg/core.py"]
    assert [p for p, _ in select_documents(snapshot, settings=PREVIOUS_RANKING)] == ["pkg/checks.py", "pkg/core.py", "testing/helpers.py"]


def test_html_comments_and_urls_leave_the_query_but_urls_still_name_files():
    docs = SYMBOL_DOCS
    issue = "<!-- policy policy policy discount -->\nwrong page, https://github.com/o/r/blob/main/shop/views.py#L2 basket"
    ranked = top_paths(localize_files(docs, issue, k=4))
    assert ranked[0] == "shop/views.py"
    ranker = FileRanker(docs)
    assert ranker.evidence(issue).named == ("shop/views.py",)
    marked = FileRanker(docs, RankingSettings(strip_issue_markup=False)).evidence(issue).bm25
    assert not (ranker.evidence(issue).bm25 == marked).all()
    with pytest.raises(ValueError):
        ranker.weigh(ranker.evidence(issue), 3, RankingSettings(index_imports=True))


def test_run_settings_name_the_ranking_by_which_the_custodian_ranks():
    # A version 1 log keeps "previous" through upcasting: tests/test_schema_evolution.py.
    from magis_ray.actors.code.ranking import ranking_settings
    from magis_ray.events.schema import RunSettings

    assert ranking_settings(RunSettings().ranking) == RankingSettings()
    assert ranking_settings("previous") == PREVIOUS_RANKING and ranking_settings("symbols") == RankingSettings()
    with pytest.raises(ValueError, match="unknown ranking"):
        ranking_settings("bm42")


# --- path evidence (actors/code/path_evidence.py) ----------------------------------------------

from magis_ray.actors.code.path_evidence import (  # noqa: E402
    PathWordIndex,
    modules_under_test,
    path_words,
    project_names,
    word_stem,
)
from magis_ray.actors.code.ranking import emphasized, without_markup  # noqa: E402


def test_the_project_name_is_no_evidence_for_the_file_defining_a_class_of_that_name():
    docs = sorted({**dict(SYMBOL_DOCS), "shop/app.py": "class Shop:\n    def run(self):\n        return self\n"}.items())
    issue = "Shop: order_total ignores the discount"
    assert project_names(path for path, _ in docs) == {"shop"}
    counted = top_paths(localize_files(docs, issue, k=20, settings=RankingSettings(ignore_project_names=False)))
    ignored = top_paths(localize_files(docs, issue, k=20))
    assert counted.index("shop/app.py") < ignored.index("shop/app.py")  # it kept only its path's BM25 match


def test_a_module_whose_name_the_issue_uses_as_a_word_moves_up_by_how_rare_the_word_is_in_code():
    docs = sorted({**dict(SYMBOL_DOCS),
                   "shop/ext/napoleon.py": "def convert(lines):\n    return [line.strip() for line in lines]\n",
                   "shop/render.py": "def render_docstring(docstring, section):\n"
                                     "    # renders the docstring section of a page\n    return docstring, section\n"}.items())
    issue = "the napoleon extension shows the docstring section of a page wrong"
    ranker = FileRanker(docs)
    evidence = ranker.evidence(issue)
    assert evidence.path_words[ranker.paths.index("shop/ext/napoleon.py")] == pytest.approx(1.0)
    assert evidence.path_words[ranker.paths.index("shop/render.py")] == 0
    # (render.py defines render_docstring: the definitions field, left out here, would favour it.)
    assert top_paths(ranker.weigh(evidence, 3, RankingSettings(path_weight=0.0, definition_weight=0.0)))[0] == "shop/render.py"
    assert top_paths(ranker.weigh(evidence, 3, RankingSettings(path_weight=0.8, definition_weight=0.0)))[0] == "shop/ext/napoleon.py"
    # A path word every file's code uses ("page" in views.py, render.py...) weighs less than one none uses.
    index = PathWordIndex(["a/page.py", "a/napoleon.py"], {"page": 5, "napoleon": 1}, 10)
    page, napoleon = index.scores(["page", "napoleon"])
    assert 0 < page < napoleon == pytest.approx(1.0)
    assert path_words("src/pkg/core/ext/napoleon/__init__.py", frozenset({"pkg"})) == ["ext", "napoleon"]


def test_a_quoted_test_module_names_the_module_it_tests():
    paths = ["sphinx/pycode/ast.py", "sphinx/pycode/__init__.py", "sphinx/ast.py", "sphinx/ext/autodoc/__init__.py"]
    text = ("at https://github.com/sphinx-doc/sphinx/blob/e0b1/tests/test_pycode_ast.py#L57 and test_ext_autodoc.py;"
            " my test_repro.py, test_ast.py (two modules fit) and foo_test.py")
    assert modules_under_test(text, paths) == ["sphinx/pycode/ast.py", "sphinx/ext/autodoc/__init__.py"]
    docs = sorted({**dict(SYMBOL_DOCS), "shop/orders_export.py": "def export(orders):\n    return list(orders)\n"}.items())
    issue = "the total is wrong with a discount policy; add a case to tests/test_orders_export.py"
    ranker = FileRanker(docs)
    assert ranker.evidence(issue).named == ("shop/orders_export.py",)
    assert top_paths(ranker.rank(issue, k=3))[0] == "shop/orders_export.py"
    unnamed = RankingSettings(mention_weight=0.0, definition_weight=0.0)  # export() would name it too
    assert top_paths(ranker.weigh(ranker.evidence(issue), 3, unnamed))[0] != "shop/orders_export.py"


def test_environment_reports_leave_the_query():
    report = "wrong total\n<details>\ncommit: None\nxarray: 2022.10.0\n- Python version: 3.8.1\nzarr: 2.13.3\r\nattrs==21.4.0\nMatplotlib 3.6.3\n</details>\n"
    assert without_markup(report).split() == ["wrong", "total", "<details>", "</details>"]
    docs = sorted({**dict(SYMBOL_DOCS), "shop/backends/zarr.py": "def open_zarr(store):\n    return store\n"}.items())
    issue = "the order total is wrong\nzarr: 2.13.3\nnumpy: 1.23.4\n"
    assert "shop/backends/zarr.py" in top_paths(FileRanker(docs, RankingSettings(strip_issue_markup=False)).rank(issue, k=20))
    assert "shop/backends/zarr.py" not in top_paths(FileRanker(docs).rank(issue, k=20))


def test_path_words_match_the_forms_an_issue_uses():
    assert [word_stem(w) for w in ("mocked", "mocking", "mock", "typehints", "modules", "module", "process")] == [
        "mock", "mock", "mock", "typehint", "modul", "modul", "process"]
    index = PathWordIndex(["ext/mock.py", "ext/render.py"], {}, 10)
    assert list(index.scores(["classes", "mocked"])) == [pytest.approx(1.0), 0.0]
    assert list(index.scores(["renders"])) == [0.0, pytest.approx(1.0)]


def test_the_title_and_inline_code_count_twice():
    body = "the page of the shop shows the discount policy wrong on every page: page, discount, policy"
    assert emphasized("BasketDiscountPolicy is wrong\n\n" + body + " `x.y(z)` ```\nblock\n```") == "BasketDiscountPolicy is wrong\nx.y(z)"
    # Without the definitions field, in which basket.py's class would win on its own.
    ranker = FileRanker(SYMBOL_DOCS, RankingSettings(definition_weight=0.0))
    assert top_paths(ranker.rank(body + "\n\nBasketDiscountPolicy is wrong", k=2))[0] == "shop/views.py"
    assert top_paths(ranker.rank("BasketDiscountPolicy is wrong\n\n" + body, k=2))[0] == "shop/basket.py"
    assert top_paths(ranker.rank(body + "\n\n`BasketDiscountPolicy` is wrong", k=2))[0] == "shop/basket.py"


def test_the_language_of_a_code_block_is_no_word_of_the_issue():
    assert without_markup("a\n```julia\nIn [1]: f(x)\n```\n > ~~~ python\n") == "a\n```\nIn [1]: f(x)\n```\n > ~~~\n"
    docs = sorted({**dict(SYMBOL_DOCS), "shop/julia.py": "def print_code(expr):\n    return expr\n"}.items())
    issue = "wrong total\n```julia\nIn [1]: order_total(b, 1, 2)\n```\n"
    assert "shop/julia.py" in top_paths(FileRanker(docs, RankingSettings(strip_issue_markup=False)).rank(issue, k=20))
    assert "shop/julia.py" not in top_paths(FileRanker(docs).rank(issue, k=20))


# --- the definitions field, bundled assets, generated companions ------------------------------------

from magis_ray.actors.code.path_evidence import generated_companions  # noqa: E402
from magis_ray.actors.code.ranking import definition_token_counts, is_bundled_asset  # noqa: E402

REPORTS_DOCS = sorted({
    **dict(SYMBOL_DOCS),
    # Defines what the issue is about, in names whose words the issue uses.
    "shop/serial.py": "def report_to_json(r):\n    return dict(r)\n\n\ndef chained_causes(e):\n    return [e.__cause__]\n",
    # Says the issue's words in its text, more often, and defines nothing of the kind.
    "shop/notify.py": "def send(message):\n    # json for the exception, chained or not: the exception as json\n"
                      "    # (an exception chained to another keeps its json)\n    return message\n",
}.items())


def test_the_words_of_the_names_a_file_defines_are_a_field_of_their_own():
    assert definition_token_counts({"report_to_json", "ReportToJson"}) == Counter(
        {"report_to_json": 1, "reporttojson": 1, "report": 2, "json": 2})
    issue = "a report sent as json loses the chained exception"
    ranker = FileRanker(REPORTS_DOCS)
    evidence = ranker.evidence(issue)
    assert evidence.definitions[ranker.paths.index("shop/serial.py")] == pytest.approx(1.0)
    assert evidence.definitions[ranker.paths.index("shop/notify.py")] == 0
    assert top_paths(ranker.weigh(evidence, 3, RankingSettings(definition_weight=0.0)))[0] == "shop/notify.py"
    assert top_paths(ranker.weigh(evidence, 3))[0] == "shop/serial.py"
    # The ranking before symbol evidence has no such field.
    assert top_paths(localize_files(REPORTS_DOCS, issue, k=3, settings=PREVIOUS_RANKING))[0] == "shop/notify.py"


def test_bundled_copies_of_other_projects_assets_are_not_indexed(tmp_path):
    source_js = "function search(query) {\n  return index.find(query);\n}\n" * 5
    files = {
        "pkg/page.py": "def render_page(page):\n    return page\n",
        "pkg/static/searchtools.js": source_js,  # the project's own script
        "pkg/static/jquery-3.5.1.js": source_js,  # a release of another project
        "pkg/static/jquery.js": "!function(e){" + "var page=e;" * 400 + "}\n",  # minified
        "pkg/locale/de/LC_MESSAGES/pkg.js": "Documentation.addTranslations({\"page\": \"Seite\"});\n",
        "pkg/format/cds_parsetab.py": "_lr_action_items = {" + "'PAGE':([0,1,2,],[3,4,5,])," * 300 + "}\n",  # long lines, Python
    }
    repo, commit = make_repo(tmp_path / "repo", files)
    snapshot = RepoSnapshot.open(tmp_path / "repo", commit)
    assert [p for p, _ in select_documents(snapshot)] == ["pkg/format/cds_parsetab.py", "pkg/page.py", "pkg/static/searchtools.js"]
    assert len(select_documents(snapshot, settings=PREVIOUS_RANKING)) == len(files)
    assert [is_bundled_asset(p, t) for p, t in sorted(files.items())] == [False, True, False, True, True, False]


def test_a_generated_module_ranks_just_below_the_module_it_is_generated_from():
    grammar = "def p_unit(p):\n    'unit : UNIT_NAME | UNIT_NAME POWER'\n    p[0] = p[1]\n\n\ndef parse_unit(text):\n    return text\n"
    table = "# This file was automatically generated from ply. Do not edit.\n_lr_action_items = {'UNIT':([0,],[1,])}\n"
    docs = sorted({**dict(SYMBOL_DOCS), "shop/format/cds.py": grammar, "shop/format/cds_parsetab.py": table,
                   "shop/format/cds_lextab.py": "_lexliterals = ''\n",  # not marked as generated
                   "shop/format/generic_parsetab.py": table}.items())  # its source is absent
    assert [(docs[g][0], docs[s][0]) for g, s in generated_companions(docs)] == [("shop/format/cds_parsetab.py", "shop/format/cds.py")]
    ranker = FileRanker(docs)
    evidence = ranker.evidence("parse_unit reads the unit 10+3 wrongly")
    scores = dict(ranker.weigh(evidence, 20))
    assert scores["shop/format/cds_parsetab.py"] == pytest.approx(0.99 * scores["shop/format/cds.py"])
    assert top_paths(ranker.weigh(evidence, 2)) == ["shop/format/cds.py", "shop/format/cds_parsetab.py"]
    # Without the rule it keeps its own score: that of the same table whose source is absent.
    alone = dict(ranker.weigh(evidence, 20, RankingSettings(generated_share=0.0)))
    assert alone["shop/format/cds_parsetab.py"] == alone["shop/format/generic_parsetab.py"] < 0.5 * alone["shop/format/cds.py"]
