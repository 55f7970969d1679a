"""Access tokens and one-time login links, hashed at rest in ``local/web-tokens.json``.

A token is 256 random bits (``tl_…``), shown once when it is created and never stored: the file keeps its SHA-256,
which is enough for a secret that long (no guessing attack is cheaper than the keyspace) and lets a request be
checked in one dictionary lookup. A login link (``the-loop web open``) is a second, short-lived secret of the same
kind that can be used once. The file is local (a credential of this machine's control plane), mode 0600, and
every change holds its lock; one that does not parse is reported and moved aside, never overwritten, and while
it cannot be read nobody is let in (fail closed).
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from the_loop import toolkit

Role = Literal["viewer", "operator"]
ROLES: tuple[Role, ...] = ("viewer", "operator")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
PREFIX = "tl_"
LINK_SECONDS = 600
FILE_VERSION = 1
MAX_LINKS = 32


class TokenError(Exception):
    """A name, role or file problem, said in one line."""


@dataclass(frozen=True)
class Principal:
    """Who is asking: the token's name (or ``local:<user>`` for a login link) and its role."""

    name: str
    role: Role

    @property
    def can_act(self) -> bool:
        return self.role == "operator"

    @property
    def label(self) -> str:
        return f"web:{self.name}"


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def new_secret() -> str:
    return PREFIX + secrets.token_urlsafe(32)


def now_iso(when: float | None = None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if when is None else when))


class TokenStore:
    """The token file of one state root. Reads are memoised on the file's stat, so checking a request costs a
    ``stat`` and a lookup; a revoke is seen by the next request."""

    def __init__(self, path: Path, lock: Path) -> None:
        self.path, self.lock = path, lock
        self._seen: tuple[int, int, int] | None = None
        self._by_hash: dict[str, Principal] = {}
        self._readable = True

    # -------------------------------------------------------------------------------------- reading

    def _document(self) -> dict[str, Any] | None:
        """The file's content (an empty one when absent); None when it does not parse."""
        found = toolkit.load_json(self.path)
        if found is toolkit.Corrupt:
            return None
        if not isinstance(found, dict):
            return {"version": FILE_VERSION, "tokens": {}, "links": {}}
        tokens = found.get("tokens") if isinstance(found.get("tokens"), dict) else {}
        links = found.get("links") if isinstance(found.get("links"), dict) else {}
        return {"version": FILE_VERSION, "tokens": tokens, "links": links}

    def _refresh(self) -> None:
        try:
            info = self.path.stat()
            key: tuple[int, int, int] | None = (info.st_ino, info.st_mtime_ns, info.st_size)
        except FileNotFoundError:
            key = None
        if key == self._seen and self._seen is not None:
            return
        document = self._document()
        self._seen = key
        self._readable = document is not None
        self._by_hash = {}
        for name, entry in ((document or {}).get("tokens") or {}).items():
            if isinstance(entry, dict) and entry.get("role") in ROLES and isinstance(entry.get("hash"), str):
                self._by_hash[entry["hash"]] = Principal(str(name), entry["role"])

    @property
    def readable(self) -> bool:
        self._refresh()
        return self._readable

    def authenticate(self, secret: str) -> Principal | None:
        """The principal ``secret`` belongs to, or None (also when the file cannot be read: fail closed)."""
        if not secret.startswith(PREFIX) or len(secret) > 128:
            return None
        self._refresh()
        # A lookup by the digest: what its timing could tell is about a SHA-256, which says nothing of a secret.
        return self._by_hash.get(digest(secret))

    def holds(self, principal: Principal) -> bool:
        """Whether ``principal`` still has its token with that role (a revoke or a new role ends its logins)."""
        if principal.name.startswith("local:"):
            return True
        self._refresh()
        return principal in self._by_hash.values()

    def listing(self) -> list[dict[str, str]]:
        document = self._require()
        rows = []
        for name, entry in sorted(document["tokens"].items()):
            if isinstance(entry, dict):
                rows.append(
                    {"name": name, "role": str(entry.get("role", "")), "createdAt": str(entry.get("createdAt", ""))}
                )
        return rows

    # -------------------------------------------------------------------------------------- writing

    def _require(self) -> dict[str, Any]:
        document = self._document()
        if document is None:
            toolkit.quarantine_if_corrupt(self.path)
            raise TokenError(f"{self.path} did not parse; it was moved aside: create the tokens again")
        return document

    def _write(self, document: dict[str, Any]) -> None:
        toolkit.atomic_write_json(self.path, document)

    def create(self, name: str, role: str) -> str:
        """A new token for ``name`` (which must not exist yet); the secret, returned once."""
        if not NAME.match(name):
            raise TokenError(f"bad token name {name!r}: letters, digits, '.', '_' and '-', at most 64")
        if role not in ROLES:
            raise TokenError(f"bad role {role!r}: viewer or operator")
        secret = new_secret()
        with toolkit.locked(self.lock):
            document = self._require()
            if name in document["tokens"]:
                raise TokenError(f"a token named {name!r} exists: revoke it first (the-loop web token revoke {name})")
            document["tokens"][name] = {"role": role, "hash": digest(secret), "createdAt": now_iso()}
            self._write(document)
        return secret

    def revoke(self, name: str) -> bool:
        with toolkit.locked(self.lock):
            document = self._require()
            if name not in document["tokens"]:
                return False
            del document["tokens"][name]
            self._write(document)
        return True

    def create_link(self, user: str, role: Role = "operator", seconds: int = LINK_SECONDS) -> str:
        """A one-time login secret for the local operator, valid for ``seconds``."""
        secret = new_secret()
        with toolkit.locked(self.lock):
            document = self._require()
            links = {
                k: v for k, v in document["links"].items() if isinstance(v, dict) and v.get("expires", 0) > time.time()
            }
            links[digest(secret)] = {"user": user[:64], "role": role, "expires": time.time() + seconds}
            document["links"] = dict(sorted(links.items(), key=lambda item: item[1]["expires"])[-MAX_LINKS:])
            self._write(document)
        return secret

    def redeem_link(self, secret: str) -> Principal | None:
        """The principal of a live login link, which is used up by this call; None for anything else."""
        if not secret.startswith(PREFIX) or len(secret) > 128:
            return None
        with toolkit.locked(self.lock):
            document = self._document()
            if document is None:
                return None
            entry = document["links"].pop(digest(secret), None)
            if entry is None:
                return None
            self._write(document)
        if not isinstance(entry, dict) or entry.get("expires", 0) <= time.time() or entry.get("role") not in ROLES:
            return None
        return Principal(f"local:{entry.get('user') or 'operator'}", entry["role"])
