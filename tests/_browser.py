"""The browser tests' gate: selenium (``interv[dev]``) and the system's Chromium and
ChromeDriver. Importing this module skips the importing test module, with the reason, when
selenium is missing (the Quickstart's ``interv[test]`` has no selenium); ``needs_chromium``
skips its tests when the browser or its driver is not installed. Nothing is downloaded."""

from __future__ import annotations

import shutil

import pytest

pytest.importorskip(
    "selenium",
    reason="selenium is not installed (it is in interv[dev]: pip install -e '.[dev]')",
)

CHROMIUM = next(
    filter(None, (shutil.which(name) for name in ("chromium", "chromium-browser"))), None
)
CHROMEDRIVER = shutil.which("chromedriver")

needs_chromium = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason=(
        "no Chromium and ChromeDriver installed locally (apt-get install chromium "
        "chromium-driver; .ci/run installs them)"
    ),
)
