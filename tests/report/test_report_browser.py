"""Open reports/summary.html in headless Chromium: every image loads and the tables render.

The page is the real output of `nnperf render-report` on two results folders. A copy gets a
small script that, once the page has loaded, records on <body> how many images decoded
(naturalWidth > 0) and how many tables and rows the browser built; `--dump-dom` prints the
DOM after scripts ran. Chromium is Debian's `chromium`; where it is missing the test installs
it with apt-get (root only), and otherwise skips saying why.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from nnperf.cli import main
from report_tables import gpu_folder, laptop_folder, write_figure

pytestmark = pytest.mark.browser

CHROMIUM_TIMEOUT_S = 120
CHECK_SCRIPT = """
<script>
window.addEventListener("load", function () {
  var images = Array.from(document.images);
  var tables = Array.from(document.querySelectorAll("table"));
  var check = {
    images: images.length,
    loaded: images.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length,
    widths: images.map(function (i) { return i.naturalWidth; }),
    tables: tables.length,
    rows: tables.map(function (t) { return t.tBodies.length ? t.tBodies[0].rows.length : 0; }),
    headings: Array.from(document.querySelectorAll("h2")).map(function (h) { return h.textContent; })
  };
  document.body.setAttribute("data-check", JSON.stringify(check));
});
</script>
"""


def chromium() -> str:
    """Path of a usable Chromium, installing Debian's package when possible."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip(
            "Chromium is not installed and cannot be installed here "
            "(needs root and apt-get: apt-get install chromium)"
        )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = subprocess.run(
        ["apt-get", "install", "-y", "--no-install-recommends", "chromium"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    found = shutil.which("chromium")
    if install.returncode != 0 or not found:
        last = (install.stderr or install.stdout).strip().splitlines()[-1:] or ["no output"]
        pytest.skip(f"Chromium could not be installed with apt-get: {last[0]}")
    return found


def headless(browser: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    command = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=CHROMIUM_TIMEOUT_S)


@pytest.fixture(scope="module")
def summary_html(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("browser")
    laptop_folder(root / "laptop")
    gpu_folder(root / "gpu")
    # Seven more rooflines make eight of one kind: they are folded into <details>, and must
    # load all the same.
    for batch in range(1, 8):
        write_figure(root / f"laptop/figures/roofline/cpu/m/fp32/bs{batch}/baseline.png", "extra")
    code = main(
        [
            "render-report",
            "--results",
            str(root / "laptop"),
            "--extra-results",
            str(root / "gpu"),
            "--out-html",
            str(root / "reports/summary.html"),
            "--out-md",
            str(root / "reports/summary.md"),
        ]
    )
    assert code == 0
    return root / "reports/summary.html"


def test_every_image_loads_and_the_tables_render(summary_html, tmp_path):
    browser = chromium()
    page = tmp_path / "checked.html"
    page.write_text(
        summary_html.read_text(encoding="utf-8").replace("</body>", CHECK_SCRIPT + "</body>"),
        encoding="utf-8",
    )
    done = headless(
        browser, tmp_path / "profile", "--virtual-time-budget=10000", "--dump-dom", page.as_uri()
    )
    match = re.search(r'data-check="([^"]*)"', done.stdout)
    assert match, f"no check result in the DOM; chromium said: {done.stderr[-2000:]}"
    check = json.loads(html.unescape(match.group(1)))
    assert check["images"] == 3 + 7
    assert check["loaded"] == check["images"], check["widths"]
    assert all(width > 0 for width in check["widths"])
    # Headline 2 (one per device), environment 2, throughput 1, speedups 3, breakdown 1, roofline 2 (readings,
    # profiled configurations), ceilings 1, kernels 2, complexity 1, measurement cost and
    # quality 2 (per configuration, per results folder): every table of the summary, each with
    # rows.
    assert check["tables"] == 17
    assert all(rows > 0 for rows in check["rows"])
    assert check["headings"][:3] == ["At a glance", "Key findings", "Throughput"]
    assert check["headings"][-2:] == ["Notes: skipped and flagged", "Environment"]


def test_screenshot_renders(summary_html, tmp_path):
    browser = chromium()
    shot = tmp_path / "summary.png"
    done = headless(
        browser,
        tmp_path / "profile",
        "--window-size=1280,2000",
        f"--screenshot={shot}",
        summary_html.as_uri(),
    )
    assert shot.is_file(), done.stderr[-2000:]
    # A rendered page, not a blank one: a PNG of the requested size with some ink on it.
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1280, 2000)
    assert len(data) > 50_000
