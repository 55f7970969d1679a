"""A stdlib HTTP server run in a background thread: what the hook side-car server and the test fakes share."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self


class BackgroundServer:
    """``handler`` served on ``host:port`` (0 picks a free port); :meth:`start` / :meth:`stop`, or ``with``."""

    thread_name = "background-server"

    def __init__(self, handler: type[BaseHTTPRequestHandler], host: str = "127.0.0.1", port: int = 0) -> None:
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def host(self) -> str:
        return str(self._server.server_address[0])

    def serve_forever(self) -> None:
        self._server.serve_forever()

    def start(self) -> Self:
        self._thread = threading.Thread(target=self._server.serve_forever, name=self.thread_name, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()
