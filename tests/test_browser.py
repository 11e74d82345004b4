"""The browser check on a small site with known faults: each fault must be reported.

Needs Debian's chromium (README: test prerequisites); ``make test`` then runs the same
check on the built book.
"""

from pathlib import Path

import pytest
from PIL import Image

from booktools import browser

GOOD = f"""<!doctype html><html><body>
<h1 id="top">Good</h1>
<img src="pixel.png" alt="a pixel">
<a href="good.html#top">here</a> <a href="sub/">folder</a> <a href="https://example.org/">outside</a>
<div class="cell_output"><div class="highlight"><pre style="width: 200px; overflow-x: auto">
an output may be wider than the page: {"x" * 100}</pre></div></div>
<div class="highlight"><pre style="width: 200px; overflow-x: auto">short = 1</pre></div>
</body></html>"""

BAD = f"""<!doctype html><html><body>
<img src="missing.png" alt="gone">
<a href="nowhere.html">nowhere</a> <a href="good.html#no-such-id">bad fragment</a>
<script>console.error("deliberate console error");</script>
<script>undefinedFunction();</script>
<div class="highlight"><pre style="width: 200px; overflow-x: auto">short = 1
far_too_long = {"x" * 80}</pre></div>
</body></html>"""


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("site")
    html = root / "html"
    (html / "sub").mkdir(parents=True)
    Image.new("RGB", (4, 4), (200, 30, 30)).save(html / "pixel.png")
    (html / "sub" / "index.html").write_text("<!doctype html><p>sub</p>")
    (html / "good.html").write_text(GOOD)
    (html / "bad.html").write_text(BAD)
    toc = root / "_toc.yml"
    toc.write_text("format: jb-book\nroot: good\nparts:\n  - caption: Part\n    chapters:\n"
                   "      - file: bad\n      - file: never_built\n")
    return html, toc


@pytest.fixture(scope="module")
def reports(site, tmp_path_factory):
    html, toc = site
    shots = tmp_path_factory.mktemp("shots")
    found = {r.page: r for r in browser.check_book(html, toc, shots, shoot=("good",), progress=False)}
    return found, shots


def test_toc_pages_in_order(site):
    assert browser.toc_pages(site[1]) == ["good", "bad", "never_built"]


def test_good_page_passes(reports):
    good = reports[0]["good"]
    assert good.problems == []
    assert good.images == 1 and good.links == 3


def test_broken_image_is_reported(reports):
    assert [Path(src).name for src in reports[0]["bad"].broken_images] == ["missing.png"]


def test_broken_links_are_reported(reports):
    broken = reports[0]["bad"].broken_links
    assert any(link.endswith("/nowhere.html") for link in broken), broken
    assert any("no id 'no-such-id'" in link for link in broken), broken
    assert len(broken) == 2


def test_console_errors_and_exceptions_are_reported(reports):
    errors = " | ".join(reports[0]["bad"].console_errors)
    assert "deliberate console error" in errors
    assert "undefinedFunction" in errors


def test_code_that_scrolls_sideways_is_reported(reports):
    # The good page's wide output is allowed; the bad page's wide code is not.
    assert reports[0]["bad"].wide_code == ["95 characters: far_too_long = " + "x" * 45]
    assert reports[0]["good"].wide_code == []


def test_missing_page_is_reported(reports):
    assert reports[0]["never_built"].problems == [f"link: {reports[0]['never_built'].broken_links[0]}"]
    assert "was not built" in reports[0]["never_built"].broken_links[0]


def test_screenshot_is_written(reports):
    shot = reports[1] / "good.png"
    with Image.open(shot) as image:
        assert image.width == 1280 and image.height >= 100


def test_command_fails_on_problems(site, capsys):
    html, toc = site
    assert browser.main([str(html), "--toc", str(toc)]) == 1
    assert "FAIL bad: image:" in capsys.readouterr().err
