"""Tenant controls: weights, concurrency caps, submit rate limits and priority levels.

The same logic serves the simulator (``simulate(..., gate=...)``, ``desched simulate
--tenants FILE``) and the live service (``desched tenants set``), so that the bench measures
what a control costs on exactly the rules the service applies.

- **Weight** (``weight``, ``WEIGHT_RANGE``: 1e-6 to 1e6, default 1). The service-counting policies (``vtc``,
  ``fair-sjf``, ``ifs-counter``) advance a tenant's counter by ``service / weight``
  (``TaskTable.charge``), so while two tenants are both backlogged a tenant of weight 2
  receives twice the service of one of weight 1 (VTC's bound, divided by the weights:
  ``tests/test_tenant_controls.py``). Other policies ignore weights. Weight 1 divides by
  nothing: decisions are bit-identical to a run without controls.
- **Concurrency cap** (``cap``, 1 to ``MAX_CAP``, default none). At most ``cap`` of the tenant's tasks
  run (are leased) at once. The poll gets the policy's first candidate of a tenant under
  its cap: the first task of the policy's pop sequence (``desched/policies/base.py``) whose
  tenant is under its cap, and the policy's state is exactly that of a ``take`` of it (a
  skipped tenant keeps its turn and is not charged), as if a ``fits`` of
  ``Policy.pop_fitting`` refused the capped tenants' tasks; those count neither as skipped
  nor against a limit (``Gate.choose``, which also says what the walk costs). When every
  queued task belongs to a tenant at its cap, the worker gets nothing and idles until a
  task ends or one arrives.
- **Rate limit** (``rate`` submits per second, ``RATE_RANGE``; ``burst`` bucket size, 1 to
  ``MAX_BURST``, default ``max(1, rate)``). A token bucket per tenant, full at the start: a submit of ``n`` tasks
  takes ``n`` tokens or is refused whole with the seconds until it would be admitted (HTTP
  429 with ``Retry-After``). The simulator models a client that retries exactly then
  (``shape_submits``): the policy sees the admitted time; waits are still measured from the
  trace's ``submit_s``, so they include the throttling.
- **Priority levels** (``priority``, an integer per task, higher first, default 0). Priority
  orders a tenant's own work and never another tenant's: the policy decides which tenant a
  worker serves exactly as without priorities (its first candidate ``c`` that the caps and
  ``fits`` allow), then that tenant runs, instead of ``c``, its first task in the policy's
  order (the pop sequence) among its queued tasks of the highest priority that fit; the
  policy is then as after ``take`` of that task (charged for what ran). With one priority
  level queued per tenant this is the plain dispatch; otherwise it walks the policy's pop
  sequence as ``Gate.choose`` says, and on to the tenant's first task of its highest
  level (further for a tenant whose tasks of that level do not fit).

``Gate`` keeps the per-tenant books (running tasks, queued priority levels) and chooses;
``GatedQueue`` binds it to one policy for the simulator.
"""

from __future__ import annotations

import heapq
import json
import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from desched.errors import DeschedError
from desched.policies.base import Fits, Policy, first_fitting
from desched.trace import QUANTILE_COLUMNS, TaskTable

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

FIELDS = ("weight", "cap", "rate", "burst")
WEIGHT_RANGE = (1e-6, 1e6)
"""The weights a tenant may have: a counter of service divided by a weight outside this
range overflows (5e-324 made VTC's counter infinite, and every tenant's order with it)."""
MAX_CAP = 2**31 - 1
RATE_RANGE = (1e-6, 1e9)
"""Submits per second: from about one in 12 days (slower, and a 429's Retry-After runs to
hundreds of digits) to a billion."""
MAX_BURST = 1e9


@dataclass(frozen=True, slots=True)
class TenantControl:
    """One tenant's controls; None: no cap, no rate limit."""

    weight: float = 1.0
    cap: int | None = None
    rate: float | None = None
    burst: float | None = None

    def __post_init__(self) -> None:
        low, high = WEIGHT_RANGE
        if not (math.isfinite(self.weight) and self.weight > 0):
            raise DeschedError(f"weight must be a finite number > 0, got {self.weight!r}")
        if not low <= self.weight <= high:
            raise DeschedError(f"weight must be between {low:g} and {high:g}, got "
                               f"{self.weight!r}")
        if self.cap is not None and (int(self.cap) != self.cap or not 1 <= self.cap <= MAX_CAP):
            raise DeschedError(f"cap must be an integer from 1 to {MAX_CAP:,}, got {self.cap!r}")
        if self.rate is not None and not (math.isfinite(self.rate) and self.rate > 0):
            raise DeschedError(f"rate must be a finite number > 0 (per second), got {self.rate!r}")
        if self.rate is not None and not RATE_RANGE[0] <= self.rate <= RATE_RANGE[1]:
            raise DeschedError(f"rate must be between {RATE_RANGE[0]:g} and "
                               f"{RATE_RANGE[1]:g} per second, got {self.rate!r}")
        if self.burst is not None and not (math.isfinite(self.burst)
                                           and 1 <= self.burst <= MAX_BURST):
            raise DeschedError(f"burst must be a finite number from 1 to {MAX_BURST:g}, got "
                               f"{self.burst!r}")
        if self.burst is not None and self.rate is None:
            raise DeschedError("burst needs a rate")

    @property
    def bucket(self) -> float:
        """The token bucket's size: ``burst``, else ``max(1, rate)``."""
        if self.burst is not None:
            return self.burst
        return max(1.0, self.rate or 1.0)

    def as_dict(self) -> dict[str, Any]:
        return {"weight": self.weight, "cap": self.cap, "rate": self.rate, "burst": self.burst}


DEFAULT = TenantControl()


@dataclass(frozen=True, slots=True)
class Controls:
    """Controls by tenant name; a tenant not named has ``DEFAULT`` (weight 1, no limits)."""

    tenants: Mapping[str, TenantControl] = field(default_factory=dict)

    def of(self, tenant: str) -> TenantControl:
        return self.tenants.get(tenant, DEFAULT)

    @property
    def has_caps(self) -> bool:
        return any(c.cap is not None for c in self.tenants.values())

    def apply_weights(self, tasks: TaskTable) -> None:
        """Set ``tasks``' tenant weights to these (weight 1 is left out: no division)."""
        tasks.tenant_weight.clear()
        for name, control in self.tenants.items():
            if control.weight != 1.0:
                tasks.tenant_weight[tasks.tenant_code(name)] = control.weight

    @classmethod
    def from_rows(cls, rows: Iterable[Mapping[str, Any]], source: str) -> Controls:
        """From rows ``{tenant, weight?, cap?, rate?, burst?}``; errors name ``source``."""
        tenants: dict[str, TenantControl] = {}
        for n, row in enumerate(rows):
            where = f"{source}: row {n}"
            name = row.get("tenant")
            if not isinstance(name, str) or not name:
                raise DeschedError(f"{where}: column 'tenant' must be a non-empty name")
            unknown = set(row) - {"tenant", *FIELDS}
            if unknown:
                raise DeschedError(
                    f"{where}: unknown column {min(unknown)!r} (tenant, {', '.join(FIELDS)})"
                )
            if name in tenants:
                raise DeschedError(f"{where}: tenant {name!r} has a row already")
            values: dict[str, Any] = {}
            for key in FIELDS:
                raw = row.get(key)
                if raw is None or raw == "":
                    continue
                try:
                    if isinstance(raw, bool):  # JSON/TOML true is not 1
                        raise TypeError(raw)
                    if key == "rate" and isinstance(raw, str):
                        values[key] = rate_per_s(raw)
                    elif key == "cap":
                        # 2.7 is refused, as in a CSV file, not truncated to 2
                        values[key] = int(raw) if isinstance(raw, (int, str)) else _whole(raw)
                    else:
                        values[key] = float(raw)
                except (TypeError, ValueError):
                    hint = " (a number per s, or R/s, R/m, R/h)" if key == "rate" else ""
                    raise DeschedError(f"{where}: column {key!r} has value {raw!r}{hint}") \
                        from None
            try:
                tenants[name] = TenantControl(**values)
            except DeschedError as exc:
                raise DeschedError(f"{where} (tenant {name!r}): {exc}") from None
        return cls(tenants)

    @classmethod
    def read(cls, path: str | Path) -> Controls:
        """A tenants file: TOML (``[tenants.NAME]`` tables, or ``[[tenant]]`` rows with a
        ``tenant`` key), JSON (a list of rows or ``{NAME: {weight, ...}}``) or CSV (header
        ``tenant,weight,cap,rate,burst``, any subset after ``tenant``)."""
        import csv  # here: a simulation without a tenants file needs neither parser
        import io
        import tomllib

        path = Path(path)
        if not path.exists():
            raise DeschedError(f"{path}: no such tenants file")
        text = path.read_text(encoding="utf-8-sig")  # a spreadsheet's byte-order mark
        suffix = path.suffix.lower()
        try:
            if suffix == ".toml":
                data: Any = tomllib.loads(text)
                data = data.get("tenants", data.get("tenant", data))
            elif suffix == ".json":
                data = json.loads(text)
            elif suffix == ".csv":
                data = list(csv.DictReader(io.StringIO(text)))
            else:
                raise DeschedError(f"{path}: tenants file must end in .toml, .json or .csv")
        except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
            raise DeschedError(f"{path}: unreadable ({exc})") from None
        if isinstance(data, dict):
            data = [{"tenant": k, **v} if isinstance(v, dict) else {"tenant": k, "bad": v}
                    for k, v in data.items()]
        if not isinstance(data, list):
            raise DeschedError(f"{path}: expected a list of tenant rows")
        return cls.from_rows(data, str(path))


def _whole(value: Any) -> int:
    """``value`` as an int where it is a whole number (``3.0``), else ``ValueError``."""
    number = float(value)
    if not number.is_integer():
        raise ValueError(value)
    return int(number)


def rate_per_s(text: str) -> float:
    """``R``, ``R/s``, ``R/m`` or ``R/h`` as tasks per second (``ValueError`` otherwise; the
    value itself is checked by ``TenantControl``)."""
    number, _, unit = text.strip().lower().partition("/")
    per = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}.get(unit.strip())
    if per is None:
        raise ValueError(f"unknown unit {unit!r}")
    return float(number) / per


class TokenBucket:
    """``rate`` tokens per second up to ``size``, full at ``now``. Exact float arithmetic on
    the elapsed time since the last refill; time never goes backwards."""

    __slots__ = ("at", "rate", "size", "tokens")

    def __init__(self, rate: float, size: float, now: float) -> None:
        self.rate, self.size, self.tokens, self.at = rate, size, size, now

    def _refill(self, now: float) -> None:
        if now > self.at:
            self.tokens = min(self.size, self.tokens + (now - self.at) * self.rate)
            self.at = now

    def take(self, now: float, n: int = 1) -> float:
        """Take ``n`` tokens at ``now`` and return 0, or take none and return the seconds
        until ``n`` are there (``inf`` when ``n`` exceeds the bucket)."""
        self._refill(now)
        if self.tokens >= n:
            self.tokens -= n
            return 0.0
        if n > self.size:
            return math.inf
        return (n - self.tokens) / self.rate


class RateLimits:
    """One ``TokenBucket`` per rate-limited tenant (the service's submit check)."""

    def __init__(self, controls: Controls | None = None) -> None:
        self.controls = controls or Controls()
        self.buckets: dict[str, TokenBucket] = {}

    def set_controls(self, controls: Controls) -> None:
        """New controls; a tenant whose rate or burst changed starts with a full bucket."""
        for name in list(self.buckets):
            old, new = self.controls.of(name), controls.of(name)
            if (old.rate, old.bucket) != (new.rate, new.bucket):
                del self.buckets[name]
        self.controls = controls

    def take(self, tenant: str, now: float, n: int = 1) -> float:
        """0 when ``tenant`` may submit ``n`` tasks at ``now`` (tokens taken), else the
        seconds to wait."""
        control = self.controls.of(tenant)
        if control.rate is None:
            return 0.0
        bucket = self.buckets.get(tenant)
        if bucket is None:
            bucket = self.buckets[tenant] = TokenBucket(control.rate, control.bucket, now)
        return bucket.take(now, n)


def shape_submits(
    submit_s: Sequence[float], tenant: Sequence[str], controls: Controls
) -> list[float]:
    """When each task is admitted under its tenant's rate limit, by a client that submits in
    trace order and retries exactly when its bucket has a token (a tenant's tasks stay in
    order): ``submit_s`` where no limit applies."""
    order = sorted(range(len(submit_s)), key=submit_s.__getitem__)
    out = list(submit_s)
    buckets: dict[str, TokenBucket] = {}
    last: dict[str, float] = {}
    for i in order:
        control = controls.of(tenant[i])
        if control.rate is None:
            continue
        name = tenant[i]
        t = max(submit_s[i], last.get(name, -math.inf))
        bucket = buckets.get(name)
        if bucket is None:
            bucket = buckets[name] = TokenBucket(control.rate, control.bucket, t)
        wait = bucket.take(t)
        if wait > 0:
            t += wait
            bucket._refill(t)
            bucket.tokens = max(0.0, bucket.tokens - 1.0)
        out[i] = last[name] = t
    return out


class Gate:
    """Per-tenant books (running tasks, queued tasks per priority level) and the choice of
    what a worker gets under caps and priorities (module docstring). Tenants are the task
    table's codes; ``priority_of(i)`` gives task ``i``'s level."""

    def __init__(
        self,
        tasks: TaskTable,
        controls: Controls | None = None,
        priority_of: Callable[[int], int] | None = None,
    ) -> None:
        self.tasks = tasks
        self.priority_of = priority_of
        self.running: Counter[int] = Counter()
        self.levels: dict[int, Counter[int]] = {}
        self.mixed: set[int] = set()
        """Tenants with tasks of more than one priority level queued."""
        self.members: dict[tuple[int, int], set[int]] = {}
        """Queued tasks by (tenant, priority level)."""
        self.heaps: dict[tuple[int, int], list[tuple[Any, ...]]] = {}
        """``members`` as heaps in the policy's ``tenant_order`` (``order_of``), stale
        entries dropped lazily; built for one policy at a time."""
        self.order_of: Policy | None = None
        self.set_controls(controls or Controls())

    def set_controls(self, controls: Controls) -> None:
        """New controls: weights go to the task table, caps to this gate."""
        self.controls = controls
        controls.apply_weights(self.tasks)
        self.caps = {
            self.tasks.tenant_code(name): c.cap
            for name, c in controls.tenants.items()
            if c.cap is not None
        }

    def admits(self, i: int) -> bool:
        """Whether task ``i``'s tenant is under its cap."""
        k = self.tasks.tenant[i]
        cap = self.caps.get(k)
        return cap is None or self.running[k] < cap

    def queued(self, i: int) -> None:
        """Task ``i`` joined the queue."""
        if self.priority_of is None:
            return
        k = self.tasks.tenant[i]
        levels = self.levels.setdefault(k, Counter())
        p = self.priority_of(i)
        levels[p] += 1
        if len(levels) > 1:
            self.mixed.add(k)
        self.members.setdefault((k, p), set()).add(i)
        if self.order_of is not None:
            key = self.order_of.tenant_order(i)
            heapq.heappush(self.heaps.setdefault((k, p), []), (key, i))

    def unqueued(self, i: int) -> None:
        """Task ``i`` left the queue (dispatched or withdrawn)."""
        if self.priority_of is None:
            return
        k = self.tasks.tenant[i]
        levels = self.levels[k]
        p = self.priority_of(i)
        self.members[k, p].discard(i)
        levels[p] -= 1
        if not levels[p]:
            del levels[p]
            if len(levels) <= 1:
                self.mixed.discard(k)

    def started(self, i: int) -> None:
        self.running[self.tasks.tenant[i]] += 1

    def finished(self, i: int) -> None:
        """Task ``i`` stopped running (completed, failed, expired, cancelled)."""
        k = self.tasks.tenant[i]
        self.running[k] -= 1
        if not self.running[k]:
            del self.running[k]

    def capped(self) -> set[int]:
        """The tenant codes at their concurrency cap now."""
        return {k for k, cap in self.caps.items() if self.running[k] >= cap}

    def choose(
        self, policy: Policy, now: float, fits: Fits | None = None, limit: int | None = None
    ) -> tuple[int | None, int]:
        """``(winner, skipped)`` like ``Policy.pop_fitting`` under the caps and priorities:
        the winner is dispatched in the policy (not yet ``started`` here).

        The tenants at their cap are left out of the policy's pop sequence (the others keep
        their order in it, so this is the walk of a ``fits`` that refuses their tasks);
        ``skipped`` and ``limit`` count only the candidates ``fits`` refuses. The walk:
        for a policy that ``skips_tenants`` (vtc, fair-sjf, round-robin), its own over
        copies of its per-tenant state, O(K) to start, and for the substitute of a
        priority level the walk of the winner's tenant alone; for one whose
        ``requeue_is_exact``,
        pops from the policy itself, every popped task pushed back before the winner is
        taken (O(tasks popped), those of capped tenants included); else its
        ``pop_sequence``. Without a capped tenant and without mixed priorities it is the
        plain ``pop`` / ``pop_fitting``."""
        capped = self.capped()
        if not capped and not self.mixed:
            if fits is None:
                return policy.pop(now), 0
            return policy.pop_fitting(now, fits, limit)
        popped: list[int] = []
        if policy.requeue_is_exact and not policy.skips_tenants:
            sequence = self._popping(policy, now, capped, popped)
        else:
            sequence = policy.pop_sequence(now, capped)
        winner, skipped = first_fitting(sequence, fits or (lambda i: True), limit)
        if winner is not None and self.tasks.tenant[winner] in self.mixed:
            indexed = self._first_of_top_level(policy, winner, fits)
            if indexed is not None:
                winner = indexed
            elif policy.skips_tenants:  # the tenant's own order: its tasks' walk alone
                k = self.tasks.tenant[winner]
                others = {j for j in self.levels if j != k}
                sequence = policy.pop_sequence(now, others)
                next(sequence)  # the winner again: its tenant's first
            winner = self._substitute(winner, sequence, fits)
        for i in popped:
            policy.push(i, now)
        if winner is not None:
            policy.take(winner, now)
        return winner, skipped

    def _popping(
        self, policy: Policy, now: float, skip: set[int], popped: list[int]
    ) -> Iterator[int]:
        """The pop sequence of a policy whose ``requeue_is_exact``, by popping it (each
        popped task noted in ``popped``, for the caller to push back), without the tasks of
        the tenants in ``skip``."""
        tenant = self.tasks.tenant
        while len(policy):
            i = policy.pop(now)
            popped.append(i)
            if tenant[i] not in skip:
                yield i

    def _first_of_top_level(self, policy: Policy, first: int, fits: Fits | None) -> int | None:
        """For a policy with a fixed ``tenant_order``: the first task, in that order, of the
        highest priority level queued for ``first``'s tenant, if it fits (None otherwise,
        and for other policies: the caller walks). O(log m) amortised, after an O(n log n)
        build of the heaps once per policy."""
        if policy.tenant_order(first) is None:
            return None
        if self.order_of is not policy:
            self.order_of = policy
            self.heaps = {
                kp: [(policy.tenant_order(i), i) for i in members]
                for kp, members in self.members.items()
            }
            for heap in self.heaps.values():
                heapq.heapify(heap)
        k = self.tasks.tenant[first]
        top = max(self.levels[k])
        heap, members = self.heaps[k, top], self.members[k, top]
        while heap[0][1] not in members:
            heapq.heappop(heap)
        head = heap[0][1]
        return head if fits is None or fits(head) else None

    def _substitute(self, first: int, rest: Iterable[int], fits: Fits | None) -> int:
        """The task tenant ``k`` of ``first`` runs in its place: its first task in the pop
        sequence (``first``, then ``rest``) among its fitting tasks of the highest level."""
        assert self.priority_of is not None
        tenant, prio = self.tasks.tenant, self.priority_of
        k = tenant[first]
        if k not in self.mixed:
            return first
        top = max(self.levels[k])
        best, best_p = first, prio(first)
        if best_p == top:
            return first
        for i in rest:
            if tenant[i] != k or (fits is not None and not fits(i)):
                continue
            p = prio(i)
            if p > best_p:
                best, best_p = i, p
                if p == top:
                    break
        return best


class GatedQueue:
    """A policy behind a ``Gate``, for the simulator: ``push``, ``pop`` (None when every
    queued task's tenant is at its cap) and ``complete``."""

    def __init__(self, policy: Policy, gate: Gate) -> None:
        self.policy, self.gate = policy, gate

    def push(self, i: int, now: float) -> None:
        self.gate.queued(i)
        self.policy.push(i, now)

    def pop(self, now: float) -> int | None:
        i, _ = self.gate.choose(self.policy, now)
        if i is not None:
            self.gate.unqueued(i)
            self.gate.started(i)
        return i

    def complete(self, i: int, now: float, duration_s: float) -> None:
        self.gate.finished(i)
        self.policy.complete(i, now, duration_s)


def priorities_of(values: Sequence[Any] | None, source: str = "trace") -> list[int] | None:
    """The ``priority`` column as integers (None when absent or all equal)."""
    if values is None:
        return None
    out: list[int] = []
    for n, v in enumerate(values):
        try:
            p = int(v)
            if p != float(v):
                raise ValueError
        except (TypeError, ValueError):
            raise DeschedError(
                f"{source}: column 'priority' has value {v!r} at row {n} (an integer)"
            ) from None
        out.append(p)
    return out if len(set(out)) > 1 else None


def controlled(frame: Any, controls: Controls | None) -> tuple[TaskTable, Gate | None]:
    """What the simulator runs for the trace ``frame`` (polars) under ``controls`` and the
    trace's optional ``priority`` column: the task table (submit times shaped by the rate
    limits, ``shape_submits``; tenant weights set) and the gate (None without caps or
    priorities: the plain simulator). Metrics read the trace's own ``submit_s``."""
    controls = controls or Controls()
    priority = None
    if "priority" in frame.columns:
        priority = priorities_of(frame["priority"].to_list())
    if any(c.rate is not None for c in controls.tenants.values()):
        shaped = shape_submits(frame["submit_s"].to_list(), frame["tenant"].to_list(), controls)
        frame = frame.with_columns(submit_s=pl_series("submit_s", shaped))
    tasks = TaskTable.from_frame(frame)
    controls.apply_weights(tasks)
    if priority is None and not controls.has_caps:
        return tasks, None
    return tasks, Gate(tasks, controls, None if priority is None else priority.__getitem__)


def pl_series(name: str, values: list[float]) -> Any:
    import polars as pl

    return pl.Series(name, values, dtype=pl.Float64)


@dataclass(frozen=True, slots=True)
class KernelInputs:
    """A trace as a compiled kernel runs it (``desched.simulator.simulate_arrays``), by task
    position: tenant codes index ``weight`` (1.0: no weight); the quantile predictions are
    NaN where absent."""

    submit_s: npt.NDArray[np.float64]
    duration_s: npt.NDArray[np.float64]
    predicted_s: npt.NDArray[np.float64]
    tenant: npt.NDArray[np.int64]
    weight: npt.NDArray[np.float64]
    predicted_p50_s: npt.NDArray[np.float64]
    predicted_p90_s: npt.NDArray[np.float64]
    online: Any = None
    """The state of predictions made at each arrival
    (``desched.bench.online.OnlineLabels.kernel_state``), or None: the predictions above."""
    tenant_names: Any = None
    """The tenant names by code (a polars Series), where the caller built the codes from
    them; the run's summary then needs no second pass over the names."""


def kernel_inputs(frame: Any, controls: Controls | None) -> KernelInputs | None:
    """The arrays a compiled kernel (``desched.simulator.simulate_arrays``) runs the trace
    ``frame`` (polars) on under ``controls``, built without a Python object per task:
    ``submit_s`` (shaped by the rate limits, as ``controlled``), ``duration_s``,
    ``predicted_s`` and the quantiles ``predicted_p50_s``, ``predicted_p90_s`` (NaN where the
    trace has none, as ``TaskTable.from_frame``), ``tenant`` (codes in order of first
    appearance, as ``TaskTable.from_frame``) and ``weight`` by code. None when the run
    needs the ``Gate`` (a cap, or more than one priority level), which only the Python
    loop applies."""
    import numpy as np
    import polars as pl

    controls = controls or Controls()
    if controls.has_caps:
        return None
    if "priority" in frame.columns and priorities_of(frame["priority"].to_list()) is not None:
        return None
    if any(c.rate is not None for c in controls.tenants.values()):
        shaped = shape_submits(frame["submit_s"].to_list(), frame["tenant"].to_list(), controls)
        frame = frame.with_columns(submit_s=pl_series("submit_s", shaped))
    names = frame["tenant"].unique(maintain_order=True)
    codes = frame["tenant"].replace_strict(
        names, pl.int_range(names.len(), eager=True), return_dtype=pl.Int64)
    weight = np.ones(max(1, names.len()), dtype=np.float64)
    index = {name: k for k, name in enumerate(names.to_list())} if controls.tenants else {}
    for name, control in controls.tenants.items():
        if name in index and control.weight != 1.0:
            weight[index[name]] = control.weight
    n = frame.height
    predicted = (frame["predicted_s"].cast(pl.Float64).to_numpy()
                 if "predicted_s" in frame.columns else np.full(n, math.nan))
    p50, p90 = (frame[c].cast(pl.Float64).fill_null(math.nan).to_numpy()
                if c in frame.columns else np.full(n, math.nan)
                for c in QUANTILE_COLUMNS)
    return KernelInputs(
        submit_s=frame["submit_s"].cast(pl.Float64).to_numpy(),
        duration_s=frame["duration_s"].cast(pl.Float64).to_numpy(),
        predicted_s=predicted,
        tenant=codes.to_numpy(),
        weight=weight,
        predicted_p50_s=p50,
        predicted_p90_s=p90,
        tenant_names=names,
    )
