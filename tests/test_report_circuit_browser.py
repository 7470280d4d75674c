"""The circuit page in a real browser (headless Chromium driven by selenium): it opens
without console errors, draws the graph and the curve, and hovering, focusing or clicking
an edge shows that edge's numbers and status (click pins, Esc unpins). Uses the system's
Chromium and ChromeDriver; nothing is downloaded."""

from __future__ import annotations

import shutil
import tempfile

import _browser
import pytest
from _circuit_fixtures import make_circuit, make_concentration, make_curve
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By

from interv.circuits.mission import mission_link
from interv.report.circuit_page import circuit_page

pytestmark = [_browser.needs_chromium, pytest.mark.slow]  # a browser: out of the quick loop


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    options = webdriver.ChromeOptions()
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--window-size=1300,1000"):
        options.add_argument(flag)
    profile = tempfile.mkdtemp(prefix="interv-chromium-")
    options.add_argument(f"--user-data-dir={profile}")
    options.binary_location = _browser.CHROMIUM
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(_browser.CHROMEDRIVER), options=options)
    circuit = make_circuit()
    link = mission_link(circuit, make_concentration(), n_bootstrap=100)
    path = tmp_path_factory.mktemp("circuit") / "circuit.html"
    path.write_text(circuit_page(circuit, make_curve(), link), encoding="utf-8")
    driver.get(path.as_uri())
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


def _detail(driver) -> str:
    return driver.find_element(By.CSS_SELECTOR, ".ivc-detail").text


def test_the_page_opens_without_console_errors_and_draws_its_parts(page):
    errors = [entry for entry in page.get_log("browser") if entry["level"] == "SEVERE"]
    assert errors == []
    for part in ("headline", "graph", "faithfulness", "mission"):
        assert page.find_element(By.CSS_SELECTOR, f"[data-part={part}]").is_displayed()
    assert len(page.find_elements(By.CSS_SELECTOR, "path[data-edge]")) == 40
    assert len(page.find_elements(By.CSS_SELECTOR, ".ivc-curve circle")) == 10


def test_hovering_an_edge_shows_its_numbers_and_click_pins_them(page):
    edge = page.find_element(By.CSS_SELECTOR, "path[data-edge='L1H2->logits']")
    ActionChains(page).move_to_element(edge).perform()
    text = _detail(page)
    assert "L1H2->logits" in text and "exact effect: +3" in text
    assert "status: exact (verified)" in text
    estimated = page.find_element(By.CSS_SELECTOR, "path[data-status='estimated']")
    page.execute_script("arguments[0].focus()", estimated)
    assert "not computed (estimate only)" in _detail(page)
    page.execute_script("arguments[0].dispatchEvent(new MouseEvent('click'))", edge)
    page.execute_script("arguments[0].dispatchEvent(new MouseEvent('mouseenter'))", estimated)
    assert "L1H2->logits" in _detail(page)  # pinned
    page.execute_script(
        "arguments[0].closest('.interv-circuit').dispatchEvent("
        "new KeyboardEvent('keydown', {key: 'Escape', bubbles: true}))",
        edge,
    )
    assert _detail(page) == "Hover an edge."
