"""Sphinx extension: drop duplicated inline scripts from the written pages.

Under Jupyter Book 1, sphinx-thebe and sphinx-togglebutton are set up by both Jupyter Book and the
book theme, so every page declared ``const THEBE_JS_URL`` twice and the browser reported a
SyntaxError. Their page-context hooks run after any hook of ours could (the event stops at the
first listener that returns a template), so this pass removes repeated ``<script>`` lines from the
head of each written page once the build has finished.
"""

from __future__ import annotations

from pathlib import Path


def dedupe_head(html: str) -> str:
    """The page with every repeated ``<script ...>...</script>`` line of its head removed."""
    head_end = html.find("</head>")
    if head_end < 0:
        return html
    seen, kept = set(), []
    for line in html[:head_end].splitlines(keepends=True):
        key = line.strip()
        if key.startswith("<script") and key.endswith("</script>"):
            if key in seen:
                continue
            seen.add(key)
        kept.append(line)
    return "".join(kept) + html[head_end:]


def _finished(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    for page in Path(app.outdir).rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        fixed = dedupe_head(text)
        if fixed != text:
            page.write_text(fixed, encoding="utf-8")


def setup(app):
    app.connect("build-finished", _finished)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
