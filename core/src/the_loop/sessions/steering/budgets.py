"""Budgets: what a work item's sessions may spend (``routing.budgets``), what they spent, and what happens then.

Three measures, each optional: **tokens** (every kind the model counts), **cost** in ``routing.budgets.currency``
from the declared price table (per million tokens, by model name; the longest declared prefix wins, ``default``
for the rest), and **wall** time in minutes since the item's first session started. The harness adapter reports
usage (``HarnessAdapter.read_usage``): read incrementally from a cursor kept per session, so each check reads only
what was appended since the last.

Spend lives on this machine's session record (``usage``, local); raises are an authorized person's decision and
live in the portable record (``budget``): ``the-loop budget +5usd`` (or ``+200000tokens``, ``+50k tokens``,
``+30min``, ``+2h``) adds to the item's limit. At ``warnAtPercent`` of a limit the ticket and the item's channels
get one warning; at 100 % the session is paused (not killed: the conversation is kept, the turn in flight
finishes) with a marked comment saying how to raise the budget, and a raise that brings every measure under its
limit resumes it. Every step is an event: ``budget.warning``, ``budget.exhausted``, ``budget.raised``,
``budget.unpriced``.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from the_loop import events
from the_loop.sessions.steering import tell

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.interfaces import HarnessAdapter, Usage
    from the_loop.refs import WorkItemRef
    from the_loop.state.registry import Endpoint, SessionRecord

MEASURES = ("tokens", "cost", "wall")
KINDS = ("inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens")
RAISES_KEPT = 20
# A number, then a k or an m only when tokens follow ("+30min" is minutes), then the unit.
_AMOUNT = re.compile(r"^\+?\s*(\d+(?:\.\d+)?)\s*(?:([km])\s*(?=tokens?$))?([a-z]+)$", re.IGNORECASE)
_UNITS = {"tokens": "tokens", "token": "tokens", "min": "wall", "mins": "wall", "minutes": "wall", "m": "wall"}
_HOURS = ("h", "hour", "hours")


@dataclass(frozen=True)
class Status:
    """One measure of one work item: what was spent of what limit (None: unlimited)."""

    measure: str
    spent: float
    limit: float | None

    @property
    def ratio(self) -> float:
        return self.spent / self.limit if self.limit else 0.0


# ------------------------------------------------------------------------------------------------- reading


def usage_of(record: SessionRecord | None) -> dict[str, Any]:
    found = record.extra.get("usage") if record is not None else None
    return found if isinstance(found, dict) else {}


def enabled(config: LoadedConfig) -> bool:
    budgets = config.core.routing.budgets
    return any(value is not None for value in (budgets.tokens, budgets.cost, budgets.wall_minutes))


def _section(config: LoadedConfig, ref: WorkItemRef | str, key: str) -> dict[str, float]:
    section = (config.store.read(ref) or {}).get("budget")
    found = section.get(key) if isinstance(section, dict) else None
    if not isinstance(found, dict):
        return {}
    return {m: float(v) for m, v in found.items() if m in MEASURES and isinstance(v, int | float) and v > 0}


def raised(config: LoadedConfig, ref: WorkItemRef | str) -> dict[str, float]:
    """What authorized people added to the item's limits (the portable ``budget`` section)."""
    return _section(config, ref, "raised")


def limits(config: LoadedConfig, ref: WorkItemRef | str) -> dict[str, float | None]:
    """Each measure's limit for the item: the one set at its start (``budget=`` on the start comment) or
    ``routing.budgets``', plus every raise since; None where neither sets one."""
    budgets = config.core.routing.budgets
    base: dict[str, float | None] = {"tokens": budgets.tokens, "cost": budgets.cost, "wall": budgets.wall_minutes}
    base.update(_section(config, ref, "set"))
    extra = raised(config, ref)
    return {m: (None if base[m] is None else float(base[m]) + extra.get(m, 0.0)) for m in MEASURES}  # type: ignore[arg-type]


def _record(
    config: LoadedConfig, ref: WorkItemRef, key: str, measure: str, amount: float, *, actor: str, source: str
) -> None:
    """One person's decision in the portable ``budget`` section: ``set`` replaces the measure's limit, ``raised``
    adds to it; each is also kept in ``raises`` (how much, who, when, from where; the newest twenty)."""
    from the_loop.state.registry import now_iso

    def change(section: Any) -> Any:
        current = dict(section) if isinstance(section, dict) else {}
        values = dict(current.get(key) or {})
        values[measure] = round(amount + (float(values.get(measure) or 0) if key == "raised" else 0), 6)
        entry = {"measure": measure, "amount": amount, "by": actor, "source": source, "at": now_iso(), "kind": key}
        return {**current, key: values, "raises": [*(current.get("raises") or []), entry][-RAISES_KEPT:]}

    config.store.update_section(ref, "budget", change)


def set_at_start(config: LoadedConfig, ref: WorkItemRef, text: str, *, actor: str, source: str) -> str:
    """``the-loop start budget=10usd`` (or ``budget=200000tokens``, ``budget=90min``): the item's own limit of that
    measure in place of ``routing.budgets``'. "" when set, else what was wrong with it."""

    parsed = parse_amount(text, config.core.routing.budgets.currency)
    if isinstance(parsed, str):
        return parsed
    measure, amount = parsed
    _record(config, ref, "set", measure, amount, actor=actor, source=source)
    events.emit("budget.set", work_item=str(ref), measure=measure, limit=amount, actor=actor or None, source=source)
    return ""


def started_at(record: SessionRecord) -> float | None:
    """When the item's first session started (its oldest endpoint's ``createdAt``), in epoch seconds."""
    stamps = [when for e in record.sessions.values() if (when := events.parse_instant(e.created_at)) is not None]
    return min(stamps, default=None)


def statuses(config: LoadedConfig, record: SessionRecord, now: float | None = None) -> list[Status]:
    usage = usage_of(record)
    started = started_at(record)
    wall = ((now or time.time()) - started) / 60 if started else 0.0
    spent = {"tokens": float(usage.get("tokens") or 0), "cost": float(usage.get("cost") or 0), "wall": wall}
    return [Status(m, spent[m], limit) for m, limit in limits(config, record.work_item).items()]


def describe(config: LoadedConfig, record: SessionRecord | None) -> str:
    """One line of spend for ``sessions list`` and ``check``: ``12.3k/50k tokens, 0.42/5.00 usd, 31/480 min``
    (a measure without a limit shows what was spent); "" when nothing was counted and nothing is limited."""
    if record is None:
        return ""
    currency = config.core.routing.budgets.currency
    parts = []
    for status in statuses(config, record):
        if status.limit is None and (status.measure == "wall" or not status.spent):
            continue
        shown = {
            "tokens": lambda v: f"{_short(v)}",
            "cost": lambda v: f"{v:.2f}",
            "wall": lambda v: f"{v:.0f}",
        }[status.measure]
        unit = {"tokens": "tokens", "cost": currency, "wall": "min"}[status.measure]
        limit = f"/{shown(status.limit)}" if status.limit is not None else ""
        parts.append(f"{shown(status.spent)}{limit} {unit}")
    return ", ".join(parts)


def _short(value: float) -> str:
    for size, suffix in ((1e6, "M"), (1e3, "k")):
        if value >= size:
            return f"{value / size:.1f}".removesuffix(".0") + suffix
    return f"{value:.0f}"


# ---------------------------------------------------------------------------------------------- accounting


def price_of(config: LoadedConfig, model: str) -> Any:
    """The declared price of ``model``: the longest declared name it starts with, else ``default``, else None."""
    prices = config.core.routing.budgets.prices
    matches = [name for name in prices if name != "default" and model.startswith(name)]
    if matches:
        return prices[max(matches, key=len)]
    return prices.get("default")


def cost_of(config: LoadedConfig, usage: Usage) -> float | None:
    price = price_of(config, usage.model)
    if price is None:
        return None
    return (
        usage.input_tokens * price.input
        + usage.output_tokens * price.output
        + usage.cache_read_tokens * price.cache_read
        + usage.cache_write_tokens * price.cache_write
    ) / 1e6


def account(config: LoadedConfig, adapter: HarnessAdapter, ref: str, endpoint_ref: str, endpoint: Endpoint) -> bool:
    """Add what ``endpoint``'s conversation spent since its cursor to the item's ``usage``; whether anything did.
    A new conversation (a fresh respawn) starts its own cursor."""
    if not adapter.capabilities.reports_usage or not endpoint.harness_session_id or not endpoint.cwd:
        return False
    record = config.registry.load(ref)
    kept = usage_of(record).get("cursors", {}).get(endpoint_ref) or {}
    cursor = kept.get("cursor", "") if kept.get("session") == endpoint.harness_session_id else ""
    read = adapter.read_usage(endpoint.harness_session_id, Path(endpoint.cwd), cursor)
    if read is None or (read.cursor == cursor and not read.usage):
        return False
    unpriced: set[str] = set()

    def add(record: SessionRecord) -> None:
        usage = dict(usage_of(record))
        for spent in read.usage:
            for key, value in zip(
                KINDS,
                (spent.input_tokens, spent.output_tokens, spent.cache_read_tokens, spent.cache_write_tokens),
                strict=True,
            ):
                usage[key] = int(usage.get(key) or 0) + value
            usage["tokens"] = int(usage.get("tokens") or 0) + spent.tokens
            cost = cost_of(config, spent)
            if cost is None:
                unpriced.add(spent.model or "unnamed")
            else:
                usage["cost"] = round(float(usage.get("cost") or 0) + cost, 6)
        known = set(usage.get("unpriced") or [])
        usage["unpriced"] = sorted(known | unpriced) or None
        usage["cursors"] = {
            **(usage.get("cursors") or {}),
            endpoint_ref: {"session": endpoint.harness_session_id, "cursor": read.cursor},
        }
        usage = {k: v for k, v in usage.items() if v is not None}
        record.extra["usage"] = usage
        unpriced.difference_update(known)  # report each model once

    config.registry.update(ref, add)
    if unpriced and config.core.routing.budgets.cost is not None:
        events.emit("budget.unpriced", level="warning", work_item=ref, models=sorted(unpriced))
    return bool(read.usage)


# ---------------------------------------------------------------------------------------------- enforcing


def enforce(config: LoadedConfig, ref: WorkItemRef) -> str:
    """Warn and pause as the item's spend says; what was done ("warned", "paused" or ""). Called under the
    item's dispatch lock, so a pause never races a delivery."""
    record = config.registry.load(str(ref))
    own = record.own if record else None
    if record is None or own is None or not enabled(config):
        return ""
    usage = usage_of(record)
    warned: dict[str, float] = dict(usage.get("warned") or {})
    done = ""
    threshold = config.core.routing.budgets.warn_at_percent / 100
    over = [s for s in statuses(config, record) if s.limit is not None and s.ratio >= 1]
    for status in statuses(config, record):
        if status.limit is None or status.ratio < threshold or warned.get(status.measure) == status.limit:
            continue
        warned[status.measure] = status.limit
        if status.ratio < 1:
            _warn(config, ref, status)
            done = "warned"
    if over and own.status == "active" and usage.get("exhausted") is None:
        _pause(config, ref, over[0])
        usage["exhausted"] = over[0].measure
        done = "paused"
    if warned != usage.get("warned") or done == "paused":

        def change(record: SessionRecord) -> None:
            current = dict(usage_of(record))
            current["warned"] = warned
            if done == "paused":
                current["exhausted"] = over[0].measure
            record.extra["usage"] = current

        config.registry.update(str(ref), change)
    return done


def _amount(config: LoadedConfig, status: Status, value: float | None = None) -> str:
    value = status.spent if value is None else value
    if status.measure == "tokens":
        return f"{_short(value)} tokens"
    if status.measure == "cost":
        return f"{value:.2f} {config.core.routing.budgets.currency}"
    return f"{value:.0f} minutes"


def _warn(config: LoadedConfig, ref: WorkItemRef, status: Status) -> None:
    events.emit(
        "budget.warning",
        work_item=str(ref),
        measure=status.measure,
        spent=round(status.spent, 4),
        limit=status.limit,
        percent=round(status.ratio * 100),
    )
    text = (
        f"the-loop: this work item has spent {_amount(config, status)} of its budget of "
        f"{_amount(config, status, status.limit)} ({status.ratio:.0%}). At 100 % its session is paused."
    )
    tell(config, ref, "budget.warning", text)


def _pause(config: LoadedConfig, ref: WorkItemRef, status: Status) -> None:
    from the_loop.control import set_session_status

    set_session_status(config, ref, "paused")
    events.emit(
        "budget.exhausted",
        work_item=str(ref),
        measure=status.measure,
        spent=round(status.spent, 4),
        limit=status.limit,
    )
    unit = {"tokens": "200000tokens", "cost": f"5{config.core.routing.budgets.currency}", "wall": "60min"}
    text = (
        f"the-loop paused this work item's session: it has spent {_amount(config, status)}, its budget of "
        f"{_amount(config, status, status.limit)}. The conversation is kept. To go on, an authorized person "
        f"raises the budget with a comment such as `the-loop budget +{unit[status.measure]}`; the session then "
        "resumes where it stopped."
    )
    tell(config, ref, "budget.exhausted", text)


# ------------------------------------------------------------------------------------------------- raising


def parse_amount(text: str, currency: str) -> tuple[str, float] | str:
    """``+5usd`` → ("cost", 5.0); ``+50k tokens`` → ("tokens", 50000.0); ``+2h`` → ("wall", 120.0). A string
    saying what is wrong when it is none of them."""
    match = _AMOUNT.match(" ".join(text.split()))
    if match is None:
        return f"{text!r} is not an amount: write +5{currency}, +200000tokens or +30min"
    number, scale, unit = float(match[1]), (match[2] or "").lower(), match[3].lower()
    if unit in _HOURS:
        return ("wall", number * 60) if not scale else f"{text!r}: hours take no k or m"
    measure = "cost" if unit == currency else _UNITS.get(unit)
    if measure is None:
        return f"{text!r}: the unit must be {currency} (routing.budgets.currency), tokens, min or h"
    if scale and measure != "tokens":
        return f"{text!r}: only tokens take k or m"
    if number <= 0:
        return f"{text!r}: a raise must be more than zero"
    return measure, number * {"": 1, "k": 1e3, "m": 1e6}[scale]


@dataclass(frozen=True)
class Raised:
    ok: bool
    effect: str  # raised | resumed | rejected
    message: str


def raise_budget(config: LoadedConfig, ref: WorkItemRef, text: str, *, actor: str, source: str) -> Raised:
    """Add ``text`` (``+5usd``) to the item's budget; resume its session when that brings every measure under
    its limit again. Called under the item's dispatch lock."""
    from the_loop.control import set_session_status

    parsed = parse_amount(text, config.core.routing.budgets.currency)
    if isinstance(parsed, str):
        return Raised(False, "rejected", parsed)
    measure, amount = parsed
    if limits(config, ref)[measure] is None:
        return Raised(False, "rejected", f"{ref} has no {measure} budget to raise (routing.budgets)")

    _record(config, ref, "raised", measure, amount, actor=actor, source=source)
    record = config.registry.load(str(ref))
    own = record.own if record else None
    usage = usage_of(record)
    still_over = [s for s in statuses(config, record) if s.limit is not None and s.ratio >= 1] if record else []
    resumed = False
    if record is not None and usage.get("exhausted") and not still_over:

        def clear(record: SessionRecord) -> None:
            current = dict(usage_of(record))
            current.pop("exhausted", None)
            record.extra["usage"] = current

        config.registry.update(str(ref), clear)
        resumed = own is not None and own.status == "paused" and set_session_status(config, ref, "active")
    limit = limits(config, ref)[measure]
    events.emit(
        "budget.raised",
        work_item=str(ref),
        measure=measure,
        amount=amount,
        limit=limit,
        actor=actor or None,
        source=source,
        resumed=resumed,
    )
    status = Status(measure, 0, limit)
    message = f"raised {ref}'s {measure} budget to {_amount(config, status, limit)}"
    if resumed:
        message += "; its session resumed"
    elif still_over:
        message += f"; still over its {still_over[0].measure} budget, so it stays paused"
    return Raised(True, "resumed" if resumed else "raised", message)
