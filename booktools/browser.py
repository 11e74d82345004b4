"""Open the built book in headless Chromium and check every page of the toc.

    python -m booktools.browser _build/html --toc _toc.yml --screenshots _build/screenshots

For each page: no console error and no uncaught exception while it loads, every image
loaded (complete, with a width), and every internal link pointing at a file that exists
and, with a ``#fragment``, at an id on that page, and no code block (a notebook's code
cell, a file shown with ``literalinclude``, a fenced block) scrolling sideways at the
book's width, a 1280-pixel window with both sidebars shown. Cell outputs may scroll:
they are what the code printed. Screenshots of the pages named with
``--shoot`` go to the screenshot folder. Exit status 1 lists every problem.

Chromium is Debian's ``chromium`` package, driven by Playwright (``requirements.txt``),
which launches that binary and downloads no browser of its own.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


class BrowserError(RuntimeError):
    """Chromium is missing, did not start, or stopped answering."""


@dataclass
class PageReport:
    page: str
    console_errors: list[str] = field(default_factory=list)
    broken_images: list[str] = field(default_factory=list)
    broken_links: list[str] = field(default_factory=list)
    wide_code: list[str] = field(default_factory=list)
    images: int = 0
    links: int = 0

    @property
    def problems(self) -> list[str]:
        return ([f"console: {e}" for e in self.console_errors] + [f"image: {i}" for i in self.broken_images]
                + [f"link: {link}" for link in self.broken_links]
                + [f"code scrolls sideways: {line}" for line in self.wide_code])


class Chromium:
    """Debian's headless Chromium, driven by Playwright. Playwright launches the system
    binary (``executable_path``), so it downloads no browser of its own."""

    def __init__(self, width: int = 1280, height: int = 900, timeout: float = 60.0):
        from playwright.sync_api import Error, sync_playwright

        binary = next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
        if binary is None:
            raise BrowserError("no chromium found; install Debian's package: apt-get install -y chromium")
        self.width, self.height = width, height
        self._playwright = sync_playwright().start()
        try:
            self._browser = self._playwright.chromium.launch(
                executable_path=binary, timeout=timeout * 1e3,
                args=["--disable-gpu", "--allow-file-access-from-files"])
        except Error as exc:
            self._playwright.stop()
            raise BrowserError(f"chromium did not start: {exc}") from exc
        self.page = self._browser.new_page(viewport={"width": width, "height": height})
        self.page.set_default_timeout(timeout * 1e3)
        self._errors: list[str] = []
        # Console errors (console.error, console.assert, and Chromium's own "Failed to load
        # resource") and uncaught exceptions.
        self.page.on("console", lambda m: self._errors.append(m.text) if m.type in ("error", "assert") else None)
        self.page.on("pageerror", lambda e: self._errors.append(f"{e.name}: {e.message}"))

    def open(self, url: str, settle: float = 0.5) -> list[str]:
        """Load ``url``; return the console errors and exceptions seen while it loaded."""
        self._errors.clear()
        self.page.goto(url, wait_until="load")
        self.page.wait_for_timeout(settle * 1e3)  # scripts that run after the load event
        return list(self._errors)

    def evaluate(self, expression: str):
        return self.page.evaluate(expression)

    def screenshot(self, path: Path, max_height: int = 16000) -> None:
        """The whole page (up to ``max_height`` pixels), with the window made that tall so
        that the sticky sidebars are drawn as a reader sees them."""
        height = min(int(self.evaluate("document.documentElement.scrollHeight") or self.height), max_height)
        self.page.set_viewport_size({"width": self.width, "height": height})
        try:
            self.page.wait_for_timeout(300)  # let the page lay itself out at the new height
            self.page.screenshot(path=str(path))
        finally:
            self.page.set_viewport_size({"width": self.width, "height": self.height})

    def close(self) -> None:
        try:
            self._browser.close()
        finally:
            self._playwright.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


IMAGES_JS = """Array.from(document.images).map(i => [i.currentSrc || i.src, i.complete && i.naturalWidth > 0])"""
LINKS_JS = """Array.from(document.querySelectorAll('a[href]')).map(a => a.href)"""
# Code blocks wider than their box, each as its longest line (outputs excluded).
WIDE_CODE_JS = """Array.from(document.querySelectorAll('div.highlight pre'))
  .filter(pre => !pre.closest('.cell_output') && pre.scrollWidth > pre.clientWidth + 1)
  .map(pre => pre.textContent.split('\\n').reduce((a, b) => b.length > a.length ? b : a, ''))
  .map(line => `${line.length} characters: ${line.trim().slice(0, 60)}`)"""


def toc_pages(toc: Path) -> list[str]:
    """The pages of a Jupyter Book ``_toc.yml``, root first, as paths without suffix."""
    import yaml

    data = yaml.safe_load(toc.read_text())
    pages = [data["root"]]

    def walk(entries):
        for entry in entries or []:
            if "file" in entry:
                pages.append(entry["file"])
            walk(entry.get("chapters"))
            walk(entry.get("sections"))

    for part in data.get("parts", []):
        walk(part.get("chapters"))
    walk(data.get("chapters"))
    return pages


def _ids(path: Path, cache: dict) -> set[str]:
    if path not in cache:
        text = path.read_text(errors="replace")
        cache[path] = set(re.findall(r'\sid="([^"]+)"', text)) | set(re.findall(r'\sname="([^"]+)"', text))
    return cache[path]


def check_links(links: list[str], root: Path, ids_cache: dict) -> list[str]:
    """Internal links (file:// under ``root``) whose file or fragment does not exist."""
    broken = []
    for href in links:
        url = urlparse(href)
        if url.scheme != "file":
            continue  # external links are not followed: the book must build offline
        target = Path(unquote(url.path))
        if root.resolve() not in target.resolve().parents and target.resolve() != root.resolve():
            broken.append(f"{href} (outside the book)")
        elif target.is_dir():
            if not (target / "index.html").is_file():
                broken.append(href)
        elif not target.is_file():
            broken.append(href)
        elif url.fragment and target.suffix == ".html" and unquote(url.fragment) not in _ids(target, ids_cache):
            broken.append(f"{href} (no id '{unquote(url.fragment)}')")
    return sorted(set(broken))


def check_book(html: Path, toc: Path, screenshots: Path | None = None, shoot: tuple[str, ...] = (),
               progress: bool = True) -> list[PageReport]:
    """Check every toc page of the built book in ``html``; screenshot the ``shoot`` pages."""
    html = html.resolve()
    reports = []
    ids_cache: dict = {}
    if screenshots is not None:
        screenshots.mkdir(parents=True, exist_ok=True)
    with Chromium() as browser:
        for page in toc_pages(toc):
            path = html / f"{page}.html"
            report = PageReport(page)
            if not path.is_file():
                report.broken_links.append(f"{path} was not built")
                reports.append(report)
                continue
            report.console_errors = browser.open(path.as_uri())
            images = browser.evaluate(IMAGES_JS) or []
            report.images = len(images)
            report.broken_images = [src for src, ok in images if not ok]
            links = browser.evaluate(LINKS_JS) or []
            report.links = len(links)
            report.broken_links += check_links(links, html, ids_cache)
            report.wide_code = browser.evaluate(WIDE_CODE_JS) or []
            if screenshots is not None and page in shoot:
                browser.screenshot(screenshots / (page.replace("/", "_") + ".png"))
            if progress:
                state = "ok" if not report.problems else f"{len(report.problems)} problem(s)"
                print(f"{page}: {report.images} images, {report.links} links: {state}", flush=True)
            reports.append(report)
    return reports


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("html", type=Path, help="the built book, e.g. _build/html")
    parser.add_argument("--toc", type=Path, default=Path("_toc.yml"))
    parser.add_argument("--screenshots", type=Path, default=None)
    parser.add_argument("--shoot", action="append", default=[], metavar="PAGE",
                        help="a toc page to screenshot (repeatable), e.g. book/intro")
    args = parser.parse_args(argv)
    reports = check_book(args.html, args.toc, args.screenshots, tuple(args.shoot))
    problems = [(r.page, p) for r in reports for p in r.problems]
    for page, problem in problems:
        print(f"FAIL {page}: {problem}", file=sys.stderr)
    print(f"{len(reports)} pages, {sum(r.images for r in reports)} images, "
          f"{sum(r.links for r in reports)} links checked; {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
