"""The dashboard in a real headless browser (Debian's chromium + chromium-driver, driven by Selenium).

The page is loaded from a clusterd of this module's own, signs in with alice's token, lists a job
the test submitted and follows its state to the end without a reload, and shows nothing of bob's
job: not in the list, and its detail page says it belongs to another user.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clusterctl.v1 import jobs_pb2
from tests.support.daemon import Daemon
from tests.support.stack import Stack

pytestmark = pytest.mark.slurm

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def _require_browser() -> Any:
    """Selenium's webdriver module; scripts/test.sh installs all three (a skip would prove nothing in CI)."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not shutil.which(p)]
    try:
        from selenium import webdriver
    except ImportError:
        missing.append("selenium (pip)")
        webdriver = None
    if missing:
        message = f"the browser test needs {', '.join(missing)}: apt-get install chromium chromium-driver"
        if os.environ.get("CLUSTERCTL_REQUIRE_STACK") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return webdriver


@pytest.fixture(scope="module")
def web_daemon(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = Daemon(stack, tmp_path_factory.mktemp("clusterd-web"), extra_env={"CLUSTERD_WEB__ENABLED": "true"})
    d.start()
    yield d
    d.stop()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    webdriver = _require_browser()
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # never let Selenium Manager look for downloads
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,1000",
        f"--user-data-dir={tmp_path / 'profile'}",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def _wait(driver: Any, predicate: Any, timeout: float, what: str) -> Any:
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.support.ui import WebDriverWait

    def safe(d: Any) -> Any:
        try:
            return predicate(d)
        except WebDriverException:  # an element replaced between find and read: look again
            return False

    return WebDriverWait(driver, timeout, poll_frequency=0.25).until(safe, message=f"waiting for {what}")


def _row_state(driver: Any, job_id: str) -> str:
    from selenium.webdriver.common.by import By

    rows = driver.find_elements(By.CSS_SELECTOR, f'#jobs-table tbody tr[data-job-id="{job_id}"]')
    return rows[0].get_attribute("data-state") if rows else ""


def test_dashboard_lists_follows_and_hides(web_daemon: Daemon, browser: Any, alice_dir: Path, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    alice, bob = web_daemon.client("alice"), web_daemon.client("bob")
    name = f"web-{uuid.uuid4().hex[:6]}"
    job = alice.submit(
        jobs_pb2.JobSpec(
            name=name,
            command=["bash", "-c", "echo hello from $SLURM_JOB_ID; sleep 6"],
            submit_directory=str(alice_dir),
            stdout_path="web-%j.out",
        )
    ).job
    bobs = bob.submit(jobs_pb2.JobSpec(name="bobs-secret-name", command=["sleep", "30"])).job
    try:
        browser.get(f"http://127.0.0.1:{web_daemon.metrics_port}/")
        _wait(browser, lambda d: d.find_element(By.ID, "login-form").is_displayed(), 30, "the sign-in form")
        browser.find_element(By.ID, "token-input").send_keys(web_daemon.stack.tokens["alice"])
        browser.find_element(By.ID, "login-button").click()
        _wait(browser, lambda d: d.find_element(By.ID, "whoami").text == "alice", 30, "alice signed in")

        # The job the test submitted is listed, and its row follows the job to its end (no reload).
        seen = {_wait(browser, lambda d: _row_state(d, job.job_id), 60, "alice's job in the list")}
        final = _wait(
            browser,
            lambda d: seen.add(s := _row_state(d, job.job_id)) or (s == "COMPLETED" and s),
            120,
            "the row to show COMPLETED",
        )
        assert final == "COMPLETED"
        assert seen & {"PENDING", "RUNNING", "COMPLETING"}, seen  # it changed state under the page's eyes
        assert name in browser.find_element(By.ID, "jobs-table").text
        assert "bobs-secret-name" not in browser.page_source and bobs.job_id not in {
            r.get_attribute("data-job-id") for r in browser.find_elements(By.CSS_SELECTOR, "#jobs-table tbody tr")
        }

        # The job's page: its log tail, read through the service.
        browser.get(f"http://127.0.0.1:{web_daemon.metrics_port}/#/jobs/{job.job_id}")
        _wait(browser, lambda d: f"hello from {job.job_id}" in d.find_element(By.ID, "log-text").text, 60, "the log")
        browser.save_screenshot(str(tmp_path / "job.png"))

        # Bob's job by its id: refused, and nothing of it shown.
        browser.get(f"http://127.0.0.1:{web_daemon.metrics_port}/#/jobs/{bobs.job_id}")
        error = _wait(browser, lambda d: d.find_element(By.ID, "job-error").text, 30, "the refusal")
        assert "another user" in error
        assert not browser.find_element(By.ID, "job-body").is_displayed()
        assert "bobs-secret-name" not in browser.page_source
    finally:
        bob.cancel(bobs.job_id)
