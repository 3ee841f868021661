"""The operator page of ``desched serve`` in a real browser (headless chromium through
chromium-driver and Selenium): what a person sees, the tenant table, a chart with data, and
a flood from one tenant showing in its row while it happens.

Needs Debian's ``chromium`` and ``chromium-driver`` (``.ci/run`` installs them) and
``selenium`` (the ``dev`` extra); skipped with the reason when one is missing. Set
``DESCHED_SCREENSHOT_DIR`` to keep the screenshots.
"""

from __future__ import annotations

import os
import re
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self

import httpx
import pytest

from desched.service.records import Role
from desched.service.store import Store
from tests.test_service import Service, auth

WAIT_S = 60.0


def chromium_driver() -> Any:
    try:
        from selenium import webdriver
    except ImportError:
        pytest.skip("selenium is not installed (pip install -e '.[dev]')")
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if binary is None or driver_path is None:
        pytest.skip("chromium and chromium-driver are not installed (apt-get install "
                    "chromium chromium-driver; .ci/run does)")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                "--window-size=1400,1000", "--disable-gpu"):
        options.add_argument(arg)
    service = webdriver.ChromeService(executable_path=driver_path)
    return webdriver.Chrome(options=options, service=service)


class Traffic:
    """Two tenants submitting a task every ``every_s`` and one worker taking and completing
    tasks of 0.2 s, until stopped: windows of a few seconds fill with data."""

    def __init__(self, url: str, tenants: dict[str, str], worker: str) -> None:
        self.url, self.tenants, self.worker = url, tenants, worker
        self.stopped = threading.Event()
        self.threads = [threading.Thread(target=self.submit, daemon=True),
                        threading.Thread(target=self.work, daemon=True)]

    def submit(self) -> None:
        with httpx.Client(base_url=self.url, timeout=10) as c:
            while not self.stopped.wait(0.3):
                for token in self.tenants.values():
                    c.post("/v1/tasks", headers=auth(token),
                           json=[{"task_type": "extract", "document_ref": "r"}])

    def work(self) -> None:
        with httpx.Client(base_url=self.url, timeout=10) as c:
            while not self.stopped.is_set():
                r = c.post("/v1/poll", headers=auth(self.worker), json={"worker_id": "slot-0"})
                if r.status_code != 200:
                    time.sleep(0.1)
                    continue
                lease = r.json()
                time.sleep(0.2)
                c.post(f"/v1/tasks/{lease['task_id']}/complete", headers=auth(self.worker),
                       json={"lease_id": lease["lease_id"], "duration_s": 0.2})

    def __enter__(self) -> Self:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        for t in self.threads:
            t.join(timeout=10)


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[Service, dict[str, str]]]:
    db = str(tmp_path / "state.db")
    store = Store(db)
    store.migrate()
    tokens = {
        "operator": store.add_principal(Role.OPERATOR, "ops"),
        "acme": store.add_principal(Role.TENANT, "acme"),
        "globex": store.add_principal(Role.TENANT, "globex"),
        "worker": store.add_principal(Role.WORKER, "box-1"),
    }
    store.close()
    service = Service(db=db, log_dir=tmp_path / "logs", lease_s=30.0,
                      env={"DESCHED_OPERATOR_REFRESH_S": "0.5"}).start()
    try:
        yield service, tokens
    finally:
        service.stop()


TABLE_JS = """return [...document.querySelectorAll('#tenants tbody tr')]
    .map(tr => [tr.className, ...[...tr.cells].map(td => td.textContent)]);"""


def table(driver: Any) -> list[list[str]]:
    """The tenant table as shown, read in one script call (the page redraws it every
    refresh, so elements found one by one go stale): ``[row class, cell, cell, ...]``."""
    return list(driver.execute_script(TABLE_JS))


def row_of(driver: Any, tenant: str) -> list[str]:
    """The cells of ``tenant``'s row (tenant, queued, running, done, ...), or []."""
    for row in table(driver):
        if row[1] == tenant:
            return row[1:]
    return []


POINTS_JS = """const s = document.querySelector('#' + arguments[0] + ' polyline.series');
return s ? s.getAttribute('points').trim().split(/\\s+/).length : 0;"""


def points(driver: Any, chart: str) -> int:
    """How many windows the chart's line joins (0 before it has a line)."""
    return int(driver.execute_script(POINTS_JS, chart))


def number(text: str) -> int:
    return int(re.sub(r"[^\d]", "", text) or 0)


def shot(driver: Any, tmp_path: Path, name: str) -> Path:
    folder = Path(os.environ.get("DESCHED_SCREENSHOT_DIR", tmp_path))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    driver.save_screenshot(str(path))
    return path


def test_the_operator_page_shows_tenants_fairness_charts_and_a_flood_as_it_happens(
    live: tuple[Service, dict[str, str]], tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    service, tokens = live
    driver = chromium_driver()
    try:
        with Traffic(service.url, {k: tokens[k] for k in ("acme", "globex")}, tokens["worker"]):
            driver.get(f"{service.url}/ui?refresh=1&window=2#token={tokens['operator']}")
            wait = WebDriverWait(driver, WAIT_S, poll_frequency=0.25)
            # the token left the address bar; the table lists both tenants with work done
            wait.until(lambda d: row_of(d, "acme") and row_of(d, "globex"))
            assert "token" not in driver.current_url
            wait.until(lambda d: number(row_of(d, "acme")[3]) > 0
                       and number(row_of(d, "globex")[3]) > 0)
            # a chart with data: Jain's index drawn as a line over at least 4 windows
            wait.until(lambda d: points(d, "chart-jain") >= 4)
            assert driver.find_element(By.ID, "role").text == "active"
            assert driver.find_element(By.ID, "policy").text.startswith("ifs-memoryless")
            assert "no policy recorded" in driver.find_element(By.ID, "reason").text
            wait.until(lambda d: "box-1" in d.execute_script(
                "return document.getElementById('workers').textContent"))
            shot(driver, tmp_path, "operator-before-flood.png")
            before = number(row_of(driver, "globex")[1])
            # the flood: globex submits 400 tasks at once
            r = httpx.post(f"{service.url}/v1/tasks", headers=auth(tokens["globex"]),
                           json=[{"task_type": "extract", "document_ref": "f"}] * 400)
            assert r.status_code == 201
            wait.until(lambda d: number(row_of(d, "globex")[1]) >= before + 300)
            top = table(driver)[0]
            assert top[1] == "globex"  # the flooding tenant is at the top, marked
            assert top[0] == "hot"
            assert number(row_of(driver, "acme")[1]) < 50
            # the windows go on while the flood drains (the charts keep moving)
            drawn = points(driver, "chart-lag")
            wait.until(lambda d: points(d, "chart-lag") >= drawn + 2)
            path = shot(driver, tmp_path, "operator-flood.png")
            assert path.stat().st_size > 10_000
    finally:
        driver.quit()


def test_the_operator_page_asks_for_a_token_and_refuses_a_tenants(
    live: tuple[Service, dict[str, str]], tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    service, tokens = live
    driver = chromium_driver()
    try:
        driver.get(f"{service.url}/ui")
        wait = WebDriverWait(driver, WAIT_S, poll_frequency=0.25)
        wait.until(lambda d: d.find_element(By.ID, "login").is_displayed())
        assert not driver.find_element(By.ID, "page").is_displayed()
        box = driver.find_element(By.ID, "token")
        box.send_keys(tokens["acme"])
        box.submit()
        wait.until(lambda d: "operator token" in d.find_element(By.ID, "login-error").text)
        box = driver.find_element(By.ID, "token")
        box.clear()
        box.send_keys(tokens["operator"])
        box.submit()
        wait.until(lambda d: d.find_element(By.ID, "page").is_displayed())
        assert driver.find_element(By.ID, "role").text == "active"
    finally:
        driver.quit()
