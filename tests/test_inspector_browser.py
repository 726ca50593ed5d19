"""The inspector in a real headless Chromium that runs the pages' JavaScript (Selenium with
Debian's chromium and chromium-driver; no browser is downloaded): a run written into the store during
the test appears in the list and its page turns "finished", both without a reload; compare marks the first
divergence; search finds a rejecting review; a <script> in a problem statement is shown as text.

    MAGIS_SCREENSHOTS=docs/images .venv/bin/python -m pytest tests/test_inspector_browser.py

also writes the inspector guide's screenshots (inspector-runs.png, inspector-run.png) there, and the failed- and
live-run checks' pictures (inspector-failed-run.png, inspector-failed-task.png, inspector-live-run.png)."""
from __future__ import annotations

import os
import shutil
import struct
import time
from pathlib import Path

import msgspec
import pytest
from inspecting import FIXED, REJECTED, serve
from runs import constructed_run, fixed_new_events, repo_for

from magis_ray.events import schema as ev

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
CHROMEDRIVER = shutil.which("chromedriver") or ("/usr/bin/chromedriver" if Path("/usr/bin/chromedriver").exists() else None)
try:
    import selenium  # noqa: F401
    NO_SELENIUM = ""
except ImportError:
    NO_SELENIUM = "selenium not installed: pip install -e '.[test]'"
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None, reason="chromium not installed: apt-get install chromium chromium-driver"),
    pytest.mark.skipif(bool(NO_SELENIUM), reason=NO_SELENIUM or "-"),
]

SCRIPT = '<script>document.title="pwned"</script>'
LIVE = "b1e5c0ffee01"  # the run the first test writes into the store while the browser watches
WAIT_S = 180  # a loaded machine is slow to start the browser and to render


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    profile = tmp_path_factory.mktemp("chromium-profile")
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--window-size=1400,1000"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    yield driver
    driver.quit()


def wait_for(driver, condition, what: str, timeout: float = WAIT_S):
    """The condition's first true value; a part swapped in meanwhile (a stale element) is looked up again."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(driver, timeout, poll_frequency=0.2, ignored_exceptions=(NoSuchElementException, StaleElementReferenceException))
    return wait.until(lambda d: condition(d), message=what)


def page_errors(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def screenshot(driver, name: str, tmp: Path) -> None:
    """The page as a PNG: into MAGIS_SCREENSHOTS when set (the inspector guide's pictures), else tmp."""
    folder = Path(os.environ.get("MAGIS_SCREENSHOTS") or tmp)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / name
    driver.save_screenshot(str(target))
    data = target.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", data[16:24])[0] >= 1000
    assert len(data) > 30_000  # a blank page compresses to a few kilobytes


def test_a_run_written_meanwhile_appears_and_finishes_live_with_its_script_shown_as_text(inspector_url, inspector_store, browser,
                                                                                       tmp_path):
    """The list and the run's page follow a run whose events reach the store while they are open,
    appended by another process than the inspector's, as a run's driver appends them (a submit's
    events reach the store as it goes: tests/test_resume.py stops one at a chosen event)."""
    from selenium.webdriver.common.by import By

    from magis_ray.store import open_store

    repo, base = repo_for(tmp_path)
    pairs = constructed_run(repo, base)
    (actor, opening), rest = pairs[0], pairs[1:]
    opening = msgspec.structs.replace(opening, instance_id="calc__calc-1", problem_statement=f"mean() is wrong: {SCRIPT} runs on the page")
    events = fixed_new_events([(actor, opening), *rest], start=time.time(), id_prefix="e")
    # the run is working until the test has seen it so: its first events, then the rest from its first review on
    first_review = next(i for i, (_, event) in enumerate(pairs) if isinstance(event, ev.ReviewIssued))
    working, ending = events[:first_review], events[first_review:]

    browser.get(inspector_url)
    wait_for(browser, lambda d: d.find_element(By.ID, "live-state").text == "live", "the list's event stream opens")
    browser.execute_script("window.notReloaded = true")
    with open_store(str(inspector_store)) as store:
        store.append(LIVE, 0, working)
    wait_for(browser, lambda d: d.find_element(By.XPATH, f"//tr[@data-run='{LIVE}']/td[text()='calc__calc-1']"),
             "the run's row appears in the list")
    assert browser.execute_script("return window.notReloaded") is True  # swapped in, not reloaded
    screenshot(browser, "inspector-runs.png", tmp_path)  # the list, with the run working
    wait_for(browser, lambda d: d.find_element(By.LINK_TEXT, LIVE).click() or True, "the run's link opens")
    wait_for(browser, lambda d: d.find_element(By.ID, "status").text == "running", "the run's page says running")
    wait_for(browser, lambda d: d.find_element(By.ID, "live-state").text == "live", "the page's event stream opens")
    browser.execute_script("window.notReloaded = true")
    # the problem statement's <script> is text on the page, and never ran
    issue_text = browser.find_element(By.CSS_SELECTOR, "#issue pre").text
    assert SCRIPT in issue_text
    assert browser.execute_script("return document.querySelectorAll('#issue script, main script').length") == 0
    assert "pwned" not in browser.title
    with open_store(str(inspector_store)) as store:
        store.append(LIVE, len(working), ending)
    wait_for(browser, lambda d: d.find_element(By.ID, "status").text == "finished", "the page turns finished")
    assert browser.execute_script("return window.notReloaded") is True
    assert browser.find_element(By.ID, "outcome").text == "patched"
    assert int(browser.execute_script("return document.body.dataset.refreshed")) >= 1
    assert "pwned" not in browser.title
    assert page_errors(browser) == []
    browser.set_window_size(1400, 2600)
    screenshot(browser, "inspector-run.png", tmp_path)
    browser.set_window_size(1400, 1000)


def test_compare_marks_the_first_divergence(inspector_url, browser):
    from selenium.webdriver.common.by import By

    browser.get(inspector_url + "compare")
    browser.find_element(By.NAME, "a").send_keys(REJECTED)
    browser.find_element(By.NAME, "b").send_keys(FIXED)
    browser.find_element(By.CSS_SELECTOR, "form.filters button").click()
    first = wait_for(browser, lambda d: next(iter(d.find_elements(By.ID, "first-divergence")), None), "the divergence is marked")
    assert "developer:T2" in first.text and "first divergence" in first.text
    assert len(browser.find_elements(By.CSS_SELECTOR, "tr.divergence.first")) == 1
    assert "First divergence in lane developer:T2, its step 4" in browser.find_element(By.CSS_SELECTOR, ".divergence-box").text
    browser.find_element(By.LINK_TEXT, "go to it").click()
    assert browser.execute_script("return location.hash") == "#first-divergence"
    assert page_errors(browser) == []


def test_search_finds_a_rejecting_review(inspector_url, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    browser.get(inspector_url)
    box = browser.find_element(By.CSS_SELECTOR, "form.quick input[name=q]")
    box.send_keys("rejected mean")
    box.send_keys(Keys.ENTER)
    results = wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "li.result"), "search results")
    assert {r.get_attribute("data-type") for r in results} == {"ReviewIssued"}
    assert "T1 attempt 1: sent back" in results[0].text and "Still wrong" in results[0].text
    results[0].find_element(By.TAG_NAME, "a").click()
    wait_for(browser, lambda d: d.find_element(By.ID, "status").text == "finished", "the review's run opens")
    assert browser.execute_script("return location.hash").startswith("#v")
    assert page_errors(browser) == []


def test_a_failed_run_and_a_live_run_show_why_and_what_they_are_doing(inspector_store, browser, tmp_path):
    """Screenshots of a failed run (its reason in the header, a failed task's reason under it) and a
    live run whose header says what it does now, and changes, without a reload, as events come."""
    from selenium.webdriver.common.by import By

    from magis_ray.events import schema as ev
    from magis_ray.events.codec import new_event
    from magis_ray.store import open_store

    reason = "the model endpoint refused the connection (http://127.0.0.1:9/v1)"
    started = ev.RunStarted(instance_id="calc__calc-9", repo="calc/calc", base_commit="c" * 40,
                            problem_statement="mean() is wrong\n\nIt divides by n - 1.", settings=ev.RunSettings(tests=True))
    with open_store(str(inspector_store)) as s:
        s.append("failedrun1", 0, [new_event(started, "supervisor"), new_event(ev.RunFailed(reason=reason, error_type="ModelUnreachable"), "supervisor")])
        s.append("liverun1", 0, [new_event(started, "supervisor")])
    with serve(inspector_store) as base:
        browser.get(f"{base}runs/failedrun1")
        failure = wait_for(browser, lambda d: d.find_element(By.CSS_SELECTOR, "#head .failure"), "the failure line")
        assert reason in failure.text and failure.is_displayed()
        assert browser.find_element(By.ID, "status").text == "failed"
        screenshot(browser, "inspector-failed-run.png", tmp_path)
        browser.get(f"{base}runs/{REJECTED}#task-T2")
        task = wait_for(browser, lambda d: d.find_element(By.CSS_SELECTOR, "#task-T2 .task-failure"), "the failed task's reason")
        assert "Failed before any patch" in task.text and "no usable answer" in task.text and task.is_displayed()
        screenshot(browser, "inspector-failed-task.png", tmp_path)

        browser.get(f"{base}runs/liverun1")
        # read at once, and again if the live page swapped the header in between
        text, shown = wait_for(browser, lambda d: (lambda doing: (doing.text, doing.is_displayed()))(d.find_element(By.ID, "doing")),
                               "the live header")
        assert "preparing the test environment" in text and shown
        wait_for(browser, lambda d: d.find_element(By.ID, "live-state").text == "live", "the page's event stream opens")
        screenshot(browser, "inspector-live-run.png", tmp_path)
        browser.execute_script("window.notReloaded = true")
        with open_store(str(inspector_store)) as s:
            s.append("liverun1", 1, [new_event(ev.TestsRan(purpose="prepare", command="", outcome="passed", output="python 3.11 ready"), "qa")])
        wait_for(browser, lambda d: "custodian: ranking files" in d.find_element(By.ID, "doing").text, "the header moves on")
        assert browser.execute_script("return window.notReloaded") is True
        assert page_errors(browser) == []
        browser.get("about:blank")  # the page's event stream closes before its server stops
