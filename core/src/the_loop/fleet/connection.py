"""One NATS connection for synchronous code: nats-py's asyncio client, driven on an event loop of its own thread.

``Nats.connect(servers)`` connects (raising :class:`FleetError` with the reason when it cannot within ``timeout``);
``run(coroutine)`` runs one client call on the loop and waits for it; ``close()`` drains and stops the loop. The
client library is imported here only, and only when a fleet is configured.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


class FleetError(Exception):
    """NATS could not be reached or refused what was asked."""


class Nats:
    """A connected client and the loop it runs on."""

    def __init__(self, client: Any, loop: asyncio.AbstractEventLoop, thread: threading.Thread, timeout: float) -> None:
        self.client = client
        self.loop = loop
        self.thread = thread
        self.timeout = timeout
        self.jetstream = client.jetstream(timeout=timeout)
        self.replicas = 1  # how many servers keep each stream and bucket (fleet.nats.replicas, a cluster's size)

    @classmethod
    def connect(cls, servers: Sequence[str], *, timeout: float = 5.0, **options: Any) -> Nats:
        import nats

        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="the-loop-nats", daemon=True)
        thread.start()

        async def connected() -> Any:
            # No reconnect storm at connect: a fleet that cannot reach NATS says so at once.
            return await nats.connect(
                servers=list(servers),
                connect_timeout=timeout,
                allow_reconnect=True,
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.5,
                **options,
            )

        try:
            client = asyncio.run_coroutine_threadsafe(connected(), loop).result(timeout * 2 + 1)
        except Exception as exc:
            loop.call_soon_threadsafe(loop.stop)
            raise FleetError(f"cannot connect to NATS at {', '.join(servers)}: {type(exc).__name__}: {exc}") from None
        return cls(client, loop, thread, timeout)

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run one client call on the loop and return what it returned (its exception raised here)."""
        if not self.loop.is_running():
            coroutine.close()
            raise FleetError("the NATS connection is closed")
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout or self.timeout * 2)

    def close(self) -> None:
        """Close the client (what JetStream stored was acknowledged already: nothing waits to be flushed), cancel
        what is left on the loop, stop the loop. Closing twice does nothing."""
        if not self.loop.is_running():
            return
        try:
            self.run(self.client.close(), timeout=5)
        except Exception:  # NATS went away meanwhile: nothing left to close
            pass

        def quiet(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
            if not isinstance(context.get("exception"), asyncio.CancelledError):  # what closing cancels
                loop.default_exception_handler(context)

        self.loop.set_exception_handler(quiet)

        async def cancelled() -> None:
            tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            self.run(cancelled(), timeout=5)
        except Exception:
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)


def options_for(nats_section: Any, environ: Any = None) -> dict[str, Any]:
    """nats-py's connect options from ``fleet.nats``: credentials read from the environment variables it names
    (never from the file, never put on an argv), and TLS from the files it names."""
    import os

    env = os.environ if environ is None else environ
    options: dict[str, Any] = {}
    if nats_section.token_env and env.get(nats_section.token_env):
        options["token"] = env[nats_section.token_env]
    if nats_section.user_env and env.get(nats_section.user_env):
        options["user"] = env[nats_section.user_env]
        options["password"] = env.get(nats_section.password_env, "") if nats_section.password_env else ""
    if nats_section.creds_file_env and env.get(nats_section.creds_file_env):
        options["user_credentials"] = env[nats_section.creds_file_env]
    tls = nats_section.tls
    if tls.ca_file or tls.cert_file:
        import ssl

        context = ssl.create_default_context(cafile=tls.ca_file or None)
        if tls.cert_file:
            context.load_cert_chain(tls.cert_file, tls.key_file or None)
        options["tls"] = context
    return options


def missing_credentials(nats_section: Any, environ: Any = None) -> list[str]:
    """The credential variables ``fleet.nats`` names that are not set (a fleet process refuses to start)."""
    import os

    env = os.environ if environ is None else environ
    keys = ("token_env", "user_env", "password_env", "creds_file_env")
    names = [getattr(nats_section, key) for key in keys]
    return [
        f"fleet.nats.{_camel(key)}: {name} is not set"
        for key, name in zip(keys, names, strict=True)
        if name and not env.get(name)
    ]


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(part.title() for part in rest)


def open_stream(nats: Nats, name: str, prefix: str, duplicate_window: float) -> None:
    """Create the file-stored stream ``name`` over ``<prefix>.>`` when it is missing (``duplicate_window`` seconds of
    dedupe by ``Nats-Msg-Id``)."""
    from nats.js.api import StorageType, StreamConfig

    config = StreamConfig(
        name=name,
        subjects=[f"{prefix}.>"],
        storage=StorageType.FILE,
        duplicate_window=duplicate_window,
        num_replicas=nats.replicas,
    )
    try:
        nats.run(nats.jetstream.add_stream(config))
    except Exception as exc:
        raise FleetError(f"cannot open the stream {name}: {type(exc).__name__}: {exc}") from None


def open_bucket(nats: Nats, bucket: str, ttl: float) -> Any:
    """The key-value bucket ``bucket`` (one value per key), created when missing; an entry lives ``ttl`` seconds
    after its last write."""
    from nats.js.api import KeyValueConfig

    try:
        return nats.run(
            nats.jetstream.create_key_value(KeyValueConfig(bucket=bucket, history=1, ttl=ttl, replicas=nats.replicas))
        )
    except Exception as exc:
        raise FleetError(f"cannot open the bucket {bucket}: {type(exc).__name__}: {exc}") from None


def stored(nats: Nats, subject: str, key: str, data: bytes, **headers: str) -> Any:
    """Publish ``data`` on ``subject`` with dedupe key ``key``; JetStream's acknowledgement, or :class:`FleetError`
    when it did not store it."""
    try:
        return nats.run(nats.jetstream.publish(subject, data, headers={"Nats-Msg-Id": key, **headers}))
    except Exception as exc:
        raise FleetError(f"JetStream did not store {key}: {type(exc).__name__}: {exc}") from None


def bucket_values(nats: Nats, kv: Any) -> list[tuple[str, bytes]]:
    """Every (key, value) a key-value bucket holds now, by key (one removed meanwhile is left out)."""
    from nats.js.errors import KeyDeletedError, KeyNotFoundError, NoKeysError

    try:
        keys = nats.run(kv.keys())
    except NoKeysError:
        return []
    found = []
    for key in sorted(keys):
        try:
            found.append((key, bytes(nats.run(kv.get(key)).value or b"")))
        except (KeyNotFoundError, KeyDeletedError):
            continue
    return found
