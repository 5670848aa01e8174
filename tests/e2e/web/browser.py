"""What the browser tests share: Debian's chromium driven by Playwright, the leader served over real HTTP, a page
logged in with a token."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from common.procs import free_port
from leader.app import create_app
from leader.settings import LeaderSettings
from tests.conftest import wait_for_port

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
NEEDS_CHROMIUM = pytest.mark.skipif(
    not Path(CHROMIUM).exists() and shutil.which("chromium") is None,
    reason="Debian's chromium is not installed (scripts/setup.sh installs it)",
)
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (dev extra)")


@contextmanager
def serve(settings: LeaderSettings) -> Iterator[str]:
    """The leader app served by uvicorn on a free loopback port; yields its URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for_port(port)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@contextmanager
def chromium() -> Iterator[Any]:
    """One Chromium (a module's: tests/e2e/web/conftest.py), each test in a fresh context of its own (fresh_page)."""
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def fresh_page(browser: Any, *, height: int = 1000) -> Iterator[Any]:
    """A page 1,400 px wide in a context of its own: no cookie, storage or route of another test."""
    context = browser.new_context(viewport={"width": 1400, "height": height})
    try:
        yield context.new_page()
    finally:
        context.close()


@contextmanager
def logged_in(browser: Any, url: str, token: str, *, height: int = 1000) -> Iterator[Any]:
    """A fresh page 1,400 px wide, logged in with `token`."""
    with fresh_page(browser, height=height) as page:
        page.goto(url + "/login")
        page.fill("#token", token)
        page.click("#login-submit")
        page.wait_for_load_state()
        yield page
