"""Real HTTP servers on 127.0.0.1 for what the code under test fetches or posts over HTTP (a
JWKS URL, a tracing backend's query API, an OTLP/HTTP receiver), served from a thread."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that logs nothing and answers with :meth:`reply`."""

    def reply(self, body: bytes, content_type: str) -> None:
        """Answer 200 with ``body`` of ``content_type``."""
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def serve_http(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve ``handler`` from a thread on a free port of 127.0.0.1; yields the base URL
    (``http://127.0.0.1:<port>``). The server is shut down on exit."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@contextlib.contextmanager
def serve_json(answer: Callable[[str], Any]) -> Iterator[str]:
    """Answer every GET with ``answer(path)`` as JSON (see :func:`serve_http`). ``answer`` is
    called for each request, so a test can change what is served, or record what was asked,
    between requests."""

    class Handler(QuietHandler):
        def do_GET(self) -> None:
            self.reply(json.dumps(answer(self.path)).encode(), "application/json")

    with serve_http(Handler) as url:
        yield url
