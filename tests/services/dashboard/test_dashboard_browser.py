"""The dashboard in a real headless Chromium (Debian's chromium + chromium-driver, through
Selenium) against the running local mesh: the page loads, shows both relay pods of
example.com, and a data sent during the test appears in the trace view with its path.
The screenshot is saved under .artifacts/ (its path is printed)."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Final

import httpx
import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from tests.support.demo_mesh import ROOT, DemoMesh
from tests.support.polling import scaled

pytestmark = [pytest.mark.system, pytest.mark.browser]

SCREENSHOT: Final = ROOT / ".artifacts" / "dashboard.png"


def chromium() -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-dev-shm-usage",
        "--window-size=1400,2000",
    ):
        options.add_argument(flag)
    driver = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    return webdriver.Chrome(options=options, service=Service(executable_path=driver))


def wait(driver: webdriver.Chrome, seconds: float = 30) -> WebDriverWait[webdriver.Chrome]:
    """A scaled wait that asks again when the dashboard's redraw (each second) replaced
    an element it had found."""
    return WebDriverWait(
        driver, scaled(seconds), ignored_exceptions=(StaleElementReferenceException,)
    )


def close(browser: webdriver.Chrome) -> None:
    """Quit the browser and its driver, and drop the HTTP connections to the driver
    (left to the garbage collector they would warn as unclosed sockets)."""
    browser.quit()
    executor = browser.command_executor
    if not isinstance(executor, str):
        executor.close()  # type: ignore[no-untyped-call]
    browser.service.stop()


def test_dashboard_shows_pods_and_traces_a_message(demo_mesh: DemoMesh) -> None:
    browser = chromium()
    try:
        browser.get(demo_mesh.dashboard_login)
        for pod in ("relay-example.com-1", "relay-example.com-2", "relay-rubble.com-1"):
            wait(browser).until(
                expected_conditions.presence_of_element_located(
                    (By.CSS_SELECTOR, f'[data-node="{pod}"].ready')
                )
            )
        assert "pods ready" in browser.find_element(By.ID, "health").text
        # A data sent now, with a statusRequest, as the page watches (no reload).
        sent = subprocess.run(
            [
                "apexctl",
                "--json",
                "trace",
                "fred@example.com",
                "barney@example.com",
                "--message",
                "seen in the browser",
            ],
            capture_output=True,
            text=True,
            timeout=scaled(120),
            check=True,
            env=demo_mesh.env(),
        )
        trans_id = json.loads(sent.stdout)["trans_id"]
        key = f"fred@example.com#{trans_id}"

        def clicked(driver: webdriver.Chrome) -> bool:
            item = driver.find_element(By.CSS_SELECTOR, f'[data-trace="{key}"]')
            if not (item.is_displayed() and item.is_enabled()):
                return False
            item.click()
            return True

        def traced(driver: webdriver.Chrome) -> tuple[str | None, str]:
            """The trace view's outcome for barney, read from one drawing of the view
            (its relay hop drawn too)."""
            view = driver.find_element(By.CSS_SELECTOR, f'[data-trace-view="{key}"]')
            view.find_element(By.CSS_SELECTOR, '[data-hop="relay-example.com-1"]')
            outcome = view.find_element(By.CSS_SELECTOR, '[data-outcome="barney@example.com"]')
            return outcome.get_attribute("data-code"), outcome.text

        wait(browser).until(clicked)
        code, text = wait(browser).until(traced)
        assert code == "250"
        assert "pod relay-example.com-2" in text
        assert browser.find_element(By.CSS_SELECTOR, "#topics tbody").text.count("demo.news") == 1
        # Only the app's own assets: no script or style from anywhere else.
        for tag, attribute in (("script", "src"), ("link", "href")):
            for element in browser.find_elements(By.TAG_NAME, tag):
                assert (element.get_attribute(attribute) or "").startswith(
                    demo_mesh.dashboard_login.split("/login")[0]
                )
        SCREENSHOT.parent.mkdir(exist_ok=True)
        assert browser.save_screenshot(str(SCREENSHOT))
        print(f"dashboard screenshot: {SCREENSHOT}")
    finally:
        close(browser)


def test_dashboard_refuses_without_login(demo_mesh: DemoMesh) -> None:
    base = demo_mesh.dashboard_login.split("/login")[0]
    assert httpx.get(f"{base}/").status_code == 303  # to the login page (test_dashboard_pages)
    assert httpx.get(f"{base}/api/state").status_code == 401
    assert httpx.get(f"{base}/login?token=wrong").status_code == 401
    assert httpx.get(f"{base}/healthz").status_code == 200
