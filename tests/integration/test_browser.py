"""A real browser: Debian's chromium, driven by puppeteer-core (tests/js/browser.mjs), loads a
page from another origin (a second local port) that imports the LangGraph JS SDK's own ESM files
from tests/js/node_modules through an import map (no bundler), and against a replica with
``CORS_ALLOW_ORIGINS`` streams a run, resumes an interrupt as agent-chat-ui does, and cancels a
run (tests/js/browser_page.mjs)."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from threadline.agent.builtin import builtin_reply

from client import API_KEY, API_KEYS
from servers import free_port

pytestmark = pytest.mark.integration

JS = Path(__file__).resolve().parents[1] / "js"
GRAPHS = Path(__file__).resolve().parent / "graphs" / "langgraph.json"
CHROMIUM = "/usr/bin/chromium"
NODE = shutil.which("node") or "node"
JS_TYPES = {".js": "text/javascript", ".mjs": "text/javascript"}


def import_map() -> dict:
    done = subprocess.run(
        [NODE, "--conditions=browser", "--experimental-import-meta-resolve", "importmap.mjs"],
        cwd=JS,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


class _Page(SimpleHTTPRequestHandler):
    """tests/js as static files, plus the page itself at ``/``."""

    extensions_map: ClassVar[dict[str, str]] = {**SimpleHTTPRequestHandler.extensions_map, **JS_TYPES}
    page = b""

    def do_GET(self) -> None:
        if self.path in ("/", "/index.html"):
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(self.page)))
            self.end_headers()
            self.wfile.write(self.page)
            return
        super().do_GET()

    def log_message(self, *args: object) -> None:
        pass


def page_map(mapping: dict) -> dict:
    """The page's import map: the SDK's entry point by name, plus the resolved graph's."""
    imports = {**mapping["importmap"]["imports"], "@langchain/langgraph-sdk/client": mapping["entry"]}
    return {"imports": imports, "scopes": mapping["importmap"]["scopes"]}


@pytest.fixture
def page_server():
    mapping = import_map()
    html = (
        "<!doctype html><html><head><meta charset='utf-8'><link rel='icon' href='data:,'>"
        "<title>threadline browser test</title>"
        f"<script type='importmap'>{json.dumps(page_map(mapping))}</script>"
        "<script type='module' src='/browser_page.mjs'></script></head><body></body></html>"
    )
    handler = type("Page", (_Page,), {"page": html.encode()})
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), functools.partial(handler, directory=str(JS)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_page_on_another_origin_streams_resumes_and_cancels(start_replica, page_server, tmp_path) -> None:
    if not Path(CHROMIUM).exists():
        raise RuntimeError("Debian's chromium is missing: run `make install` (scripts/install-system.sh)")
    replica = start_replica(
        {
            "API_KEYS": API_KEYS,
            "CHECKPOINT_SQLITE_PATH": str(tmp_path / "c.sqlite"),
            "LANGGRAPH_CONFIG": str(GRAPHS),
            "CORS_ALLOW_ORIGINS": "http://127.0.0.1:*",
            # The run to cancel streams ~2 s, so the cancel lands while it runs.
            "MODEL_TOKEN_DELAY_MS": "200",
        }
    )
    env = {**os.environ, "PAGE_URL": page_server + "/", "API_URL": replica.url, "API_KEY": API_KEY}
    done = subprocess.run([NODE, "browser.mjs"], cwd=JS, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert "error" not in answer, answer
    assert answer["problems"] == [], answer["problems"]
    seen = answer["result"]
    assert seen["origin"] == page_server and page_server != replica.url
    assert seen["streamed"] == builtin_reply(["hello browser"], 1)
    assert seen["interrupt"] == {"question": "approve a refund of 250?", "amount": 250}
    assert seen["resumed"] == "your refund of 250 is approved"
    assert seen["cancelled"] not in ("pending", "running", "success"), seen
