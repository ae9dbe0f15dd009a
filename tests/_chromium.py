"""Headless Chromium driven over the DevTools protocol (a websocket on localhost), for page tests.

Debian's `chromium` package (the Makefile's test bootstrap installs it) in a
fresh profile, with everything that would reach the network turned off.
Collects console errors, uncaught exceptions, log errors and failed loads.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import websocket

__all__ = ["Chromium", "find_chromium"]

_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
          "--disable-background-networking", "--disable-component-update", "--disable-sync",
          "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio", "--remote-debugging-port=0")


def find_chromium() -> str:
    """The chromium executable; fails with what to do when it is missing."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    raise AssertionError("chromium is not installed: run `make test` (it installs Debian's chromium package)")


class Chromium:
    """One browser, one page. Use as a context manager; `errors` lists everything that went wrong on the page."""

    def __init__(self, *, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self.errors: list[str] = []
        self._next_id = 0
        self._profile = Path(tempfile.mkdtemp(prefix="labzarr-chromium-"))
        self._proc: subprocess.Popen[bytes] | None = None
        self._ws: websocket.WebSocket | None = None

    def __enter__(self) -> Chromium:
        self._proc = subprocess.Popen([find_chromium(), *_FLAGS, f"--user-data-dir={self._profile}", "about:blank"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        port_file = self._profile / "DevToolsActivePort"
        deadline = time.monotonic() + self.timeout
        while not (port_file.exists() and port_file.read_text().count("\n") >= 1):
            if self._proc.poll() is not None:
                stderr = self._proc.stderr.read().decode()[-2000:]  # type: ignore[union-attr]
                raise AssertionError(f"chromium exited {self._proc.returncode}: {stderr}")
            if time.monotonic() > deadline:
                raise AssertionError("chromium did not open its DevTools port")
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=self.timeout) as resp:
            targets = json.load(resp)
        page = next(t for t in targets if t["type"] == "page")
        # Chromium refuses DevTools websockets that send an Origin header unless allowed; send none.
        self._ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=self.timeout, suppress_origin=True)
        for domain in ("Runtime", "Log", "Page", "Network"):
            self.call(f"{domain}.enable")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._ws is not None:
            self._ws.close()
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            if self._proc.stderr is not None:
                self._proc.stderr.close()
        shutil.rmtree(self._profile, ignore_errors=True)

    def _recv(self) -> dict[str, Any]:
        assert self._ws is not None
        msg: dict[str, Any] = json.loads(self._ws.recv())
        method, params = msg.get("method"), msg.get("params", {})
        if method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
            self.errors.append("console: "
                               + " ".join(str(a.get("value", a.get("description", ""))) for a in params["args"]))
        elif method == "Runtime.exceptionThrown":
            self.errors.append("exception: " + params["exceptionDetails"].get("text", ""))
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            self.errors.append(f"log: {params['entry']['text']} {params['entry'].get('url', '')}")
        elif method == "Network.loadingFailed":
            self.errors.append(f"load failed: {params.get('errorText')} ({params.get('type')})")
        return msg

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one command and return its result, collecting the events that arrive meanwhile."""
        assert self._ws is not None
        self._next_id += 1
        self._ws.send(json.dumps({"id": self._next_id, "method": method, "params": params}))
        while True:
            msg = self._recv()
            if msg.get("id") == self._next_id:
                if "error" in msg:
                    raise AssertionError(f"{method}: {msg['error']}")
                result: dict[str, Any] = msg["result"]
                return result

    def open(self, url: str, *, width: int = 1280, height: int = 900) -> None:
        """Load `url` and wait for its load event (all images fetched)."""
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + self.timeout
        while self._recv().get("method") != "Page.loadEventFired":
            if time.monotonic() > deadline:
                raise AssertionError(f"{url}: no load event within {self.timeout} s")

    def eval(self, expression: str) -> Any:
        """Evaluate a JavaScript expression in the page and return its JSON value."""
        out = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in out:
            raise AssertionError(f"{expression}: {out['exceptionDetails']}")
        return out["result"].get("value")

    def screenshot(self, path: Path, *, full_page: bool = True) -> Path:
        """Write a PNG of the page (the whole page, not just the viewport, by default)."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            size = self.call("Page.getLayoutMetrics")["cssContentSize"]
            params |= {"captureBeyondViewport": True,
                       "clip": {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}}
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", **params)["data"]))
        return path
