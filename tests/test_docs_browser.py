"""The documentation site in a real headless Chromium (Selenium with Debian's chromium and
chromium-driver, as tests/test_inspector_browser.py drives it): the site is built, served from its
folder on loopback, and its index, a guide and the CLI reference render with their title, the
navigation and their content; so do the generated settings and events references.

    MAGIS_SCREENSHOTS=docs/images .venv/bin/python -m pytest tests/test_docs_browser.py

also saves the pages' screenshots there (docs-index.png, docs-guide.png, docs-cli.png, docs-settings.png, docs-events.png)."""
from __future__ import annotations

import functools
import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from test_inspector_browser import CHROMEDRIVER, CHROMIUM, NO_SELENIUM, browser, page_errors, screenshot, wait_for  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent
pytest.importorskip("mkdocs", reason="the documentation's packages are not installed: pip install -e '.[docs]'")
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None, reason="chromium not installed: apt-get install chromium chromium-driver"),
    pytest.mark.skipif(bool(NO_SELENIUM), reason=NO_SELENIUM or "-"),
]
PAGES = [  # (path under the site, screenshot, its entry in the navigation, text its content holds)
    ("", "docs-index.png", "Home", ""),
    ("guides/grading/", "docs-guide.png", "Grading without Docker", ""),
    ("reference/cli/", "docs-cli.png", "CLI", "magis-ray submit [OPTIONS] ISSUE"),
    ("reference/settings/", "docs-settings.png", "Settings", "MAGIS_TOP_K"),
    ("reference/events/", "docs-events.png", "Events", "Tag RunStarted."),
]


@pytest.fixture(scope="module")
def site_url(tmp_path_factory):
    """The site, built as CI builds it, served from its folder by a loopback HTTP server."""
    folder = tmp_path_factory.mktemp("site")
    built = subprocess.run([str(Path(sys.executable).parent / "mkdocs"), "build", "--strict", "--quiet", "--site-dir", str(folder)],
                           cwd=ROOT, capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert built.returncode == 0, built.stderr

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            """No access log: the test's output is its assertions."""

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, name="docs-site", daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    thread.join()


@pytest.mark.parametrize("path, picture, entry, content", PAGES, ids=[p[1].removesuffix(".png") for p in PAGES])
def test_a_page_of_the_site_renders_with_its_navigation(site_url, browser, tmp_path, path, picture, entry, content):
    from selenium.webdriver.common.by import By

    browser.get(site_url + path)
    wait_for(browser, lambda d: d.execute_script("return document.readyState") == "complete", f"{path or 'the index'} loads")
    assert browser.title.endswith("magis-ray"), browser.title
    nav = browser.find_element(By.CSS_SELECTOR, "nav.md-nav--primary")
    for section in ("Getting started", "Guides", "Reference", "Explanations", "Results"):
        assert nav.find_elements(By.XPATH, f".//*[normalize-space(text())='{section}']"), section
    active = [link.get_attribute("textContent").strip() for link in nav.find_elements(By.CSS_SELECTOR, ".md-nav__link--active")]
    assert entry in active, active  # the navigation marks the page shown
    article = browser.find_element(By.CSS_SELECTOR, "article.md-content__inner")
    assert article.find_element(By.TAG_NAME, "h1").text.strip()
    if content:
        assert content in article.text
    assert not [error for error in page_errors(browser) if "favicon" not in error]
    screenshot(browser, picture, tmp_path)
