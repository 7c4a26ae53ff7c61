"""The built site as readers see it, in headless Chromium, offline: every page loads with no console
errors, no request outside the site, every image loaded and no TeX left untypeset; search finds a
paper; dark mode toggles. Screenshots go to book/_build/screenshots/. Run after `companion.book build`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from companion import registry

import browser

pytestmark = pytest.mark.browser

ROOT = registry.project_root()
HTML = ROOT / "book" / "_build" / "html"
SHOTS = ROOT / "book" / "_build" / "screenshots"
PAGES = ["intro", "generated/scorecard", "generated/status", "generated/performance", "bibliography",
         *[f"papers/{slug}" for slug in registry.PAPERS]]


@pytest.fixture(scope="module")
def chrome():
    if not (browser.CHROMIUM and browser.CHROMEDRIVER):
        message = "no Chromium/chromedriver found (apt-get install chromium chromium-driver)"
        if browser.browser_required():
            pytest.fail(message)
        pytest.skip(message)
    if not (HTML / "intro.html").is_file():
        pytest.fail("the book is not built: run `python -m companion.book build` first")
    d = browser.driver()
    yield d
    d.quit()


@pytest.mark.parametrize("page", PAGES)
def test_page_renders_offline_with_images_math_and_no_errors(chrome, page):
    path = HTML / f"{page}.html"
    assert path.is_file(), f"{page}.html was not built"
    report = browser.inspect_page(chrome, path, SHOTS / f"{page.replace('/', '-')}.png")
    assert not report.problems(), "\n".join(report.problems())


def test_paper_pages_show_figures_and_the_evidence_sections(chrome):
    for slug in registry.PAPERS:
        path = HTML / "papers" / f"{slug}.html"
        report = browser.inspect_page(chrome, path)
        assert report.images >= 1, f"{slug}: no figure"
        text = chrome.execute_script("return document.body.innerText")
        for heading in ("Robustness across stored runs", "Performance", "Reproduce this page"):
            assert heading in text, f"{slug}: no '{heading}' section"


def test_scorecard_starts_with_the_overview(chrome):
    browser.inspect_page(chrome, HTML / "generated" / "scorecard.html")
    first_table = chrome.execute_script("return document.querySelector('table').className")
    assert "overview" in first_table
    cells = chrome.execute_script("return document.querySelectorAll('table.overview .cell').length")
    assert cells >= len(registry.PAPERS)


def test_search_finds_a_paper_by_a_word_of_its_title(chrome):
    from selenium.webdriver.support.ui import WebDriverWait

    chrome.get((HTML / "search.html").as_uri() + "?q=Jacobian")
    WebDriverWait(chrome, 30).until(
        lambda d: d.execute_script("return document.querySelectorAll('#search-results li').length") > 0)
    links = chrome.execute_script(
        "return Array.from(document.querySelectorAll('#search-results li a')).map(a => a.href)")
    assert any("papers/jsae" in link for link in links)


def test_dark_mode_toggles(chrome):
    chrome.get((HTML / "intro.html").as_uri())
    before = chrome.execute_script("return document.documentElement.dataset.theme")
    chrome.execute_script("document.querySelector('.theme-switch-button').click()")
    after = chrome.execute_script("return document.documentElement.dataset.theme")
    assert before != after and after in ("light", "dark", "auto")
    chrome.save_screenshot(str(SHOTS / "intro-toggled.png"))


def test_a_broken_page_is_caught(chrome, tmp_path):
    page = tmp_path / "site" / "broken.html"
    shutil.copytree(HTML / "_static", tmp_path / "site" / "_static")
    original = (HTML / "intro.html").read_text()
    broken = original.replace("</article>", '<p>raw math $x^2$ left</p><img src="missing.png"></article>', 1)
    assert broken != original
    page.write_text(broken)
    problems = "\n".join(browser.inspect_page(chrome, page).problems())
    assert "untypeset TeX: 'raw math $x^2$ left'" in problems
    assert "image did not load: missing.png" in problems
