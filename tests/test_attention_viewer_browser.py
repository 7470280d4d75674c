"""The attention viewer in a real browser: headless Chromium driven by selenium.

Opens a viewer page of the zoo model (with effects beside the patterns) and one of
SmolLM2-135M on a 1024-token prompt, from ``file://``, and checks what a reader does with
them: no console errors; drawn within a measured time (read in the page: navigation start
until the script finished drawing and two frames were painted); hovering the pattern or a
token shows that row's exact numbers; the prompt and head menus switch what is drawn; the
PNG and SVG exports give non-empty images. Uses the Chromium and ChromeDriver installed on
the machine (nothing is downloaded). Set ``INTERV_SCREENSHOT_DIR`` to keep the screenshots.
"""

from __future__ import annotations

import base64
import os
import shutil
import tempfile
import time
import urllib.parse
from pathlib import Path

import _browser
import pytest
from _timing import budget_ms
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

import interv

pytestmark = [_browser.needs_chromium, pytest.mark.slow]  # a browser: out of the quick loop

_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1000",
)


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    for flag in _FLAGS:
        options.add_argument(flag)
    profile = tempfile.mkdtemp(prefix="interv-chromium-")
    options.add_argument(f"--user-data-dir={profile}")
    options.binary_location = _browser.CHROMIUM
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(_browser.CHROMEDRIVER), options=options)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def zoo_page(tmp_path_factory):
    """A viewer of every zoo head on 4 induction prompts, with zero and mean ablations."""
    model = interv.load_model("induction-2l")
    task = interv.load_task("induction", n_pairs=4, seed=0).tokenize(model)
    kinds = [interv.ZeroAblation(layer, head) for layer in range(2) for head in range(4)]
    kinds += [interv.MeanAblation(layer, head) for layer in range(2) for head in range(4)]
    result = interv.run(model, task, kinds, metric="logit_diff")
    viewer = interv.view_attention(model, task, result=result)
    return viewer, viewer.save(tmp_path_factory.mktemp("zoo") / "attention.html")


def _open(driver, path: Path) -> tuple[float, float]:
    """Load ``path``; return (ms from navigation start until drawn and two frames painted,
    ms the script itself took from its start to the end of the first draw)."""
    driver.get_log("browser")  # drop earlier messages
    driver.get(path.as_uri())
    ready, script = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "const root = document.querySelector('.interv-attention');"
        "const wait = () => root.getAttribute('data-ready') ? requestAnimationFrame(() => "
        "requestAnimationFrame(() => done([performance.now(), "
        "Number(root.getAttribute('data-draw-ms'))]))) : setTimeout(wait, 5);"
        "wait();"
    )
    state = driver.find_element(By.CSS_SELECTOR, ".interv-attention").get_attribute("data-ready")
    assert state == "1", driver.get_log("browser")
    return ready, script


def _severe(driver) -> list:
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def _hover_pattern(driver, query: int, key: int, n: int) -> None:
    """Move the mouse over cell (query, key) of the pattern (an event, no WebDriver move,
    so a cell smaller than a pixel is still hit exactly)."""
    driver.execute_script(
        "const [t, j, n] = arguments;"
        "const canvas = document.querySelector('canvas.iv-pattern');"
        "const box = canvas.getBoundingClientRect();"
        "canvas.parentNode.dispatchEvent(new MouseEvent('mousemove', {bubbles: true,"
        "  clientX: box.left + (j + 0.5) * box.width / n,"
        "  clientY: box.top + (t + 0.5) * box.height / n}));",
        query,
        key,
        n,
    )


def _row_numbers(driver) -> dict[str, float]:
    """The exact numbers (``data-v``) shown in the row panel, by their label."""
    return driver.execute_script(
        "const out = {};"
        "for (const dt of document.querySelectorAll('.iv-row dl dt')) {"
        "  const v = dt.nextElementSibling.querySelector('[data-v]');"
        "  if (v) out[dt.textContent] = Number(v.getAttribute('data-v'));"
        "}"
        "return out;"
    )


def _export(driver, kind: str) -> str:
    driver.find_element(By.CSS_SELECTOR, f"button[data-action={kind}]").click()
    return driver.execute_script(
        "return document.querySelector('.interv-attention').ivLastExport.url;"
    )


def _screenshot(driver, name: str, tmp_path: Path) -> Path:
    directory = Path(os.environ.get("INTERV_SCREENSHOT_DIR", tmp_path))
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    assert driver.save_screenshot(str(path))
    return path


def test_zoo_viewer_draws_hovers_switches_and_exports(browser, zoo_page, tmp_path):
    viewer, path = zoo_page
    view = viewer.view
    ready_ms, script_ms = _open(browser, path)
    print(
        f"zoo viewer ({len(view.heads)} heads x {view.n_prompts} prompts x {view.n_positions} "
        f"positions): {path.stat().st_size / 1e6:.2f} MB, drawn {ready_ms:.0f} ms after "
        f"navigation start (script {script_ms:.0f} ms)"
    )
    assert _severe(browser) == []
    assert ready_ms < budget_ms(2000)
    # hover a row of the pattern: its exact numbers, with units
    t = 9
    _hover_pattern(browser, t, 3, view.n_positions)
    numbers = _row_numbers(browser)
    assert numbers["sink mass"] == float(view.sink_mass[0, 0, t])
    assert numbers["normalized entropy"] == float(view.normalized_entropy[0, 0, t])
    assert numbers["content entropy"] == float(view.content_entropy[0, 0, t])
    panel = browser.find_element(By.CSS_SELECTOR, ".iv-row").text
    assert f"query row {t}" in panel and "nats" in panel and "fraction of log(n)" in panel
    assert "key 3" in panel and "8-bit display code" in panel
    # the head menu: L1H0's pattern, its effects and its key/value group
    Select(browser.find_element(By.CSS_SELECTOR, "[data-control=head]")).select_by_value("4")
    browser.execute_async_script("requestAnimationFrame(arguments[arguments.length - 1])")
    effects = browser.find_element(By.CSS_SELECTOR, ".iv-eff[data-head='4']")
    assert effects.is_displayed() and "ZeroAblation" in effects.text and "95% CI" in effects.text
    assert not browser.find_element(By.CSS_SELECTOR, ".iv-eff[data-head='0']").is_displayed()
    # the prompt menu: another prompt's tokens and numbers
    Select(browser.find_element(By.CSS_SELECTOR, "[data-control=prompt]")).select_by_value("2")
    browser.execute_async_script("setTimeout(arguments[arguments.length - 1], 50)")
    tokens = browser.find_elements(By.CSS_SELECTOR, ".iv-text .iv-tok")
    assert [tok.get_attribute("textContent") for tok in tokens] == list(view.tokens[2])
    # hover a token: where it attends and what attends to it
    browser.execute_script(
        "arguments[0].dispatchEvent(new MouseEvent('mouseover', {bubbles: true}))", tokens[12]
    )
    assert _row_numbers(browser)["sink mass"] == float(view.sink_mass[2, 4, 12])
    coloured = browser.execute_script(
        "return [...document.querySelectorAll('.iv-text .iv-tok')]"
        ".filter(s => s.style.background).length"
    )
    assert coloured > 1
    # the other colour scales and text modes draw without errors
    for value in ("log", "content", "weight"):
        Select(browser.find_element(By.CSS_SELECTOR, "[data-control=colour]")).select_by_value(
            value
        )
    Select(browser.find_element(By.CSS_SELECTOR, "[data-control=text]")).select_by_value("column")
    browser.execute_async_script("setTimeout(arguments[arguments.length - 1], 50)")
    assert _severe(browser) == []
    # exports
    png = base64.b64decode(_export(browser, "png").split(",", 1)[1])
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    svg = urllib.parse.unquote(_export(browser, "svg").split(",", 1)[1])
    assert svg.startswith("<svg") and "L1H0" in svg and "data:image/png;base64," in svg
    assert _severe(browser) == []
    # the README's picture: prompt 0 (padded), L1H0, a row hovered, the whole page
    Select(browser.find_element(By.CSS_SELECTOR, "[data-control=prompt]")).select_by_value("0")
    browser.execute_async_script("setTimeout(arguments[arguments.length - 1], 50)")
    _hover_pattern(browser, 17, 16, view.n_positions)
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(1400, min(height + 160, 2400))  # + the window frame
    try:
        _screenshot(browser, "viewer-zoo.png", tmp_path)
    finally:
        browser.set_window_size(1400, 1000)


@pytest.mark.real_model
def test_smollm2_viewer_on_a_1024_token_prompt_draws_fast(browser, smollm2_bridge, tmp_path):
    from importlib import resources

    model = smollm2_bridge
    text = resources.files("interv.data").joinpath("text_sample.txt").read_text(encoding="utf-8")
    tokens = model.to_tokens(text, truncate=False)[:, :1024]
    assert tokens.shape == (1, 1024)
    start = time.perf_counter()
    viewer = interv.view_attention(model, tokens, heads=["L17H4", "L20H1", "L3H0"])
    computed = time.perf_counter() - start
    path = viewer.save(tmp_path / "smollm2.html")
    size = path.stat().st_size
    ready_ms, script_ms = _open(browser, path)
    print(
        f"SmolLM2 viewer, 3 heads x 1024 tokens: computed in {computed:.1f} s, "
        f"{size / 1e6:.2f} MB, drawn {ready_ms:.0f} ms after navigation start (script "
        f"{script_ms:.0f} ms)"
    )
    assert _severe(browser) == []
    assert size < 2_500_000
    assert ready_ms < budget_ms(3000)
    view = viewer.view
    for t in (1023, 500):
        _hover_pattern(browser, t, 0, 1024)  # a row is under a pixel high: read which one
        shown = int(browser.find_element(By.CSS_SELECTOR, ".iv-rowtitle b").text.split()[-1])
        assert abs(shown - t) <= 2
        numbers = _row_numbers(browser)
        assert numbers["sink mass"] == float(view.sink_mass[0, 0, shown])
        assert numbers["content entropy"] == float(view.content_entropy[0, 0, shown])
    panel = browser.find_element(By.CSS_SELECTOR, ".iv-headinfo[data-head='0']").text
    assert "kv head 1 of 3, shared by L17H3, L17H4, L17H5" in panel
    switch_ms = browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "const root = document.querySelector('.interv-attention');"
        "const select = root.querySelector('[data-control=head]');"
        "const start = performance.now(); select.value = '1';"
        "root.ivViewer.select().then(() => requestAnimationFrame(() => "
        "done(performance.now() - start)));"
    )
    print(f"switching to another head of 1024 tokens: {switch_ms:.0f} ms until drawn")
    assert switch_ms < budget_ms(2000)
    png = base64.b64decode(_export(browser, "png").split(",", 1)[1])
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
    assert _severe(browser) == []
    _screenshot(browser, "viewer-smollm2-1024.png", tmp_path)
