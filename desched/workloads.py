"""Named synthetic workloads of the Document Enrichment Service, from a seeded generator.

``generate(name, ...)`` returns a valid trace (``desched.trace.validate_trace``) sorted by
``submit_s``, with ids ``s0000000, s0000001, ...`` in submit order, the required columns and
``doc_bytes``, ``pages``, ``mem_mb`` (plus ``predicted_s`` when asked for). It is a pure
function of its arguments: the same arguments give the identical frame.

The document model is shared by all scenarios:

- every tenant has its own mix of task types (``ocr_clean``, ``extract``, ``classify``,
  ``embed``), its own log-normal ``doc_bytes`` (about a quarter of tenants send big scans:
  many more bytes per page) and its own complexity factor;
- ``pages`` follows from ``doc_bytes`` and the tenant's bytes per page (at least 1; sizes are
  capped at 1 GiB and 5,000 pages);
- ``duration_s = tenant_factor * (base + per_page * pages + per_mb * doc_mb) * LogNormal(0, 0.3)``
  with ``base``, ``per_page``, ``per_mb`` set by the task type (see ``TASK_TYPES``), so a model
  can learn the duration from (tenant, task_type, doc_bytes, pages) but not exactly;
- ``mem_mb`` follows from the task type and the document's size, with 10 % noise.

Offered load. Arrival rate is ``tasks / (last submit_s - first submit_s)`` and the offered load
against ``workers`` workers is ``arrival rate * mean(duration_s) / workers``. The generator
draws the durations first, then sets the horizon to ``tasks * mean(duration_s) /
(load * workers)`` so that the offered load over the whole trace is ``load`` up to the
sampling noise of the arrival process (relative sd about ``1 / sqrt(tasks)``). A burst
(``flood``) or a daily cycle (``diurnal``) moves load around inside the horizon, not in total.
``offered_load(frame, workers)`` measures it on any trace.

Tenants are ``t00, t01, ...`` (wider codes past 100 tenants) in decreasing Zipf share, plus
``flood`` in that scenario; every tenant submits at least one task.

Random streams. The seed feeds one ``numpy.random.SeedSequence`` whose children drive the
tenant profiles, the documents, the durations, the arrivals and the predictions separately,
so that asking for ``predicted_s`` leaves every other column unchanged, and ``steady`` and
``diurnal`` with the same seed hold the very same documents, only submitted at other times.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import polars as pl

from desched.errors import DeschedError
from desched.trace import validate_trace

TASK_TYPE_NAMES: tuple[str, ...] = ("ocr_clean", "extract", "classify", "embed")


@dataclass(frozen=True, slots=True)
class TaskTypeCost:
    """Cost model of one task type: seconds and MB as a function of the document's size.

    ``duration_s = base_s + per_page_s * pages + per_mb_s * doc_mb`` before the tenant factor
    and the log-normal noise; ``mem_mb = mem_base_mb + mem_per_page_mb * pages +
    mem_per_mb * doc_mb`` before a 10 % noise.
    """

    base_s: float
    per_page_s: float
    per_mb_s: float
    mem_base_mb: float
    mem_per_page_mb: float
    mem_per_mb: float


TASK_TYPES: dict[str, TaskTypeCost] = {
    "ocr_clean": TaskTypeCost(5.0, 5.0, 1.5, 500.0, 40.0, 3.0),
    "extract": TaskTypeCost(3.0, 1.5, 0.3, 700.0, 8.0, 1.0),
    "classify": TaskTypeCost(1.0, 0.3, 0.1, 450.0, 2.0, 0.5),
    "embed": TaskTypeCost(1.5, 0.8, 0.0, 1400.0, 4.0, 0.2),
}
"""Per-type costs: OCR of scans is the slow, memory-hungry one; embedding pays for its model."""

DURATION_SIGMA = 0.3
"""Log-normal sigma of the duration noise a model cannot explain."""

_BASE_MIX = np.array([0.30, 0.35, 0.20, 0.15])
_MIX_CONCENTRATION = 3.0
_SCAN_SHARE = 0.25
_MAX_PAGES = 5_000
_MAX_BYTES = 1024**3
_DAY_S = 86_400.0
_TIME_ZONES_H = (-8.0, -5.0, 0.0, 1.0, 5.5, 8.0, 9.0)
_DIURNAL_AMPLITUDE = 0.8
_DIURNAL_PEAK_LOCAL_H = 14.0
_FLOOD_SHARE = 1.0 / 3.0
_FLOOD_BURST_S = 60.0
_FLOOD_START = (0.10, 0.20)
_TAIL_SHARE = 0.02
_TAIL_ALPHA = 1.2


@dataclass(frozen=True, slots=True)
class Request:
    """The validated arguments of ``generate``."""

    tasks: int
    tenants: int
    load: float
    workers: int


@dataclass(frozen=True, slots=True)
class Streams:
    """Independent random generators, one per part of the generation."""

    profiles: np.random.Generator
    documents: np.random.Generator
    durations: np.random.Generator
    arrivals: np.random.Generator
    predictions: np.random.Generator

    @classmethod
    def from_seed(cls, seed: int) -> Streams:
        children = np.random.SeedSequence(seed).spawn(5)
        return cls(*(np.random.default_rng(c) for c in children))


@dataclass(frozen=True, slots=True)
class TenantProfiles:
    """Per-tenant parameters, indexed by tenant code ``0..k-1``."""

    mix: np.ndarray
    bytes_median: np.ndarray
    bytes_sigma: np.ndarray
    bytes_per_page: np.ndarray
    factor: np.ndarray


@dataclass(frozen=True, slots=True)
class Generated:
    """One row per task in generation order (``generate`` sorts by submit time)."""

    tenant_names: list[str]
    tenant: np.ndarray
    task_type: np.ndarray
    doc_bytes: np.ndarray
    pages: np.ndarray
    duration_s: np.ndarray
    mem_mb: np.ndarray
    submit_s: np.ndarray


Build = Callable[[Request, Streams], Generated]
"""A scenario's builder: a pure function of the request and the random streams."""


@dataclass(frozen=True, slots=True)
class Scenario:
    """A named workload: a one-line description, its tenant counts and its builder."""

    name: str
    description: str
    build: Build
    default_tenants: int = 20
    min_tenants: int = 1


def _tenant_names(k: int) -> list[str]:
    width = max(2, len(str(k - 1)))
    return [f"t{i:0{width}d}" for i in range(k)]


def _zipf_shares(k: int, exponent: float = 1.0) -> np.ndarray:
    weights = 1.0 / np.arange(1, k + 1, dtype=np.float64) ** exponent
    return np.asarray(weights / weights.sum())


def _profiles(k: int, rng: np.random.Generator) -> TenantProfiles:
    """Random per-tenant mixes, document sizes and complexity; a quarter send big scans."""
    mix = rng.dirichlet(_BASE_MIX * _MIX_CONCENTRATION * len(_BASE_MIX), size=k)
    scans = rng.random(k) < _SCAN_SHARE
    bytes_per_page = np.where(scans, 300_000.0, 60_000.0) * rng.lognormal(0.0, 0.3, k)
    pages_median = 5.0 * rng.lognormal(0.0, 0.5, k)
    return TenantProfiles(
        mix=mix,
        bytes_median=bytes_per_page * pages_median,
        bytes_sigma=rng.uniform(0.6, 1.0, k),
        bytes_per_page=bytes_per_page,
        factor=rng.lognormal(0.0, 0.2, k),
    )


def _assign_tenants(n: int, share: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Tenant code per task: every tenant at least once, the rest drawn by ``share``."""
    k = len(share)
    codes = np.concatenate([np.arange(k), rng.choice(k, size=n - k, p=share)])
    return np.asarray(rng.permutation(codes))


def _documents(
    tenant: np.ndarray,
    profiles: TenantProfiles,
    rng: np.random.Generator,
    tail_share: float = 0.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Task type codes, ``doc_bytes`` and ``pages`` for the tasks of ``tenant`` (codes).

    ``doc_bytes`` is log-normal per tenant; a ``tail_share`` of documents is multiplied by a
    Pareto(1.2) factor of at least 5 (the heavy tail). ``pages`` is ``doc_bytes`` over the
    tenant's bytes per page, with 25 % noise, at least 1.
    """
    n = len(tenant)
    cumulative = np.cumsum(profiles.mix, axis=1)[tenant]
    task_type = (rng.random(n)[:, None] > cumulative[:, :-1]).sum(axis=1)
    noise = rng.lognormal(0.0, 1.0, n) ** profiles.bytes_sigma[tenant]
    doc_bytes = profiles.bytes_median[tenant] * noise
    if tail_share > 0.0:
        tail = rng.random(n) < tail_share
        doc_bytes = np.where(tail, doc_bytes * 5.0 * (1.0 + rng.pareto(_TAIL_ALPHA, n)), doc_bytes)
    doc_bytes = np.clip(np.rint(doc_bytes), 1_000, _MAX_BYTES).astype(np.int64)
    pages_raw = doc_bytes / profiles.bytes_per_page[tenant] * rng.lognormal(0.0, 0.25, n)
    pages = np.clip(np.rint(pages_raw), 1, _MAX_PAGES).astype(np.int32)
    return task_type, doc_bytes, pages


def _costs(
    tenant: np.ndarray,
    task_type: np.ndarray,
    doc_bytes: np.ndarray,
    pages: np.ndarray,
    factor: np.ndarray,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """``duration_s`` and ``mem_mb`` from the type's cost model (module docstring)."""
    costs = [TASK_TYPES[name] for name in TASK_TYPE_NAMES]

    def column(attr: str) -> np.ndarray:
        return np.asarray(np.array([getattr(c, attr) for c in costs])[task_type])

    doc_mb = doc_bytes / 1e6
    pages_f = pages.astype(np.float64)
    n = len(tenant)
    work = column("base_s") + column("per_page_s") * pages_f + column("per_mb_s") * doc_mb
    duration = factor[tenant] * work * rng.lognormal(0.0, DURATION_SIGMA, n)
    memory = (
        column("mem_base_mb") + column("mem_per_page_mb") * pages_f + column("mem_per_mb") * doc_mb
    ) * rng.lognormal(0.0, 0.1, n)
    return duration, np.round(memory, 1)


def _horizon_s(duration_s: np.ndarray, req: Request) -> float:
    """The span over which ``len(duration_s)`` arrivals offer ``load`` to the workers."""
    return float(len(duration_s) * duration_s.mean() / (req.load * req.workers))


def _poisson_times(n: int, horizon_s: float, rng: np.random.Generator) -> np.ndarray:
    """``n`` Poisson arrivals at rate ``n / horizon_s``, from time 0."""
    return np.cumsum(rng.exponential(horizon_s / n, n))


def _population(
    req: Request, streams: Streams, share: np.ndarray, tail_share: float = 0.0
) -> tuple[TenantProfiles, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    profiles = _profiles(len(share), streams.profiles)
    tenant = _assign_tenants(req.tasks, share, streams.documents)
    task_type, doc_bytes, pages = _documents(tenant, profiles, streams.documents, tail_share)
    return profiles, tenant, task_type, doc_bytes, pages


def _zipf_tasks(req: Request, streams: Streams, tail_share: float = 0.0) -> Generated:
    """Zipf-shared tenants, their documents and costs; ``submit_s`` is left empty.

    Draws only from the profile, document and duration streams, so scenarios built on it
    hold the same documents for a seed and differ only in their arrivals.
    """
    profiles, tenant, task_type, doc_bytes, pages = _population(
        req, streams, _zipf_shares(req.tenants), tail_share
    )
    duration, memory = _costs(
        tenant, task_type, doc_bytes, pages, profiles.factor, streams.durations
    )
    return Generated(
        _tenant_names(req.tenants), tenant, task_type, doc_bytes, pages, duration, memory,
        np.empty(0),
    )


def _poisson_scenario(req: Request, streams: Streams, tail_share: float = 0.0) -> Generated:
    g = _zipf_tasks(req, streams, tail_share)
    submit = _poisson_times(req.tasks, _horizon_s(g.duration_s, req), streams.arrivals)
    return replace(g, submit_s=submit)


def _build_steady(req: Request, streams: Streams) -> Generated:
    """Poisson arrivals; tenant ``t{i}`` has a share proportional to ``1 / (i + 1)``."""
    return _poisson_scenario(req, streams)


def _build_heavy_tail(req: Request, streams: Streams) -> Generated:
    """As ``steady``, but 2 % of documents are 5x or more larger, Pareto(1.2)-distributed."""
    return _poisson_scenario(req, streams, tail_share=_TAIL_SHARE)


def _build_flood(req: Request, streams: Streams) -> Generated:
    """Tenant ``flood`` submits a third of all tasks within 60 s, at 10-20 % of the horizon.

    The other ``tenants - 1`` tenants (Zipf shares) submit Poisson arrivals over the whole
    horizon. ``flood`` sends ordinary documents (no scans, complexity factor 1), so its burst
    holds about a third of the work. The backlog it leaves drains before the horizon ends:
    under FIFO on 8 workers, by about 3/4 of it at load 0.85 and 0.85 of it at load 0.9.
    """
    names = ["flood", *_tenant_names(req.tenants - 1)]
    n_flood = round(req.tasks * _FLOOD_SHARE)
    n_flood = min(max(n_flood, 1), req.tasks - (req.tenants - 1))
    profiles = _profiles(len(names), streams.profiles)
    profiles.mix[0] = _BASE_MIX
    profiles.bytes_per_page[0] = 60_000.0
    profiles.bytes_median[0] = 60_000.0 * 5.0
    profiles.bytes_sigma[0] = 0.8
    profiles.factor[0] = 1.0
    small = _assign_tenants(req.tasks - n_flood, _zipf_shares(req.tenants - 1), streams.documents)
    tenant = np.concatenate([np.zeros(n_flood, dtype=small.dtype), small + 1])
    task_type, doc_bytes, pages = _documents(tenant, profiles, streams.documents)
    duration, memory = _costs(
        tenant, task_type, doc_bytes, pages, profiles.factor, streams.durations
    )
    horizon = _horizon_s(duration, req)
    rng = streams.arrivals
    start = horizon * rng.uniform(*_FLOOD_START)
    burst = start + np.sort(rng.uniform(0.0, _FLOOD_BURST_S, n_flood))
    steady = _poisson_times(req.tasks - n_flood, horizon, rng)
    submit = np.concatenate([burst, steady])
    return Generated(names, tenant, task_type, doc_bytes, pages, duration, memory, submit)


def _build_diurnal(req: Request, streams: Streams) -> Generated:
    """Each tenant's rate follows a 24 h sine peaking at 14:00 in its own time zone.

    Time 0 is midnight UTC; tenants are spread over seven time zones (UTC-8 to UTC+9); the
    rate swings by +-80 % around its mean. Arrivals are drawn by thinning uniform candidates
    over the horizon (the horizon spans about a day with the default arguments).
    """
    g = _zipf_tasks(req, streams)
    horizon = _horizon_s(g.duration_s, req)
    rng = streams.arrivals
    zone_h = np.asarray(_TIME_ZONES_H)[rng.integers(0, len(_TIME_ZONES_H), req.tenants)]
    phase_s = ((_DIURNAL_PEAK_LOCAL_H - zone_h[g.tenant]) * 3600.0) % _DAY_S
    submit = np.empty(req.tasks)
    pending = np.arange(req.tasks)
    while pending.size:
        candidate = rng.uniform(0.0, horizon, pending.size)
        rate = 1.0 + _DIURNAL_AMPLITUDE * np.cos(
            2 * math.pi * (candidate - phase_s[pending]) / _DAY_S
        )
        accept = rng.random(pending.size) * (1.0 + _DIURNAL_AMPLITUDE) < rate
        submit[pending[accept]] = candidate[accept]
        pending = pending[~accept]
    return replace(g, submit_s=submit)


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "steady",
            "Poisson arrivals, Zipf tenant shares, per-tenant document mixes",
            _build_steady,
        ),
        Scenario(
            "flood",
            "tenant 'flood' submits a third of all tasks within a minute, early on",
            _build_flood,
            min_tenants=2,
        ),
        Scenario(
            "diurnal",
            "24 h sinusoidal rate per tenant, tenants in seven time zones",
            _build_diurnal,
        ),
        Scenario(
            "heavy-tail",
            "as steady, plus 2% huge documents (Pareto page counts)",
            _build_heavy_tail,
        ),
        Scenario(
            "many-tenants",
            "as steady with 1,000 Zipf-shared tenants",
            _build_steady,
            default_tenants=1000,
        ),
    )
}
"""The registry: name -> scenario with its one-line ``description``."""


def _check_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise DeschedError(f"workload: {name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _check_float(name: str, value: object, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise DeschedError(f"workload: {name} must be a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        rule = "> 0" if positive else ">= 0"
        raise DeschedError(f"workload: {name} must be finite and {rule}, got {value!r}")
    return number


def generate(
    name: str,
    *,
    tasks: int = 20_000,
    tenants: int | None = None,
    load: float = 0.85,
    workers: int = 8,
    seed: int = 0,
    predicted_noise: float | None = None,
) -> pl.DataFrame:
    """The trace of scenario ``name``: ``tasks`` rows sorted by ``submit_s``, ids in that order.

    ``tenants`` defaults to the scenario's own count (20; 1,000 for ``many-tenants``); every
    tenant submits at least one task, so the trace has exactly ``tenants`` tenants and
    ``tasks >= tenants`` is required. The offered load ``tasks / span(submit_s) *
    mean(duration_s) / workers`` is ``load`` up to sampling noise (module docstring).

    ``predicted_noise`` = sigma adds ``predicted_s = duration_s * LogNormal(0, sigma)``: a
    stand-in for a duration model whose error is controlled (median-unbiased, log-error sd
    sigma; 0 gives a perfect oracle). It draws from its own stream, so every other column is
    the same with or without it. Raises ``DeschedError`` naming an unknown scenario or the
    first bad argument.
    """
    scenario = SCENARIOS.get(name)
    if scenario is None:
        raise DeschedError(f"unknown workload {name!r} (known: {', '.join(SCENARIOS)})")
    n = _check_int("tasks", tasks, 1)
    k = _check_int("tenants", scenario.default_tenants if tenants is None else tenants, 1)
    if k < scenario.min_tenants:
        raise DeschedError(f"workload {name!r}: tenants must be >= {scenario.min_tenants}, got {k}")
    if n < k:
        raise DeschedError(
            f"workload {name!r}: tasks ({n}) must be >= tenants ({k}): every tenant submits"
        )
    req = Request(
        tasks=n,
        tenants=k,
        load=_check_float("load", load, positive=True),
        workers=_check_int("workers", workers, 1),
    )
    seed = _check_int("seed", seed, 0)
    sigma = (
        None
        if predicted_noise is None
        else _check_float("predicted_noise", predicted_noise, positive=False)
    )
    streams = Streams.from_seed(seed)
    g = scenario.build(req, streams)
    order = np.argsort(g.submit_s, kind="stable")
    width = max(7, len(str(n - 1)))
    columns: dict[str, pl.Series] = {
        "task_id": pl.select(
            pl.format("s{}", pl.int_range(n, dtype=pl.Int64).cast(pl.String).str.zfill(width))
        ).to_series(),
        "tenant": pl.Series(
            "tenant", np.asarray(g.tenant_names, dtype=object)[g.tenant[order]], pl.String
        ),
        "task_type": pl.Series(
            "task_type", np.asarray(TASK_TYPE_NAMES, dtype=object)[g.task_type[order]], pl.String
        ),
        "submit_s": pl.Series("submit_s", g.submit_s[order], pl.Float64),
        "duration_s": pl.Series("duration_s", g.duration_s[order], pl.Float64),
        "doc_bytes": pl.Series("doc_bytes", g.doc_bytes[order], pl.Int64),
        "pages": pl.Series("pages", g.pages[order], pl.Int32),
        "mem_mb": pl.Series("mem_mb", g.mem_mb[order], pl.Float64),
    }
    if sigma is not None:
        noise = streams.predictions.lognormal(0.0, sigma, n)
        columns["predicted_s"] = pl.Series("predicted_s", g.duration_s[order] * noise, pl.Float64)
    return validate_trace(pl.DataFrame(columns), f"workload {name!r}")


def offered_load(frame: pl.DataFrame, workers: int) -> float:
    """``tasks / span(submit_s) * mean(duration_s) / workers`` of a trace (inf for one instant)."""
    submit = pl.col("submit_s")
    span, mean_duration = frame.select(
        submit.max() - submit.min(), pl.col("duration_s").mean()
    ).row(0)
    if span <= 0:
        return math.inf
    return float(frame.height / span * mean_duration / workers)
