"""Traces: the Parquet file of tasks every simulation and model starts from (DESIGN.md, Files).

A trace has one row per task. Required columns: ``task_id`` (str, unique), ``tenant`` (str),
``task_type`` (str), ``submit_s`` (f64, >= 0), ``duration_s`` (f64, > 0). Optional columns
(``doc_bytes``, ``pages``, ``mem_mb``, ``predicted_s``, anything else) are carried along.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from desched.errors import DeschedError

REQUIRED: dict[str, pl.DataType] = {
    "task_id": pl.String(),
    "tenant": pl.String(),
    "task_type": pl.String(),
    "submit_s": pl.Float64(),
    "duration_s": pl.Float64(),
}
OPTIONAL: dict[str, pl.DataType] = {
    "doc_bytes": pl.Int64(),
    "pages": pl.Int32(),
    "mem_mb": pl.Float64(),
    "predicted_s": pl.Float64(),
}
QUANTILE_COLUMNS: tuple[str, ...] = ("predicted_p50_s", "predicted_p90_s")
"""Optional quantile predictions (``desched.bench.judge_cases``): NaN where absent."""
MAX_SECONDS = 1e12
"""The largest submit time and duration a trace may hold (31,700 years): past it the float
sums of the metrics lose the seconds (a response of 0) or leave the float range."""
MIN_PREDICTION_S = 1e-6
"""The floor of a predicted duration written into a trace (a model can extrapolate below 0)."""
_SHOW_ROWS = 5


def _first_rows(mask: pl.Series) -> str:
    rows = mask.arg_true().head(_SHOW_ROWS).to_list()
    more = "" if mask.sum() <= _SHOW_ROWS else ", ..."
    return ", ".join(str(r) for r in rows) + more


def all_distinct(column: pl.Series) -> bool:
    """Whether no value of ``column`` repeats. Distinct 64-bit hashes prove it (equal values
    hash alike) at a fraction of the cost of counting distinct strings; only a repeated hash,
    a duplicate or a collision, is settled by counting the values themselves. Counting is
    cheaper than marking duplicates: a caller marks them only to name them."""
    if column.hash().n_unique() == column.len():
        return True
    return column.n_unique() == column.len()


def group_means(frame: pl.DataFrame, keys: list[str], column: str,
                alias: str = "mean") -> pl.DataFrame:
    """One row per distinct ``keys`` (in order of first appearance) with the mean of
    ``column`` as ``alias``, each group's values summed in ``frame``'s row order: the same
    bits on every run, where polars' parallel group-by adds a group's partial sums in an order
    that varies (a demo report once differed in the last digit between two runs)."""
    import numpy as np

    rows = frame.select(*keys).with_row_index("_row")
    groups = (rows.group_by(keys).agg(pl.col("_row").min().alias("_first"))
              .sort("_first").drop("_first").with_row_index("_code"))
    code = rows.join(groups, on=keys, how="left", maintain_order="left",
                     nulls_equal=True)["_code"].to_numpy()  # a null key is a group too
    values = frame[column].cast(pl.Float64).to_numpy()
    total = np.bincount(code, weights=values, minlength=groups.height)
    count = np.bincount(code, minlength=groups.height)
    return groups.drop("_code").with_columns(pl.Series(alias, total / count))


def validate_trace(frame: pl.DataFrame, source: str = "trace") -> pl.DataFrame:
    """Return ``frame`` with the schema's types, or raise naming the column and first bad rows.

    Refuses a missing required column, a value that does not cast to its type (a Boolean or a
    date, time or duration where a number is due), a null in a required column (or in
    ``predicted_s`` when present), an empty or blank ``task_id`` or ``tenant``, a duplicate
    ``task_id``, a negative
    or non-finite ``submit_s``, a non-positive or non-finite ``duration_s`` or ``predicted_s``,
    a ``submit_s`` or ``duration_s`` above ``MAX_SECONDS``,
    a quantile prediction (``QUANTILE_COLUMNS``) that is neither absent (NaN or null) nor
    finite and positive, and a ``priority`` (optional) that is not an integer.
    Rows are numbered from 0 in file order.
    """
    missing = [c for c in REQUIRED if c not in frame.columns]
    if missing:
        raise DeschedError(
            f"{source}: missing required column {missing[0]!r} "
            f"(required: {', '.join(REQUIRED)})"
        )
    optional = {**OPTIONAL, **dict.fromkeys(QUANTILE_COLUMNS, pl.Float64())}
    casts = {**REQUIRED, **{c: t for c, t in optional.items() if c in frame.columns}}
    for column, dtype in casts.items():
        if frame.schema[column] == dtype:
            continue
        given = frame.schema[column]
        if dtype.is_numeric() and (given == pl.Boolean or given.is_temporal()):
            # a cast would succeed and mean nothing: True as 1 s, a datetime as microseconds
            raise DeschedError(
                f"{source}: column {column!r} has type {given}; give it as a number"
                + (" of seconds (epoch seconds for a date)" if column == "submit_s" else
                   " of seconds" if column.endswith("_s") else "")
            )
        try:
            frame = frame.with_columns(pl.col(column).cast(dtype, strict=True))
        except (pl.exceptions.PolarsError, ValueError, TypeError) as exc:
            raise DeschedError(
                f"{source}: column {column!r} has type {frame.schema[column]} "
                f"that does not cast to {dtype}: {str(exc).splitlines()[0]}"
            ) from None
    nullable_checked = [c for c in [*REQUIRED, "predicted_s"] if c in frame.columns]
    for column in nullable_checked:
        nulls = frame[column].is_null()
        if nulls.any():
            raise DeschedError(
                f"{source}: column {column!r} has {nulls.sum()} null(s), first at row(s) "
                f"{_first_rows(nulls)}"
            )
    for column in ("task_id", "tenant"):
        blank = frame[column].str.contains(r"^\s*$")
        if blank.any():
            raise DeschedError(
                f"{source}: column {column!r} has {blank.sum()} empty or blank value(s), "
                f"first at row(s) {_first_rows(blank)}"
            )
    duplicated = (frame["task_id"].is_duplicated()
                  if not all_distinct(frame["task_id"]) else None)
    if duplicated is not None:
        first = frame["task_id"].filter(duplicated)[0]
        raise DeschedError(
            f"{source}: column 'task_id' has duplicate ids (e.g. {first!r}) at row(s) "
            f"{_first_rows(duplicated)}"
        )
    submit, duration = frame["submit_s"], frame["duration_s"]
    checks = [
        ("submit_s", ~(submit.is_finite() & (submit >= 0) & (submit <= MAX_SECONDS)),
         f">= 0 and <= {MAX_SECONDS:g}"),
        ("duration_s", ~(duration.is_finite() & (duration > 0) & (duration <= MAX_SECONDS)),
         f"> 0 and <= {MAX_SECONDS:g}"),
    ]
    if "predicted_s" in frame.columns:
        p = frame["predicted_s"]
        checks.append(("predicted_s", ~(p.is_finite() & (p > 0)), "> 0"))
    for column in QUANTILE_COLUMNS:  # NaN or null: absent for that task
        if column in frame.columns:
            q = frame[column]
            checks.append((column, (q.is_not_null() & ~q.is_nan()
                                    & ~(q.is_finite() & (q > 0))).fill_null(False),
                           "> 0 (or NaN where absent)"))
    if "priority" in frame.columns:  # optional, any integer type; higher runs first
        priority = frame["priority"]
        if priority.dtype.is_integer():
            bad_priority = priority.is_null()
        elif priority.dtype.is_float():
            bad_priority = (~priority.is_finite() | (priority != priority.floor())).fill_null(True)
        else:
            bad_priority = priority.cast(pl.Int64, strict=False).is_null()
        if bad_priority.any():
            raise DeschedError(
                f"{source}: column 'priority' must hold integers; {bad_priority.sum()} row(s) "
                f"do not, first at row(s) {_first_rows(bad_priority)}"
            )
    for column, bad, rule in checks:
        if bad.any():
            raise DeschedError(
                f"{source}: column {column!r} must be finite and {rule}; "
                f"{bad.sum()} row(s) are not, first at row(s) {_first_rows(bad)}"
            )
    return frame


def read_trace(path: str | Path, replacing: tuple[str, ...] = ()) -> pl.DataFrame:
    """Read and validate a trace Parquet file; errors name the file. A trace without a task
    is refused: nothing can be simulated, trained or predicted on it. ``replacing``: columns
    the caller is about to write anew (``desched predict``'s predictions), dropped unread, so
    that bad values in them do not stop the command that replaces them."""
    path = Path(path)
    if not path.exists():
        raise DeschedError(f"{path}: no such trace file")
    if path.is_dir():
        raise DeschedError(f"{path}: a folder, not a trace file")
    try:
        frame = pl.read_parquet(path)
    except pl.exceptions.DuplicateError as exc:  # a valid file, which polars cannot hold
        raise DeschedError(f"{path}: {str(exc).splitlines()[0]}; each column needs its own "
                           "name") from None
    except (pl.exceptions.PolarsError, OSError, ValueError) as exc:
        raise DeschedError(f"{path}: not a readable Parquet file ({type(exc).__name__})") from None
    frame = validate_trace(frame.drop(replacing, strict=False), str(path))
    if frame.height == 0:
        raise DeschedError(f"{path}: no tasks (0 rows); a trace needs at least one")
    return frame


def write_trace(frame: pl.DataFrame, path: str | Path) -> Path:
    """Validate and write a trace; returns the path written."""
    path = Path(path)
    frame = validate_trace(frame, str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.write_parquet(path)
    return path


class DurationWithheld(DeschedError):
    """A policy that does not declare itself clairvoyant read ``duration_s``."""


class WithheldDurations(list[float]):
    """The ``duration_s`` of a policy's view (``TaskTable.without_durations``): reading any
    entry raises ``DurationWithheld``; appending is a no-op (the live table holds the real
    column)."""

    def __getitem__(self, index: object) -> Any:
        raise DurationWithheld(
            "duration_s is withheld from a policy that does not declare itself clairvoyant "
            "(reads without 'duration_s'); rank on predicted_s and its quantiles"
        )

    def __iter__(self) -> Iterator[float]:
        self[0]
        return iter(())

    def append(self, value: float) -> None:
        return None

    def __deepcopy__(self, memo: dict[int, Any]) -> WithheldDurations:
        return WithheldDurations()

    def __copy__(self) -> WithheldDurations:
        return WithheldDurations()

    def __reduce__(self) -> tuple[type[WithheldDurations], tuple[()]]:
        return WithheldDurations, ()


@dataclass(slots=True)
class TaskTable:
    """The columns a policy may read, as Python lists indexed by task position.

    A task's position is its row in the trace (the simulator) or its submission sequence (the
    live service); it is the last tie-break of every ranking. ``tenant`` holds dense tenant
    codes ``0..len(tenant_names)-1``. ``predicted_s`` is NaN where no prediction exists, and so
    are ``predicted_p50_s`` and ``predicted_p90_s`` (quantile predictions) where the trace has
    none. ``duration_s`` is the true service time: only clairvoyant policies read it, and a
    policy that is not gets ``without_durations()``, a view whose ``duration_s`` raises.
    """

    task_id: list[str]
    tenant: list[int]
    tenant_names: list[str]
    submit_s: list[float]
    duration_s: list[float]
    predicted_s: list[float]
    tenant_index: dict[str, int] = field(default_factory=dict)
    tenant_weight: dict[int, float] = field(default_factory=dict)
    """Tenant weights (``desched.controls``) by code; a tenant not here has weight 1."""
    predicted_p50_s: list[float] = field(default_factory=list)
    predicted_p90_s: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.tenant_index:
            self.tenant_index = {name: k for k, name in enumerate(self.tenant_names)}
        n = len(self.task_id)
        for column in (self.predicted_p50_s, self.predicted_p90_s):
            if len(column) < n:
                column.extend([math.nan] * (n - len(column)))

    def without_durations(self) -> TaskTable:
        """A view for a policy that is not clairvoyant: every column is this table's own list
        (so tasks appended here appear there), except ``duration_s``, which raises on any
        read (``WithheldDurations``). The view of a view is itself."""
        if isinstance(self.duration_s, WithheldDurations):
            return self
        return TaskTable(
            task_id=self.task_id,
            tenant=self.tenant,
            tenant_names=self.tenant_names,
            submit_s=self.submit_s,
            duration_s=WithheldDurations(),
            predicted_s=self.predicted_s,
            tenant_index=self.tenant_index,
            tenant_weight=self.tenant_weight,
            predicted_p50_s=self.predicted_p50_s,
            predicted_p90_s=self.predicted_p90_s,
        )

    def __len__(self) -> int:
        return len(self.task_id)

    @property
    def has_predictions(self) -> bool:
        # A NaN makes the sum NaN; a NaN sum without one (+inf and -inf) takes the long way.
        if not math.isnan(sum(self.predicted_s)):
            return True
        return not any(math.isnan(p) for p in self.predicted_s)

    def copy(self) -> TaskTable:
        """A table of its own with the same entries: every column and mapping copied, so a
        run that appends to or edits it leaves this one as it was."""
        return TaskTable(
            task_id=list(self.task_id),
            tenant=list(self.tenant),
            tenant_names=list(self.tenant_names),
            submit_s=list(self.submit_s),
            duration_s=copy.copy(self.duration_s),
            predicted_s=list(self.predicted_s),
            tenant_index=dict(self.tenant_index),
            tenant_weight=dict(self.tenant_weight),
            predicted_p50_s=list(self.predicted_p50_s),
            predicted_p90_s=list(self.predicted_p90_s),
        )

    @classmethod
    def empty(cls) -> TaskTable:
        return cls([], [], [], [], [], [])

    @classmethod
    def from_frame(cls, frame: pl.DataFrame) -> TaskTable:
        """Build from a validated trace; tenant codes follow first appearance in the trace."""
        names = frame["tenant"].unique(maintain_order=True).to_list()
        code = {name: k for k, name in enumerate(names)}
        tenants = [code[t] for t in frame["tenant"].to_list()]
        n = frame.height
        predicted = (
            frame["predicted_s"].to_list() if "predicted_s" in frame.columns else [math.nan] * n
        )
        quantiles = [
            frame[c].cast(pl.Float64).fill_null(math.nan).to_list() if c in frame.columns
            else [math.nan] * n
            for c in QUANTILE_COLUMNS
        ]
        return cls(
            task_id=frame["task_id"].to_list(),
            tenant=tenants,
            tenant_names=names,
            submit_s=frame["submit_s"].to_list(),
            duration_s=frame["duration_s"].to_list(),
            predicted_s=predicted,
            tenant_index=code,
            predicted_p50_s=quantiles[0],
            predicted_p90_s=quantiles[1],
        )

    def charge(self, k: int, service_s: float) -> float:
        """``service_s`` as tenant ``k``'s counters count it: divided by its weight (weight 1,
        the default, divides by nothing, so unweighted runs keep their exact bits)."""
        w = self.tenant_weight.get(k)
        return service_s if w is None else service_s / w

    def tenant_code(self, name: str) -> int:
        """The code of ``name``, adding the tenant if it is new (live service)."""
        code = self.tenant_index.get(name)
        if code is None:
            code = self.tenant_index[name] = len(self.tenant_names)
            self.tenant_names.append(name)
        return code

    def append(
        self,
        task_id: str,
        tenant: str,
        submit_s: float,
        duration_s: float = math.nan,
        predicted_s: float = math.nan,
        predicted_p50_s: float = math.nan,
        predicted_p90_s: float = math.nan,
    ) -> int:
        """Add one task (live service) and return its position."""
        self.task_id.append(task_id)
        self.tenant.append(self.tenant_code(tenant))
        self.submit_s.append(submit_s)
        self.duration_s.append(duration_s)
        self.predicted_s.append(predicted_s)
        self.predicted_p50_s.append(predicted_p50_s)
        self.predicted_p90_s.append(predicted_p90_s)
        return len(self.task_id) - 1
