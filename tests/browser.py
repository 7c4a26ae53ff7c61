"""Open the built book in headless Chromium (Debian's chromium + chromium-driver) and inspect a page.

:func:`inspect_page` loads one page from ``file://`` and returns what a reader would notice: console
errors, requests to hosts outside the site, images that did not load, TeX that MathJax left
untypeset. The browser runs with networking disabled, so a page that needs the network fails here.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
CHROMEDRIVER = shutil.which("chromedriver")
LOCAL_SCHEMES = ("file:", "data:", "blob:", "about:", "chrome:", "devtools:")

# After MathJax has finished: text nodes outside code, scripts and typeset math that still hold a
# TeX delimiter. Inline `$...$` pairs, `\(`, `\[` and `$$` are what MathJax would have replaced.
UNTYPESET_JS = r"""
const skip = el => el.closest('pre, code, script, style, mjx-container, .highlight, textarea, .MathJax');
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
const bad = [];
while (walker.nextNode()) {
  const node = walker.currentNode;
  if (!node.parentElement || skip(node.parentElement)) continue;
  const t = node.textContent;
  if (/\\\(|\\\[|\$\$|\$[^$\s][^$]*\$/.test(t)) bad.push(t.trim().slice(0, 120));
}
return bad;
"""

MATHJAX_DONE_JS = """
const done = arguments[arguments.length - 1];
if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
  MathJax.startup.promise.then(() => done(true), () => done(false));
} else { done(null); }
"""

BROKEN_IMAGES_JS = """
return Array.from(document.images)
  .filter(img => !(img.complete && img.naturalWidth > 0))
  .map(img => img.getAttribute('src'));
"""


@dataclass
class PageReport:
    """What a reader would notice on one page."""

    url: str
    console_errors: list[str] = field(default_factory=list)
    outside_requests: list[str] = field(default_factory=list)
    broken_images: list[str] = field(default_factory=list)
    untypeset_tex: list[str] = field(default_factory=list)
    images: int = 0
    text_chars: int = 0

    def problems(self) -> list[str]:
        """Every problem found, one line each (empty when the page is fine)."""
        out = [f"console error: {e}" for e in self.console_errors]
        out += [f"request outside the site: {u}" for u in self.outside_requests]
        out += [f"image did not load: {s}" for s in self.broken_images]
        out += [f"untypeset TeX: {t!r}" for t in self.untypeset_tex]
        if self.text_chars < 200:
            out.append(f"page is (nearly) blank: {self.text_chars} characters of text")
        return out


def driver():
    """A headless Chromium with networking disabled and console and network logs enabled."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run", "--disable-quic", "--allow-file-access-from-files",
                 "--window-size=1400,1000"):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    d = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    d.execute_cdp_cmd("Network.enable", {})
    d.execute_cdp_cmd("Network.emulateNetworkConditions",
                      {"offline": True, "latency": 0, "downloadThroughput": 0, "uploadThroughput": 0})
    d.set_script_timeout(30)
    return d


def _requests(d) -> list[str]:
    """URLs the page asked for since the last call (from Chromium's performance log)."""
    urls = []
    for entry in d.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg.get("method") == "Network.requestWillBeSent":
            urls.append(msg["params"]["request"]["url"])
    return urls


def inspect_page(d, path: Path, screenshot: Path | None = None) -> PageReport:
    """Load ``path`` from file://, wait for MathJax, and report what a reader would notice."""
    url = path.resolve().as_uri()
    d.get_log("browser")
    _requests(d)
    d.get(url)
    d.execute_async_script(MATHJAX_DONE_JS)
    report = PageReport(url)
    report.console_errors = [e["message"] for e in d.get_log("browser") if e["level"] == "SEVERE"]
    report.outside_requests = [u for u in _requests(d) if not u.startswith(LOCAL_SCHEMES)]
    report.broken_images = d.execute_script(BROKEN_IMAGES_JS)
    report.untypeset_tex = d.execute_script(UNTYPESET_JS)
    report.images = d.execute_script("return document.images.length")
    report.text_chars = d.execute_script("return document.body.innerText.length")
    if screenshot is not None:
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        d.save_screenshot(str(screenshot))
    return report


def browser_required() -> bool:
    """CI sets COMPANION_REQUIRE_BROWSER=1: a missing Chromium is then a failure, not a skip."""
    return os.environ.get("COMPANION_REQUIRE_BROWSER") == "1"
