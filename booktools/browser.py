"""Open the built book in headless Chromium and check every page of the toc.

    python -m booktools.browser _build/html --toc _toc.yml --screenshots _build/screenshots

For each page: no console error and no uncaught exception while it loads, every image
loaded (complete, with a width), and every internal link pointing at a file that exists
and, with a ``#fragment``, at an id on that page, and no code block (a notebook's code
cell, a file shown with ``literalinclude``, a fenced block) scrolling sideways at the
book's width, a 1280-pixel window with both sidebars shown. Cell outputs may scroll:
they are what the code printed. Screenshots of the pages named with
``--shoot`` go to the screenshot folder. Exit status 1 lists every problem.

Chromium is driven through the DevTools protocol over a pipe (``--remote-debugging-pipe``),
so nothing but Debian's ``chromium`` package is needed.
"""

from __future__ import annotations

import argparse
import base64
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
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
    """A headless Chromium spoken to with DevTools protocol messages on fds 3 and 4."""

    def __init__(self, width: int = 1280, height: int = 900, timeout: float = 60.0):
        binary = next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
        if binary is None:
            raise BrowserError("no chromium found; install Debian's package: apt-get install -y chromium")
        self.timeout = timeout
        self.width, self.height = width, height
        self.profile = tempfile.mkdtemp(prefix="tritonbook-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # The child's ends move to fds of 10 and up, so that placing them at 3 and 4 in
        # the child cannot overwrite one with the other.
        child_r = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD_CLOEXEC, 10)
        child_w = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(to_browser_r)
        os.close(from_browser_w)

        def plumbing():  # in the child: the protocol pipes become fds 3 and 4
            os.dup2(child_r, 3)  # dup2 makes them inheritable: they survive exec
            os.dup2(child_w, 4)

        self.process = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync",
             "--disable-background-networking", "--disable-component-update", "--disable-quic",
             "--allow-file-access-from-files", f"--user-data-dir={self.profile}", "--remote-debugging-pipe",
             f"--window-size={width},{height}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            # Python's own fds are close-on-exec; only 3 and 4 reach chromium.
            close_fds=False, preexec_fn=plumbing)
        os.close(child_r)
        os.close(child_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=True)
        self.call("Emulation.setDeviceMetricsOverride", session=True, width=width, height=height,
                  deviceScaleFactor=1, mobile=False)

    # Protocol ----------------------------------------------------------------------
    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise BrowserError("chromium stopped answering")
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise BrowserError("chromium closed its protocol pipe")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method: str, session: bool = False, **params) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def wait_for(self, event: str, timeout: float | None = None) -> dict:
        deadline = time.monotonic() + (timeout or self.timeout)
        for i, seen in enumerate(self.events):
            if seen["method"] == event:
                return self.events.pop(i)
        while True:
            reply = self._read_message(deadline)
            if reply.get("method") == event:
                return reply
            if "method" in reply:
                self.events.append(reply)

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", session=True, expression=expression, returnByValue=True,
                           awaitPromise=True)
        return result["result"].get("value")

    # Pages -------------------------------------------------------------------------
    def open(self, url: str, settle: float = 0.5) -> list[str]:
        """Load ``url``; return the console errors and exceptions seen while it loaded."""
        self.events.clear()
        self.call("Page.navigate", session=True, url=url)
        self.wait_for("Page.loadEventFired")
        time.sleep(settle)  # scripts that run after the load event
        self.evaluate("1")  # collect the events that arrived meanwhile
        errors = []
        for event in self.events:
            method, params = event["method"], event.get("params", {})
            if method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                text = details.get("exception", {}).get("description") or details.get("text", "")
                errors.append(f"{text.splitlines()[0]} ({details.get('url', '')}:{details.get('lineNumber', '')})")
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", [])))
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                entry = params["entry"]
                errors.append(f"{entry.get('text', '')} {entry.get('url', '')}".strip())
        return errors

    def screenshot(self, path: Path, max_height: int = 16000) -> None:
        """The whole page (up to ``max_height`` pixels), with the window made that tall so
        that the sticky sidebars are drawn as a reader sees them."""
        height = min(int(self.evaluate("document.documentElement.scrollHeight") or self.height), max_height)
        self.call("Emulation.setDeviceMetricsOverride", session=True, width=self.width, height=height,
                  deviceScaleFactor=1, mobile=False)
        try:
            time.sleep(0.3)  # let the page lay itself out at the new height
            data = self.call("Page.captureScreenshot", session=True, format="png")["data"]
        finally:
            self.call("Emulation.setDeviceMetricsOverride", session=True, width=self.width,
                      height=self.height, deviceScaleFactor=1, mobile=False)
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except BrowserError:
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for fd in (self._to_browser, self._from_browser):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

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
