"""Numbers as the report states them, and the check that every number ``report.md`` states
is a number of ``report.json``."""

from __future__ import annotations

import math
import re
from typing import Any, Protocol

import numpy as np


class MeanHalf(Protocol):
    """An interval as the report prints it: a mean and the half-width around it."""

    @property
    def mean(self) -> float | None: ...

    @property
    def half(self) -> float | None: ...


def clean_json(value: Any) -> Any:
    """``value`` with NaN and infinities as null, numpy scalars as Python, tuples as lists."""
    if isinstance(value, dict):
        return {str(k): clean_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_json(v) for v in value]
    if isinstance(value, (np.floating, float)):
        f = float(value)
        return f if math.isfinite(f) else None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


def fmt(x: float | None, digits: int | None = None, sign: bool = False) -> str:
    """A number as the report prints it: 3 significant digits below 100, whole numbers with
    thousands separators above; ``digits`` fixes the decimals; ``-`` for a missing value."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    if digits is None:
        a = abs(x)
        digits = 0 if a >= 100 else 1 if a >= 10 else 2 if a >= 1 else 3
    text = f"{x:,.{digits}f}"
    if sign and x > 0:
        text = "+" + text
    return text


MIN_INTERVAL_N = 3
"""The fewest values (seeds, traces) an interval is shown over; below it, the mean alone."""


def has_interval(n: int | None) -> bool:
    """Whether an interval over ``n`` values is shown (None: the caller knows it is)."""
    return n is None or n >= MIN_INTERVAL_N


def fmt_ci(ci: MeanHalf | None, digits: int | None = None, n: int | None = None) -> str:
    """``mean ± half`` (just the mean when there is no interval, or when it rests on ``n`` <
    ``MIN_INTERVAL_N`` values); ``-`` for none."""
    if ci is None:
        return "-"
    half = ci.half
    if half is None or not math.isfinite(half) or not has_interval(n):
        return fmt(ci.mean, digits)
    return f"{fmt(ci.mean, digits)} ± {fmt(half, digits)}"


def pct(x: float | None) -> str:
    """A signed percentage, ``-`` for none."""
    return "-" if x is None else f"{fmt(x, 1, sign=True)} %"


def pct_change(new: float, old: float) -> float | None:
    """``100 * (new - old) / old``; None where ``old`` is 0."""
    return 100.0 * (new - old) / old if old else None


_NUMBER = re.compile(r"(?<![A-Za-z_\d.])([+-]?)(\d[\d,]*(?:\.\d+)?)")


def numbers_in_markdown(text: str) -> list[str]:
    """Numeric tokens of a markdown text outside code spans, code blocks and link targets;
    a token glued to a word before it (``p99``, ``t00``, ``Q1``) is part of a name."""
    text = re.sub(r"```.*?```", " ", text, flags=re.DOTALL)
    text = re.sub(r"`[^`]*`", " ", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    return [sign + digits for sign, digits in _NUMBER.findall(text)]


def json_numbers(value: Any) -> list[float]:
    """Every number of a JSON value (booleans excluded), recursively."""
    out: list[float] = []
    if isinstance(value, dict):
        for v in value.values():
            out.extend(json_numbers(v))
    elif isinstance(value, list):
        for v in value:
            out.extend(json_numbers(v))
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        out.append(float(value))
    return out


def unmatched_numbers(markdown: str, report: Any) -> list[str]:
    """The numeric tokens of ``markdown`` that no number of ``report`` (its JSON) rounds to,
    at the token's own precision and with its sign (``6,286`` matches 6285.7; ``0.872``
    matches 0.8724; ``-12`` does not match 12)."""
    values = np.asarray(sorted(set(json_numbers(report))), dtype=np.float64)
    missing = []
    for token in numbers_in_markdown(markdown):
        plain = token.replace(",", "")
        decimals = len(plain.split(".")[1]) if "." in plain else 0
        x = float(plain)
        tol = 0.5 * 10.0 ** (-decimals) + 1e-9
        if not np.any(np.abs(values - x) <= tol * (1 + 1e-9)):
            missing.append(token)
    return missing
