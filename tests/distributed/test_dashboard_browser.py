"""The coordinator's web page in a real headless Chromium (Debian's ``chromium``, driven by Playwright), on a phone's
viewport: it shows the run's numbers and the leaderboard as the API has them, draws its charts, fits the screen,
and updates itself when the run moves. A screenshot is taken and checked (size, not blank).

Without Chromium or Playwright the test is skipped, saying why, except where a browser is required
(``VKBLAS_REQUIRE_BROWSER=1``, set by ``.ci/run``, or ``CI=true``): there it fails.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import InProcess, free_port, needs_data
from .helpers import _lease, _payload, _put, _update

pytestmark = [needs_data, pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.timeout(300)]
CHROMIUM = os.environ.get("VKBLAS_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
REQUIRED = os.environ.get("VKBLAS_REQUIRE_BROWSER") == "1" or os.environ.get("CI") == "true"
PHONE = {"width": 390, "height": 844}
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]  # fmt: skip


def _missing(why: str) -> None:
    if REQUIRED:
        pytest.fail(f"a browser is required here (VKBLAS_REQUIRE_BROWSER=1 or CI) but {why}")
    pytest.skip(why)


@pytest.fixture
def browser_page(tmp_path: Path) -> Iterator:  # type: ignore[type-arg]
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("Playwright is not installed (pip install playwright; the browser is Debian's chromium)")
    if not os.path.isfile(CHROMIUM):
        _missing(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True, args=FLAGS, viewport=PHONE
        )
        try:
            yield context.pages[0] if context.pages else context.new_page()
        finally:
            context.close()


class Served:
    """A second app over the same database and store, under a real uvicorn on 127.0.0.1 (a thread)."""

    def __init__(self, c: InProcess) -> None:
        import uvicorn

        from vkblas.distributed.coordinator.app import create_app

        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(create_app(c.settings), host="127.0.0.1", port=self.port,
                                                    log_level="warning"))  # fmt: skip
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "uvicorn did not start"
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def _work(c: InProcess, ap, workers: dict[str, dict], units: dict[str, int], t: list[float]) -> None:  # type: ignore[no-untyped-def]
    for name, n in units.items():
        for _ in range(n):
            lease = _lease(c, workers[name])
            assert _put(c, workers[name], lease, _payload(lease, _update(c, 1e-4))).status_code == 200
            ap.step()
            t[0] += 2.0
            ap._record_history(t[0])
    ap._maybe_evaluate(t[0], force=True)


def test_dashboard_in_headless_chromium(db_url: str, tmp_path: Path, browser_page):  # type: ignore[no-untyped-def]
    from PIL import Image, ImageStat

    c = InProcess(db_url, tmp_path, limit=2000, shard_samples=500)
    served = Served(c)
    try:
        alice = c.tc.post("/v1/users", json={"name": "alice"}).json()["token"]
        workers = {"a1": c.register("a1", alice), "a2": c.register("a2", alice), "bob": c.register("bob")}
        ap, t = c.applier(), [time.time()]
        _work(c, ap, workers, {"a1": 3, "a2": 2, "bob": 1}, t)
        status = c.tc.get("/v1/status").json()

        page = browser_page
        page.goto(f"{served.url}/?every=0.5")
        page.wait_for_function("Number(document.body.dataset.refreshes || 0) >= 1", timeout=30_000)
        assert page.text_content("#accuracy") == f"{100 * status['test']['accuracy']:.2f} %"
        assert page.text_content("#version") == str(status["version"])
        assert page.text_content("#state") == "running"
        board = page.eval_on_selector_all("#leaderboard tbody tr", "rows => rows.map(r => r.cells[1].textContent)")
        assert board[0] == "alice" and len(board) == 2 and board[1].startswith("bob")
        credit = page.eval_on_selector("#leaderboard tbody tr", "r => r.cells[3].textContent")
        assert credit == f"{c.tc.get('/v1/leaderboard').json()[0]['samples']:,}"
        assert int(page.get_attribute("#chart-accuracy", "data-points")) >= 2
        assert int(page.get_attribute("#chart-throughput", "data-points")) >= 5
        assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]  # no sideways scrolling

        shot = tmp_path / "dashboard.png"
        page.screenshot(path=str(shot))
        if os.environ.get("VKBLAS_SCREENSHOTS"):
            shutil.copy(shot, Path(os.environ["VKBLAS_SCREENSHOTS"]) / "dashboard-phone.png")
        img = Image.open(shot).convert("RGB")
        assert img.size == (PHONE["width"], PHONE["height"])
        colours = img.getcolors(maxcolors=1 << 16)
        assert colours is None or len(colours) > 30, "the screenshot is (nearly) blank"
        assert max(ImageStat.Stat(img).stddev) > 20

        # the page follows the run by itself
        before = page.evaluate("Number(document.body.dataset.refreshes)")
        _work(c, ap, workers, {"bob": 4}, t)
        version = c.tc.get("/v1/status").json()["version"]
        page.wait_for_function(f"document.getElementById('version').textContent === '{version}'", timeout=30_000)
        assert page.evaluate("Number(document.body.dataset.refreshes)") > before
        rows = page.eval_on_selector_all(
            "#leaderboard tbody tr", "rows => rows.map(r => [r.cells[1].textContent, r.cells[3].textContent])"
        )
        api = c.tc.get("/v1/leaderboard").json()
        assert rows == [[r["user"], f"{r['samples']:,}"] for r in api]
        ap.release()
    finally:
        served.close()
        c.close()
