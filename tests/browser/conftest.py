"""A real headless browser for the UI tests: Debian's chromium driven through chromium-driver
by selenium (no browser download), and ASGI apps served on a real loopback port.

The browser tests are skipped, saying why, where chromium or chromium-driver is missing
(``apt-get install -y chromium chromium-driver``), and fail instead with
``ADK_MESH_REQUIRE_BROWSER`` set (``.ci/run`` installs them and sets it). Screenshots go
to ``build/test-output/browser/`` (``ADK_MESH_TEST_OUTPUT`` moves ``build/test-output``).
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1440,1000",
    "--force-device-scale-factor=1",
    "--lang=en-US",
)


def _executable(*candidates: str) -> str | None:
    for candidate in candidates:
        found = shutil.which(candidate)
        if found:
            return found
    return None


@pytest.fixture(scope="session")
def output_dir() -> Path:
    """Where screenshots are kept after the run."""
    root = Path(os.environ.get("ADK_MESH_TEST_OUTPUT") or REPO_ROOT / "build" / "test-output")
    directory = root / "browser"
    directory.mkdir(parents=True, exist_ok=True)
    return directory


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless chromium with a new, empty profile; quit at the module's end."""
    chromium = _executable("chromium", "chromium-browser")
    driver_path = _executable("chromedriver", "chromium-driver")
    if chromium is None or driver_path is None:
        why = (
            "needs Debian's chromium and chromium-driver "
            "(apt-get install -y chromium chromium-driver)"
        )
        if os.environ.get("ADK_MESH_REQUIRE_BROWSER"):
            pytest.fail(f"ADK_MESH_REQUIRE_BROWSER is set: the browser test {why}")
        pytest.skip(why)
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="adk-mesh-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # An explicit driver path: selenium's manager never looks for (or downloads) one.
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def browser_errors(driver: Any) -> list[str]:
    """The page's console errors (uncaught exceptions, failed module loads, failed requests)."""
    return [
        entry["message"] for entry in driver.get_log("browser") if entry.get("level") == "SEVERE"
    ]


@contextmanager
def serve_asgi(app: Callable[..., Any]) -> Iterator[str]:
    """Serve ``app`` with uvicorn on a free 127.0.0.1 port in a thread; yield its base URL
    once uvicorn is listening."""
    import uvicorn

    class Server(uvicorn.Server):
        ready = threading.Event()

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            self.ready.set()

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        assert server.ready.wait(20), "uvicorn did not start"
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
