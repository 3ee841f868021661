"""Predictions made as the live service makes them: at each task's arrival in the simulated
run, from the history of the tasks that had finished before it *in that run*.

A judge case's duration model reads the tenant-history features (``desched.models.features
.HISTORY``: the mean of a tenant's last five and last two finished tasks, of its last five of
the same type, how many had finished). Computed once on the log's own timeline (its logged
waits), those features would let a test task see tenant-mates that, in the simulated run of a
policy (other workers, arrivals rescaled to the judge's load, another order), are still queued
or running: predictions a running service could not make. Here each run makes its own:

- ``OnlineModel`` (picklable, one per case) holds the compiled-forest texts of the point model
  and the p50/p90 models, each task's static feature row (tenant, type, sizes, hour of day of
  its logged submission) and the *seed history*: the training part's tasks that had finished
  (on the log's clock) before the first test task was submitted, in end order;
- ``OnlineLabels`` (one per run) starts from that seed; ``arrive(i, t)`` first applies every
  completion of this run that ended strictly before ``t`` (several at one instant in task
  order, as ``with_history`` takes them), then writes task ``i``'s ``predicted_s``,
  ``predicted_p50_s`` and ``predicted_p90_s`` into the run's task table before the policy sees
  the task; ``complete(i, t)`` records a completion. The simulator's Python loop calls both
  (``desched.simulator.simulate``'s ``labels``); a policy with a compiled kernel runs there
  instead with the same rule in native code (``desched.kernels.source_online``: the history
  in arrays, the forests called by address, state from ``kernel_state``), bit for bit the
  Python loop's predictions and start times.

The policy still reads only its task table's prediction columns; the durations the history
uses are those of tasks that finished, as the service's completion records carry them.
``tests/test_online_labels.py`` checks the history of every arrival against ``with_history``
over the run's own end times (an independent, vectorised computation).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import math
import tempfile
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from desched.errors import DeschedError
from desched.models.features import HISTORY, FeatureSpec, TenantHistory
from desched.trace import MIN_PREDICTION_S, TaskTable

LABEL_COLUMNS: tuple[str, ...] = ("predicted_s", "predicted_p50_s", "predicted_p90_s")
MEMO_SLOTS = 4
"""Predictions a kernel run keeps per task for the next runs of the case, by history values
(``desched.kernels.source_online``)."""
_FORESTS: dict[str, Any] = {}
"""Compiled forests of this process by the digest of their text (a run compiles none twice)."""


@dataclass
class OnlineModel:
    """What a run needs to predict as it goes (module docstring)."""

    spec: dict[str, Any]
    """The model's ``FeatureSpec.to_json()``."""
    models: dict[str, tuple[str, bool]]
    """``LABEL_COLUMNS`` entry -> (LightGBM model text, whether its output is log seconds)."""
    static: np.ndarray = field(repr=False)
    """(tasks, features) rows in the spec's order, the history columns NaN."""
    task_type: list[str] = field(repr=False)
    seed: list[tuple[str, str, float]] = field(default_factory=list, repr=False)
    """(tenant, task type, duration) of the tasks finished before the run, in end order."""

    @cached_property
    def digest(self) -> str:
        """What identifies the model and its rows (``PLANS``' key, with the table's tenants)."""
        h = hashlib.sha256(json.dumps(self.spec, sort_keys=True).encode())
        for column, (text, log_target) in sorted(self.models.items()):
            h.update(f"\0{column}\0{log_target}\0".encode())
            h.update(text.encode())
        h.update(np.ascontiguousarray(self.static, dtype=np.float64).tobytes())
        h.update("\0".join(self.task_type).encode())
        h.update(repr(self.seed).encode())
        return h.hexdigest()

    @classmethod
    def of(cls, result: Any, static: np.ndarray, task_type: list[str],
           seed: list[tuple[str, str, float]]) -> OnlineModel:
        """From a ``desched.models.training.TrainResult``."""
        models = {"predicted_s": (result.model.booster.model_to_string(),
                                  bool(result.model.log_target))}
        for key, column in (("p50", "predicted_p50_s"), ("p90", "predicted_p90_s")):
            q = result.quantile_models.get(key)
            if q is not None:
                models[column] = (q.booster.model_to_string(), bool(q.log_target))
        return cls(spec=result.spec.to_json(), models=models,
                   static=np.ascontiguousarray(static, dtype=np.float64),
                   task_type=list(task_type), seed=list(seed))

    def forests(self, columns: frozenset[str] | set[str] = frozenset(LABEL_COLUMNS)
                ) -> list[tuple[str, Any, bool]]:
        """(column, compiled forest, log target) per model of ``columns``, compiled once per
        process (and once per machine: ``desched.models.duration.compile_model``'s shared
        cache)."""
        from desched.models.duration import compile_model

        out = []
        for column, (text, log_target) in self.models.items():
            if column not in columns:
                continue
            digest = hashlib.sha256(text.encode()).hexdigest()
            forest = _FORESTS.get(digest)
            if forest is None:  # its code stays in memory; the files go at once
                with tempfile.TemporaryDirectory(prefix="desched-online-") as folder:
                    model_path = Path(folder) / "model.txt"
                    model_path.write_text(text)
                    forest = compile_model(model_path, Path(folder) / "model.so")
                _FORESTS[digest] = forest
            out.append((column, forest, log_target))
        return out


@dataclass(frozen=True)
class KernelPlan:
    """What ``kernel_state`` needs beyond the model, for one table's tenant codes: each task's
    (tenant, task type) pair code, the seed's tenant and pair codes (-1 where the run has no
    such tenant or pair) and durations."""

    pairs: int
    pair: np.ndarray
    seed_tenant: np.ndarray
    seed_pair: np.ndarray
    seed_duration: np.ndarray
    memo: np.ndarray = field(repr=False)
    """The kernel's ``ost``: the static rows, then the memo of predictions by task and history
    values (``desched.kernels.source_online``), kept from run to run of the case."""

    def memo_offsets(self, nf: int) -> tuple[int, int, int]:
        """Where the memo's history values, predictions and entry counts start in ``memo``
        (``nf`` features a row)."""
        n = self.pair.size
        key = n * nf
        value = key + n * MEMO_SLOTS * 4
        return key, value, value + n * MEMO_SLOTS * 3

    @classmethod
    def of(cls, model: OnlineModel, tenant: list[int], tenant_names: list[str]) -> KernelPlan:
        """For a table of ``len(tenant)`` tasks, the first rows of ``model``'s."""
        n, nf = len(tenant), model.static.shape[1]
        if n > model.static.shape[0]:
            raise DeschedError(f"the duration model has feature rows for "
                               f"{model.static.shape[0]} tasks, the run has {n}")
        code: dict[tuple[int, str], int] = {}
        pair = np.array([code.setdefault((k, ty), len(code))
                         for k, ty in zip(tenant, model.task_type)], dtype=np.int64)
        index = {name: k for k, name in enumerate(tenant_names)}
        seed_tenant = np.array([index.get(s[0], -1) for s in model.seed], dtype=np.int64)
        seed_pair = np.array([code.get((k, s[1]), -1) if k >= 0 else -1
                              for k, s in zip(seed_tenant.tolist(), model.seed)], dtype=np.int64)
        memo = np.zeros(n * nf + n * MEMO_SLOTS * 7 + n, dtype=np.float64)
        memo[:n * nf] = model.static[:n].ravel()
        return cls(len(code), pair, seed_tenant, seed_pair,
                   np.array([s[2] for s in model.seed], dtype=np.float64), memo)


PLANS: OrderedDict[str, KernelPlan] = OrderedDict()
"""This process's ``KernelPlan`` (and so memo) of the cases it ran last, by the model's digest
and the table's tenants: the judge's pool ships a fresh copy of a case with each call, and its
runs on one process still share the memo. At most ``PLANS_KEPT`` plans and, beyond the newest,
``PLANS_BYTES`` of their arrays (a plan costs about 290 bytes a task: its static row and 4
memo entries)."""
PLANS_KEPT = 8
PLANS_BYTES = 512 << 20


def kernel_plan(model: OnlineModel, tasks: TaskTable) -> KernelPlan:
    """The plan of ``model`` on ``tasks`` (made once per process, ``PLANS``)."""
    h = hashlib.sha256(model.digest.encode())
    h.update(np.asarray(tasks.tenant, dtype=np.int64).tobytes())
    h.update("\0".join(tasks.tenant_names).encode())
    key = h.hexdigest()
    plan = PLANS.get(key)
    if plan is None:
        plan = PLANS[key] = KernelPlan.of(model, tasks.tenant, tasks.tenant_names)
        while len(PLANS) > 1 and (len(PLANS) > PLANS_KEPT or sum(
                p.memo.nbytes + p.pair.nbytes for p in PLANS.values()) > PLANS_BYTES):
            PLANS.popitem(last=False)
    else:
        PLANS.move_to_end(key)
    return plan


class OnlineLabels:
    """One run's predictions (module docstring). Not reentrant: one simulation at a time."""

    def __init__(self, model: OnlineModel, tasks: TaskTable,
                 columns: frozenset[str] | set[str] = frozenset(LABEL_COLUMNS)) -> None:
        """``columns``: the ``LABEL_COLUMNS`` to predict (those the policy reads; the others
        keep what ``tasks`` holds)."""
        spec = FeatureSpec.from_json(model.spec)
        self.at = len(spec.names) - len(HISTORY)
        self.static = model.static
        self.tasks = tasks
        self.task_type = model.task_type
        self.forests = model.forests(columns)
        self.columns = [getattr(tasks, c) for c, _, _ in self.forests]
        self.model = model
        self.window = spec.history_window
        self._history: TenantHistory | None = None
        self.pending: deque[tuple[float, int]] = deque()
        self.rows: dict[int, np.ndarray] = {}
        """Every feature row the run predicted from, by task (kept only when ``keep_rows``)."""
        self.keep_rows = False
        self.memo = True
        """Whether a kernel run uses (and fills) the case's memo of predictions."""

    @property
    def history(self) -> TenantHistory:
        """The tenant history, from the seed on (built at the first arrival the Python loop
        predicts; a kernel run keeps its own)."""
        if self._history is None:
            self._history = TenantHistory(self.window)
            for tenant, task_type, duration in self.model.seed:
                self._history.record(tenant, task_type, duration)
        return self._history

    def kernel_state(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``ol``, ``of_`` and ``ost`` for a kernel run (``desched.kernels.source_online``'s
        layout), the history at the seed; ``kernel_written`` takes the run's predictions."""
        from desched.kernels import source_online as so

        tasks = self.tasks
        n = len(tasks)
        nt = max(1, len(tasks.tenant_names))
        plan = kernel_plan(self.model, tasks)
        w, npair, ns = self.window, max(1, plan.pairs), plan.seed_tenant.size
        nf = self.static.shape[1]
        ints = {"pair": n, "tcount": nt, "tpos": nt, "tdone": nt, "pcount": npair,
                "ppos": npair, "heapi": n, "stenant": ns, "spair": ns}
        floats = {"tring": nt * w, "pring": npair * w, "heapt": n, "sdur": ns, "row": nf,
                  "out": 1}
        at: dict[str, int] = {}
        size = so.HEADER
        for name, count in ints.items():
            at[name], size = size, size + count
        ol = np.zeros(size, dtype=np.int64)
        size = 0
        for name, count in floats.items():
            at[name], size = size, size + count
        of_ = np.zeros(size, dtype=np.float64)
        for name in (*ints, *floats):
            ol[getattr(so, f"H_{name.upper()}")] = at[name]
        ol[so.H_ON], ol[so.H_NF], ol[so.H_AT], ol[so.H_W], ol[so.H_NS] = 1, nf, self.at, w, ns
        ol[so.H_SLOTS] = MEMO_SLOTS if self.memo else 0
        ol[so.H_MKEY], ol[so.H_MVAL], ol[so.H_MFILL] = plan.memo_offsets(nf)
        for column, forest, log_target in self.forests:
            m = LABEL_COLUMNS.index(column)
            ol[so.H_FOREST + m] = ctypes.cast(forest.entry, ctypes.c_void_p).value or 0
            ol[so.H_LOG + m] = int(log_target)
        ol[at["pair"]:at["pair"] + n] = plan.pair
        ol[at["stenant"]:at["stenant"] + ns] = plan.seed_tenant
        ol[at["spair"]:at["spair"] + ns] = plan.seed_pair
        of_[at["sdur"]:at["sdur"] + ns] = plan.seed_duration
        return ol, of_, plan.memo

    def kernel_written(self, predicted: tuple[np.ndarray, ...]) -> None:
        """A kernel run's prediction arrays, in ``LABEL_COLUMNS`` order: those this run makes
        are written into its task table, as ``arrive`` writes them."""
        for column, _, _ in self.forests:
            getattr(self.tasks, column)[:] = predicted[LABEL_COLUMNS.index(column)].tolist()

    def complete(self, i: int, t: float) -> None:
        """Task ``i`` of this run finished at ``t`` (completions come in time order)."""
        self.pending.append((t, i))

    def seed_labels(self) -> None:
        """Every task's labels from the seed history alone, as ``arrive(i, -inf)`` for each
        ``i`` in turn writes them (nothing of the run has ended), in one forest call per
        model over all the rows: a task's row differs from the static one only by its
        (tenant, type)'s history values, looked up once per pair. The same compiled code
        runs on each row and the same ``math.exp`` and ``max`` follow, so the labels are
        bit for bit ``arrive``'s (tests/test_online_labels.py)."""
        tasks = self.tasks
        names, tenant = tasks.tenant_names, tasks.tenant
        rows = np.array(self.static, dtype=np.float64, order="C", copy=True)
        looked: dict[tuple[str, str], tuple[float, ...] | None] = {}
        for i in range(len(tasks)):
            key = (names[tenant[i]], self.task_type[i])
            if key not in looked:
                looked[key] = self.history.values(*key)
            values = looked[key]
            if values is not None:
                rows[i, self.at:self.at + len(values)] = values
        for column, (_, forest, log_target) in zip(self.columns, self.forests):
            raw = forest.predict(rows).tolist()
            column[:] = [max(math.exp(r) if log_target else r, MIN_PREDICTION_S) for r in raw]

    def arrive(self, i: int, t: float) -> None:
        """Task ``i`` arrives at ``t``: its labels, from the history of what ended before."""
        pending = self.pending
        if pending and pending[0][0] < t:
            ended = []
            while pending and pending[0][0] < t:
                ended.append(pending.popleft())
            ended.sort()  # one instant's completions in task order, as with_history's rows
            names, durations = self.tasks.tenant_names, self.tasks.duration_s
            tenant = self.tasks.tenant
            for _, j in ended:
                self.history.record(names[tenant[j]], self.task_type[j], durations[j])
        row = self.static[i].copy()
        values = self.history.values(self.tasks.tenant_names[self.tasks.tenant[i]],
                                     self.task_type[i])
        if values is not None:
            row[self.at:self.at + len(values)] = values
        if self.keep_rows:
            self.rows[i] = row
        for column, (_, forest, log_target) in zip(self.columns, self.forests):
            forest.row[:] = row
            raw = forest.predict_row()
            column[i] = max(math.exp(raw) if log_target else raw, MIN_PREDICTION_S)
