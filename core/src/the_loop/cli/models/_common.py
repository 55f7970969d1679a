"""What ``models list`` and ``models check`` share: one text line per verdict."""

from __future__ import annotations


def age(seconds: float) -> str:
    """``42s``, ``7m``, ``5h``, ``3d``: how long ago a verdict was taken."""
    seconds = max(0.0, seconds)
    for unit, size, limit in (("s", 1, 90), ("m", 60, 90 * 60), ("h", 3600, 36 * 3600)):
        if seconds < limit:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds // 86400)}d"


def line(harness: str, kind: str, name: str, verdict: str, note: str, widths: tuple[int, int, int]) -> str:
    cells = (harness.ljust(widths[0]), kind.ljust(6), name.ljust(widths[1]), verdict.ljust(widths[2]), note)
    return "  ".join(cells).rstrip()


def widths(rows: list[tuple[str, str, str]]) -> tuple[int, int, int]:
    """Column widths for (harness, name, verdict) cells."""
    harness, name, verdict = (max((len(row[i]) for row in rows), default=1) for i in range(3))
    return harness, name, verdict
