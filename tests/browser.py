"""Headless Chromium driven over the Chrome DevTools Protocol, with networking blocked.

Tests open pages as a user without internet would: every host name resolves to nothing
(``--host-resolver-rules``) and every proxied request goes to a closed loopback port, so a
page that needs a CDN fails to load it; :meth:`Browser.network_is_blocked` proves that a
request to the network does fail. While a page loads, the browser's failed requests,
console errors and uncaught exceptions are collected for the test to assert on.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from typing import Any

import websocket

FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-extensions", "--disable-default-apps", "--mute-audio",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
    "--remote-debugging-port=0", "--remote-allow-origins=*", "--allow-file-access-from-files",
]  # fmt: skip


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    assert path, "Debian's chromium is needed: ./dev test installs it"
    return path


class Browser:
    """One Chromium process and one page target; a context manager (the process is killed on
    exit)."""

    def __init__(self, width: int = 1400, height: int = 1000) -> None:
        self.profile = tempfile.mkdtemp(prefix="logreplay-chromium-")
        # its temporary files (the singleton socket's directory) inside the profile, which is
        # removed on exit: a killed Chromium leaves them behind in the system's temp directory
        self.proc = subprocess.Popen(
            [chromium(), *FLAGS, f"--window-size={width},{height}",
             f"--user-data-dir={self.profile}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={**os.environ, "TMPDIR": self.profile},
        )  # fmt: skip
        port = self._port()
        self.ws = websocket.create_connection(self._page_url(port), timeout=60)
        self.next_id = 0
        self.events: list[dict] = []
        for domain in ("Page", "Runtime", "Network", "Log"):
            self.call(f"{domain}.enable")

    def _port(self) -> int:
        marker = os.path.join(self.profile, "DevToolsActivePort")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if os.path.exists(marker):
                with open(marker) as f:
                    first = f.readline().strip()
                if first:
                    return int(first)
            assert self.proc.poll() is None, "chromium exited at start"
            time.sleep(0.1)
        raise TimeoutError("chromium did not open its DevTools port")

    @staticmethod
    def _page_url(port: int) -> str:
        import urllib.request

        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:
                    targets = json.loads(r.read())
                page = next(t for t in targets if t["type"] == "page")
                return page["webSocketDebuggerUrl"]
            except (OSError, StopIteration):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.ws.close()
        finally:
            self.proc.kill()
            self.proc.wait(timeout=30)
            shutil.rmtree(self.profile, ignore_errors=True)

    # -- protocol ----------------------------------------------------------------------------
    def call(self, method: str, **params: Any) -> dict:
        self.next_id += 1
        mine = self.next_id
        self.ws.send(json.dumps({"id": mine, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == mine:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def wait_for(self, method: str, timeout: float = 60) -> dict:
        for i, e in enumerate(self.events):
            if e["method"] == method:
                return self.events.pop(i)
        self.ws.settimeout(timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = json.loads(self.ws.recv())
            if msg.get("method") == method:
                return msg
            if "method" in msg:
                self.events.append(msg)
        raise TimeoutError(method)

    def evaluate(self, expression: str, await_promise: bool = False) -> Any:
        res = self.call(
            "Runtime.evaluate",
            expression=expression,
            returnByValue=True,
            awaitPromise=await_promise,
        )
        if "exceptionDetails" in res:
            raise RuntimeError(res["exceptionDetails"])
        return res["result"].get("value")

    # -- what tests use ----------------------------------------------------------------------
    def network_is_blocked(self) -> bool:
        """A fetch of a public CDN URL fails (then the events it caused are forgotten)."""
        failed = self.evaluate(
            "fetch('https://cdn.jsdelivr.net/npm/jquery/dist/jquery.min.js')"
            ".then(() => false, () => true)",
            await_promise=True,
        )
        self.call("Runtime.evaluate", expression="1")
        self.events.clear()
        return bool(failed)

    def open(self, url: str, ready: str = "document.readyState === 'complete'",
             timeout: float = 60) -> float:  # fmt: skip
        """Navigate and wait until ``ready`` holds; seconds from navigation to then."""
        self.events.clear()
        start = time.monotonic()
        self.call("Page.navigate", url=url)
        deadline = start + timeout
        while time.monotonic() < deadline:
            if self.evaluate(f"!!({ready})"):
                return time.monotonic() - start
            time.sleep(0.05)
        raise TimeoutError(f"{url}: {ready} never held")

    def settle(self, seconds: float = 0.5) -> None:
        """Let late events (requests, console messages) arrive."""
        time.sleep(seconds)
        self.call("Runtime.evaluate", expression="1")

    def failed_requests(self) -> list[dict]:
        return [e["params"] for e in self.events if e["method"] == "Network.loadingFailed"]

    def console_errors(self) -> list[str]:
        out = []
        for e in self.events:
            p = e["params"]
            if e["method"] == "Runtime.exceptionThrown":
                out.append(json.dumps(p["exceptionDetails"])[:500])
            elif e["method"] == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert"):
                out.append(json.dumps(p["args"])[:500])
            elif e["method"] == "Log.entryAdded" and p["entry"]["level"] == "error":
                out.append(p["entry"].get("text", "")[:500])
        return out

    def requested(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events
                if e["method"] == "Network.requestWillBeSent"]  # fmt: skip

    def screenshot(self, path: str, full_page: bool = True) -> bytes:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            params["captureBeyondViewport"] = True
            size = self.call("Page.getLayoutMetrics")["cssContentSize"]
            params["clip"] = {"x": 0, "y": 0, "width": size["width"],
                              "height": min(size["height"], 12000), "scale": 1}  # fmt: skip
        data = base64.b64decode(self.call("Page.captureScreenshot", **params)["data"])
        with open(path, "wb") as f:
            f.write(data)
        return data
