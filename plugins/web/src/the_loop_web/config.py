"""The ``service`` and ``web`` config sections.

``service`` keeps the reference's names (``enabled``, ``host``, ``port`` 4114, ``exposed``) and adds ``tls``. A bind
that is not loopback must be served over TLS (``service.tls.certFile`` and ``keyFile``) or acknowledged with
``service.exposed: true`` (TLS ends at a reverse proxy in front): anything else is a config error naming
``service.host``, so the control plane is never put on a network in clear text by accident.
"""

from __future__ import annotations

import ipaddress
import logging

from pydantic import Field, ValidationInfo, field_validator

from the_loop.config.models import Section

log = logging.getLogger("the_loop_web.config")


class TlsSettings(Section):
    cert_file: str = ""
    key_file: str = Field(default="", validate_default=True)

    @property
    def enabled(self) -> bool:
        return bool(self.cert_file and self.key_file)

    @field_validator("key_file")
    @classmethod
    def _both(cls, value: str, info: ValidationInfo) -> str:
        if bool(value) != bool(info.data.get("cert_file")):
            raise ValueError("certFile and keyFile go together: give both, or neither")
        return value


class ServiceSettings(Section):
    # exposed and tls come before host: host's check reads them
    enabled: bool = False
    exposed: bool = False  # the operator's acknowledgement: a non-loopback bind without TLS here
    tls: TlsSettings = TlsSettings()
    host: str = "127.0.0.1"
    port: int = Field(default=4114, ge=0, le=65535)
    max_concurrency: int = Field(default=64, ge=4, le=4096)

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)

    @property
    def scheme(self) -> str:
        return "https" if self.tls.enabled else "http"

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    @field_validator("host")
    @classmethod
    def _exposure(cls, value: str, info: ValidationInfo) -> str:
        tls = info.data.get("tls")
        if is_loopback(value) or (tls is not None and tls.enabled):
            return value
        if not info.data.get("exposed"):
            raise ValueError(
                f"{value!r} is not loopback: serve it over TLS (service.tls.certFile and keyFile) or, behind a "
                "reverse proxy that ends TLS, acknowledge it with service.exposed: true"
            )
        log.warning(
            "service.host: %r is not loopback and is served without TLS (service.exposed: true): only a reverse "
            "proxy that ends TLS may reach it",
            value,
        )
        return value


class WebSettings(Section):
    stale_after_minutes: int = Field(default=30, ge=1)
    session_hours: int = Field(default=12, ge=1, le=24 * 30)  # how long a login lasts
    max_streams: int = Field(default=16, ge=1, le=1024)  # live-update and terminal connections held at once
    login_attempts: int = Field(default=10, ge=1)  # failed logins per peer per window before 429
    login_window_seconds: int = Field(default=60, ge=1)
    allowed_origins: list[str] = Field(default_factory=list)  # besides the service's own URL (a reverse proxy's)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
