"""Learning the scorer's weights offline by trace-driven simulation (research question 2).

**Objective** (minimised), per trace, against today's scorer (``ifs-memoryless`` 0.1 / 0.9)
simulated on the very same trace::

    J = bsld / bsld_ref + fairness_weight * max(0, jain_ref - jain)

``bsld`` is the mean bounded slowdown (the standard figure of merit of job scheduling: it
weighs a short task's wait by its length without letting tasks of a few seconds dominate);
dividing by the reference's makes every trace count the same whatever its scale, so ``J = 1``
is exactly today's scorer and ``J = 0.9`` is 10 % less slowdown. ``jain`` is Jain's index over
the per-tenant mean slowdown. The hinge is a fairness *constraint* written as an exact
penalty: learned weights may not buy slowdown by being less fair to tenants than today's
scorer; above the reference's index fairness earns nothing. With the default weight 5, a drop
of 0.01 in Jain's index costs as much as 5 % more slowdown, more than any gain seen when
tuning, so in practice the constraint binds. The objective of a set of traces is the mean of
``J`` over them.

**Parameters searched.** The IFS score is invariant to scaling both weights, so the search
runs on the simplex ``w_backlog = theta, w_wait = 1 - theta`` (``theta = 0.1`` is today's);
for ``ifs-counter`` also ``w_service`` in [0, 4] and ``half_life_s`` log-uniform in
[60, 14400] s.

**Learners.** ``optuna``: TPE (seeded), whose first trial is today's weights, so the search
can only report something at least as good on the training traces. ``rl``: a policy-gradient
agent (REINFORCE with a per-trace moving-average baseline, entropy bonus) with a small MLP in
torch that, at the first decision of every window of simulated time, reads queue features and
picks one weight setting from a grid; the episode's reward is ``-J``. The simulator does not
know: ``WindowControlled`` is a policy that wraps the IFS policy and changes its parameters
between windows. Its loadable *static* weights are the grid setting it used for most
decisions on the training traces (greedy); the adaptive agent itself is saved as
``agent.pt`` and judged on the held-out traces too.

**Split.** Training cells and held-out cells are (trace spec, seed) pairs of
``desched.evaluate``: a scenario seed is a regenerated workload, a file seed a disjoint time
slice. ``check_disjoint`` refuses any overlap: no held-out scenario seed is a training seed of
any scenario (``steady`` and ``diurnal`` of one seed share their documents), no held-out slice
of a file overlaps a training slice of it, and no held-out cell has the content fingerprint
of a training cell.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from desched.errors import DeschedError
from desched.evaluate import TraceSpec, fingerprint, mean_ci, simulate_summary
from desched.policies.base import Policy
from desched.weights import WEIGHT_KEYS

Learner = Literal["optuna", "rl"]
TunedPolicy = Literal["ifs-memoryless", "ifs-counter"]
REFERENCE_POLICY = "ifs-memoryless"
REFERENCE_WEIGHTS = {"w_backlog": 0.1, "w_wait": 0.9}

DEFAULT_TRAIN_SEEDS = (0, 1, 2)
DEFAULT_HELDOUT_SEEDS = (100, 101, 102, 103, 104)


class Objective(BaseModel):
    """``J = bsld / bsld_ref + fairness_weight * max(0, jain_ref - jain)`` (module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    fairness_weight: float = Field(
        5.0, ge=0, description="penalty per unit of Jain's index below the reference's"
    )

    def of(self, summary: dict[str, Any], reference: dict[str, Any]) -> float:
        """``J`` of one run (``summary``) against the reference run on the same trace."""
        ratio = summary["mean_bounded_slowdown"] / reference["mean_bounded_slowdown"]
        shortfall = max(0.0, reference["jain_slowdown"] - summary["jain_slowdown"])
        return float(ratio + self.fairness_weight * shortfall)

    def describe(self) -> str:
        return (f"J = mean_bounded_slowdown / that of ifs-memoryless 0.1/0.9 on the same trace "
                f"+ {self.fairness_weight:g} * max(0, Jain_ref - Jain) (Jain's index over "
                "per-tenant mean slowdown); mean over traces; lower is better, 1 = today's")


@dataclass(slots=True)
class Cell:
    """One trace of a split: its spec and seed, the frame, and the reference run on it."""

    spec: str
    seed: int
    frame: pl.DataFrame
    fingerprint: str
    source: tuple[Any, ...]
    reference: dict[str, Any]

    def describe(self) -> dict[str, Any]:
        return {"trace": self.spec, "seed": self.seed, "fingerprint": self.fingerprint,
                "tasks": self.frame.height}


def _source(tspec: TraceSpec, seed: int) -> tuple[Any, ...]:
    """What a cell is drawn from: ``("scenario", seed)`` (every scenario of one seed shares
    its documents) or ``("file", path, first_row, end_row)``."""
    if tspec.scenario is not None:
        return ("scenario", seed)
    return ("file", str(Path(tspec.path or "").resolve()), seed * tspec.slice_tasks,
            (seed + 1) * tspec.slice_tasks)


def default_seeds(spec: str, role: Literal["train", "heldout"]) -> list[int]:
    """Seeds of ``spec`` when none are given: scenarios train on 0..2 and are judged on
    100..104; a file trains on its first 3 slices and is judged on its last 5 (learn from the
    past, judge on the future)."""
    tspec = TraceSpec.parse(spec)
    count = tspec.slices()
    if count is None:
        return list(DEFAULT_TRAIN_SEEDS if role == "train" else DEFAULT_HELDOUT_SEEDS)
    n_train, n_held = len(DEFAULT_TRAIN_SEEDS), len(DEFAULT_HELDOUT_SEEDS)
    if count < n_train + n_held:
        raise DeschedError(f"trace {spec!r}: {count} slices of {tspec.slice_tasks} tasks, "
                           f"need {n_train + n_held} for the default split (lower slice_tasks)")
    return list(range(n_train)) if role == "train" else list(range(count - n_held, count))


def build_cells(pairs: Sequence[tuple[str, int]], workers: int) -> list[Cell]:
    """Materialise every (spec, seed) pair and simulate the reference scorer on it."""
    cells = []
    for spec, seed in pairs:
        tspec = TraceSpec.parse(spec)
        frame = tspec.materialize(seed, workers)
        reference = simulate_summary(frame, REFERENCE_POLICY, dict(REFERENCE_WEIGHTS), workers)
        cells.append(Cell(spec, seed, frame, fingerprint(frame), _source(tspec, seed),
                          reference))
    return cells


def check_disjoint(train: Sequence[Cell], heldout: Sequence[Cell]) -> None:
    """Refuse a held-out cell that shares a source or a fingerprint with a training cell."""
    if not train or not heldout:
        raise DeschedError("tuning needs at least one training and one held-out trace")
    train_prints = {c.fingerprint: c for c in train}
    for h in heldout:
        for t in train:
            same = h.source == t.source if h.source[0] == "scenario" else (
                t.source[0] == "file" and h.source[1] == t.source[1]
                and h.source[2] < t.source[3] and t.source[2] < h.source[3])
            if same:
                raise DeschedError(
                    f"held-out trace {h.spec!r} seed {h.seed} overlaps training trace "
                    f"{t.spec!r} seed {t.seed}: held-out traces must be ones never trained on")
        if h.fingerprint in train_prints:
            t = train_prints[h.fingerprint]
            raise DeschedError(f"held-out trace {h.spec!r} seed {h.seed} is identical to "
                               f"training trace {t.spec!r} seed {t.seed}")


def weights_of(policy: TunedPolicy, x: dict[str, float]) -> dict[str, float]:
    """Policy parameters from search coordinates (``theta`` on the simplex, ...)."""
    theta = float(x["theta"])
    weights = {"w_backlog": theta, "w_wait": 1.0 - theta}
    if policy == "ifs-counter":
        weights["w_service"] = float(x["w_service"])
        weights["half_life_s"] = float(x["half_life_s"])
    return weights


def run_on(
    cell: Cell,
    policy: str,
    params: dict[str, Any],
    workers: int,
    objective: Objective,
    wrap: Callable[[Policy], Policy] | None = None,
) -> dict[str, Any]:
    """``J`` and the headline metrics of ``policy`` with ``params`` on ``cell``."""
    s = simulate_summary(cell.frame, policy, params, workers, wrap=wrap, seed=cell.seed)
    return {
        "trace": cell.spec, "seed": cell.seed, "J": objective.of(s, cell.reference),
        "mean_bounded_slowdown": s["mean_bounded_slowdown"],
        "jain_slowdown": s["jain_slowdown"],
        "max_service_lag_s": s["max_service_lag_s"],
        "window_jain_min": s["window_jain_min"],
        "mean_wait_s": s["mean_wait_s"],
    }


def mean_objective(results: Sequence[dict[str, Any]]) -> float:
    return float(np.mean([r["J"] for r in results]))


@dataclass(slots=True)
class LearnerResult:
    """What a learner hands back: loadable static weights, its learning curve, extras.

    ``train_objective`` is the mean ``J`` of ``weights`` on the training cells."""

    learner: Learner
    policy: TunedPolicy
    weights: dict[str, float]
    curve: list[dict[str, Any]]
    train_objective: float
    seconds: float
    agent: Any = None
    details: dict[str, Any] = field(default_factory=dict)


def tune_optuna(
    train: Sequence[Cell],
    policy: TunedPolicy,
    workers: int,
    trials: int,
    objective: Objective,
    seed: int = 0,
) -> LearnerResult:
    """TPE search over the weights (module docstring), starting from today's weights (for
    ``ifs-counter``: 0.1 / 0.9 with no service term, then the policy's defaults).

    Cost: ``trials * len(train)`` simulations. The curve has one point per trial.
    """
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    t0 = time.perf_counter()
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=min(8, max(1, trials // 3)))
    study = optuna.create_study(direction="minimize", sampler=sampler)
    start: dict[str, float] = {"theta": 0.1}
    if policy == "ifs-counter":
        start.update(w_service=0.0, half_life_s=900.0)
    study.enqueue_trial(start)
    if policy == "ifs-counter":
        study.enqueue_trial({"theta": 0.1, "w_service": 2.0, "half_life_s": 900.0})
    curve: list[dict[str, Any]] = []

    def trial_objective(trial: Any) -> float:
        x = {"theta": trial.suggest_float("theta", 0.0, 1.0)}
        if policy == "ifs-counter":
            x["w_service"] = trial.suggest_float("w_service", 0.0, 4.0)
            x["half_life_s"] = trial.suggest_float("half_life_s", 60.0, 14_400.0, log=True)
        value = mean_objective([run_on(c, policy, weights_of(policy, x), workers, objective)
                                for c in train])
        best = min([value, *(p["value"] for p in curve)])
        curve.append({"step": trial.number, "value": value, "best": best,
                      **weights_of(policy, x)})
        return value

    study.optimize(trial_objective, n_trials=trials)
    best = weights_of(policy, study.best_params)
    return LearnerResult("optuna", policy, best, curve, float(study.best_value),
                         time.perf_counter() - t0)


# ---- the RL agent -----------------------------------------------------------------------

FEATURES: tuple[str, ...] = (
    "log1p_queued_per_worker",
    "backlogged_tenant_share",
    "largest_tenant_queue_share",
    "log1p_oldest_wait_per_mean_duration",
    "log1p_mean_head_wait_per_mean_duration",
    "log1p_arrivals_per_worker_last_window",
    "busy_worker_share",
)
"""Queue features the agent reads at the first decision of a window (all scale-free)."""


def action_grid(policy: TunedPolicy) -> list[dict[str, float]]:
    """The weight settings the agent chooses among (today's 0.1 / 0.9 is one of them)."""
    thetas = (0.0, 0.05, 0.1, 0.2, 0.35, 0.5, 0.7, 1.0)
    if policy == "ifs-memoryless":
        return [{"w_backlog": t, "w_wait": 1.0 - t} for t in thetas]
    return [{"w_backlog": t, "w_wait": 1.0 - t, "w_service": s, "half_life_s": 900.0}
            for t in (0.0, 0.1, 0.35, 0.7) for s in (0.0, 0.25, 0.5, 1.0)]


Controller = Callable[[np.ndarray], int]


class WindowControlled(Policy):
    """Wraps an IFS policy; at the first decision at or after each window boundary it reads
    queue features (``FEATURES``), asks ``controller`` for an action and installs that
    action's parameters, then decides exactly as the wrapped policy.

    The simulator sees an ordinary policy: the wrapper only forwards ``push``, ``pop`` and
    ``complete`` and keeps counters of its own. Cost per decision: the wrapped policy's, plus
    O(K) numpy work and one controller call per window.
    """

    name = "ifs-adaptive"
    summary = "an IFS scorer whose weights a controller sets once per window of simulated time"

    def __init__(
        self,
        inner: Policy,
        controller: Controller,
        actions: Sequence[dict[str, float]],
        workers: int,
        window_s: float,
        t0: float = 0.0,
    ) -> None:
        super().__init__(inner.tasks, inner.params)
        self.inner = inner
        self.components = inner.components  # type: ignore[misc]
        base = inner.params.model_dump()
        base["weights"] = None
        self.action_params = [type(inner.params)(**{**base, **a}) for a in actions]
        self.controller = controller
        self.workers = workers
        self.window_s = window_s
        self.t0 = t0
        self.next_s = t0
        self.running = 0
        self.arrivals = 0
        self.done = 0
        self.done_s = 0.0
        self.action = -1
        self.decisions_by_action = [0] * len(actions)
        self.trajectory: list[tuple[np.ndarray, int]] = []

    def __len__(self) -> int:
        return len(self.inner)

    def push(self, i: int, now: float) -> None:
        self.arrivals += 1
        self.inner.push(i, now)

    def complete(self, i: int, now: float, duration_s: float) -> None:
        self.running -= 1
        self.done += 1
        self.done_s += duration_s
        self.inner.complete(i, now, duration_s)

    def observe(self, now: float) -> np.ndarray:
        """``FEATURES`` at ``now`` (the queue is not empty)."""
        q = self.inner.queues  # type: ignore[attr-defined]
        n = q.n
        backlog = q.backlog[:n]
        head_wait = now - q.head_submit[:n]
        queued = float(backlog.sum())
        mean_s = self.done_s / self.done if self.done else max(float(head_wait.max()), 1.0)
        tenants = max(1, len(self.tasks.tenant_names))
        return np.array([
            math.log1p(queued / self.workers),
            n / tenants,
            float(backlog.max()) / queued,
            math.log1p(float(head_wait.max()) / mean_s),
            math.log1p(float(head_wait.mean()) / mean_s),
            math.log1p(self.arrivals / self.workers),
            self.running / self.workers,
        ], dtype=np.float32)

    def pop(self, now: float) -> int:
        if now >= self.next_s:
            obs = self.observe(now)
            self.action = self.controller(obs)
            self.trajectory.append((obs, self.action))
            self.inner.params = self.action_params[self.action]
            self.params = self.inner.params
            self.arrivals = 0
            self.next_s = self.t0 + self.window_s * (math.floor((now - self.t0) / self.window_s)
                                                     + 1)
        i = self.inner.pop(now)
        self.score, self.parts = self.inner.score, self.inner.parts
        self.running += 1
        self.decisions_by_action[self.action] += 1
        return i


def make_agent(n_actions: int, hidden: int = 32, seed: int = 0) -> Any:
    """The policy network: features -> logits over the action grid (torch)."""
    import torch

    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(len(FEATURES), hidden), torch.nn.Tanh(),
        torch.nn.Linear(hidden, n_actions),
    )


def agent_controller(agent: Any, *, greedy: bool, rng: random.Random | None = None) -> Controller:
    """A controller that samples the agent's action (or takes its most likely one)."""
    import torch

    def control(obs: np.ndarray) -> int:
        with torch.no_grad():
            logits = agent(torch.from_numpy(obs))
        if greedy:
            return int(torch.argmax(logits))
        probs = torch.softmax(logits, dim=-1).tolist()
        return (rng or random).choices(range(len(probs)), weights=probs)[0]

    return control


def window_of(cell: Cell, windows: int) -> tuple[float, float]:
    """``(t0, window_s)``: the cell's submission span cut into ``windows`` windows."""
    submit = cell.frame["submit_s"].to_numpy()
    t0 = float(submit.min())
    span = float(submit.max()) - t0
    return t0, (span / windows if span > 0 else 1.0)


def run_controlled(
    cell: Cell,
    policy: TunedPolicy,
    controller: Controller,
    workers: int,
    objective: Objective,
    windows: int,
) -> tuple[dict[str, Any], WindowControlled]:
    """Simulate ``cell`` under ``controller``; the result and the wrapper (its trajectory)."""
    actions = action_grid(policy)
    t0, window_s = window_of(cell, windows)
    holder: list[WindowControlled] = []

    def wrap(inner: Policy) -> Policy:
        holder.append(WindowControlled(inner, controller, actions, workers, window_s, t0))
        return holder[0]

    result = run_on(cell, policy, {}, workers, objective, wrap=wrap)
    return result, holder[0]


def tune_rl(
    train: Sequence[Cell],
    policy: TunedPolicy,
    workers: int,
    iterations: int,
    objective: Objective,
    seed: int = 0,
    windows: int = 20,
    lr: float = 0.02,
    entropy_weight: float = 0.01,
) -> LearnerResult:
    """REINFORCE with a per-cell baseline: every iteration runs one sampled episode per
    training cell, reward ``-J``, advantage ``-J - b_cell`` (``b_cell`` an exponential moving
    average, starting at today's ``-1``), one Adam step on
    ``-mean(advantage * sum log pi) - entropy_weight * mean entropy``.

    Cost: ``(iterations + 2) * len(train)`` simulations. The curve has one point per
    iteration (mean sampled ``J``); the static weights are the action the greedy agent used
    for most decisions on the training cells, and ``train_objective`` is theirs (the greedy
    agent's own is ``details["greedy_train_objective"]``).
    """
    import torch

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    actions = action_grid(policy)
    agent = make_agent(len(actions), seed=seed)
    optimizer = torch.optim.Adam(agent.parameters(), lr=lr)
    rng = random.Random(seed)
    baseline = {id(c): -1.0 for c in train}
    curve: list[dict[str, Any]] = []
    best = math.inf
    for step in range(iterations):
        controller = agent_controller(agent, greedy=False, rng=rng)
        losses = []
        values = []
        for c in train:
            result, wrapper = run_controlled(c, policy, controller, workers, objective, windows)
            reward = -result["J"]
            values.append(result["J"])
            advantage = reward - baseline[id(c)]
            baseline[id(c)] = 0.8 * baseline[id(c)] + 0.2 * reward
            obs = torch.from_numpy(np.stack([o for o, _ in wrapper.trajectory]))
            acts = torch.tensor([a for _, a in wrapper.trajectory])
            logp = torch.log_softmax(agent(obs), dim=-1)
            chosen = logp.gather(1, acts[:, None]).squeeze(1)
            entropy = -(logp.exp() * logp).sum(dim=-1).mean()
            losses.append(-advantage * chosen.sum() - entropy_weight * entropy)
        optimizer.zero_grad()
        torch.stack(losses).mean().backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        value = float(np.mean(values))
        best = min(best, value)
        curve.append({"step": step, "value": value, "best": best})
    greedy = agent_controller(agent, greedy=True)
    used = np.zeros(len(actions))
    greedy_values = []
    for c in train:
        result, wrapper = run_controlled(c, policy, greedy, workers, objective, windows)
        used += wrapper.decisions_by_action
        greedy_values.append(result["J"])
    static = dict(actions[int(np.argmax(used))])
    share = {json_key(a): float(u / used.sum()) for a, u in zip(actions, used) if u > 0}
    static_objective = mean_objective([run_on(c, policy, static, workers, objective)
                                       for c in train])
    return LearnerResult(
        "rl", policy, static, curve, static_objective,
        time.perf_counter() - t0, agent=agent,
        details={"actions": actions, "decision_share_by_action": share,
                 "features": list(FEATURES), "windows_per_trace": windows,
                 "hidden": 32, "iterations": iterations, "lr": lr,
                 "entropy_weight": entropy_weight,
                 "greedy_train_objective": float(np.mean(greedy_values))},
    )


def json_key(weights: dict[str, float]) -> str:
    return ",".join(f"{k}={v:g}" for k, v in weights.items())


def load_agent(folder: str | Path) -> tuple[Any, dict[str, Any]]:
    """The saved RL agent of a weights folder and its card's ``agent`` section."""
    import torch

    from desched.weights import read_card

    card = read_card(folder)
    spec = card.get("agent")
    if not spec:
        raise DeschedError(f"{folder}: the card has no agent (learner {card.get('learner')!r})")
    agent = make_agent(len(spec["actions"]), hidden=int(spec["hidden"]))
    agent.load_state_dict(torch.load(Path(folder) / spec["file"], weights_only=True))
    return agent, spec


# ---- held-out judgement -----------------------------------------------------------------

Candidate = tuple[str, dict[str, Any], Controller | None]
"""(policy, params, controller or None): what is judged on the held-out cells."""


def judge(
    heldout: Sequence[Cell],
    candidates: dict[str, Candidate],
    workers: int,
    objective: Objective,
    windows: int = 20,
) -> dict[str, Any]:
    """Every candidate on every held-out cell, against today's scorer on the same cell.

    Returns ``cells`` (one record per candidate and cell) and ``by_workload``: per trace spec
    and candidate, ``J`` and the paired differences from today's scorer (bounded slowdown,
    Jain's index, max service lag) as mean with 95 % t-interval over seeds, and a verdict:
    ``beats`` when the interval of ``J - 1`` lies below 0, ``worse`` when above, else ``tie``.
    ``overall`` is the same over all held-out cells.
    """
    records = []
    for c in heldout:
        ref = c.reference
        for label, (policy, params, controller) in candidates.items():
            if controller is None:
                r = run_on(c, policy, params, workers, objective)
            else:
                r, _ = run_controlled(c, policy, controller, workers, objective, windows)  # type: ignore[arg-type]
            r["candidate"] = label
            r["d_bsld"] = r["mean_bounded_slowdown"] - ref["mean_bounded_slowdown"]
            r["d_bsld_pct"] = 100.0 * r["d_bsld"] / ref["mean_bounded_slowdown"]
            r["d_jain"] = r["jain_slowdown"] - ref["jain_slowdown"]
            r["d_max_lag_s"] = r["max_service_lag_s"] - ref["max_service_lag_s"]
            r["ref_bsld"] = ref["mean_bounded_slowdown"]
            r["ref_jain"] = ref["jain_slowdown"]
            records.append(r)

    def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
        j = mean_ci(r["J"] - 1.0 for r in rows)
        verdict = "tie"
        if j["n"] >= 2 and j["hi"] < 0:
            verdict = "beats"
        elif j["n"] >= 2 and j["lo"] > 0:
            verdict = "worse"
        return {
            "seeds": sorted(r["seed"] for r in rows),
            "J": mean_ci(r["J"] for r in rows),
            "J_minus_1": j,
            "ref_bsld": mean_ci(r["ref_bsld"] for r in rows),
            "bsld": mean_ci(r["mean_bounded_slowdown"] for r in rows),
            "d_bsld": mean_ci(r["d_bsld"] for r in rows),
            "d_bsld_pct": mean_ci(r["d_bsld_pct"] for r in rows),
            "ref_jain": mean_ci(r["ref_jain"] for r in rows),
            "d_jain": mean_ci(r["d_jain"] for r in rows),
            "d_max_lag_s": mean_ci(r["d_max_lag_s"] for r in rows),
            "verdict": verdict,
        }

    by_workload: dict[str, dict[str, Any]] = {}
    for spec in dict.fromkeys(c.spec for c in heldout):
        by_workload[spec] = {
            label: summarise([r for r in records if r["trace"] == spec and r["candidate"] == label])
            for label in candidates
        }
    overall = {label: summarise([r for r in records if r["candidate"] == label])
               for label in candidates}
    return {"cells": records, "by_workload": by_workload, "overall": overall}


# ---- the whole run ----------------------------------------------------------------------


class TuneSettings(BaseModel):
    """One tuning run: what to learn, on which traces, judged on which."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    train: list[str] = Field(description="training trace specs (desched.evaluate)")
    heldout: list[str] | None = Field(
        None, description="held-out trace specs; default: the training specs on other seeds")
    train_seeds: list[int] | None = Field(None, description="default: default_seeds")
    heldout_seeds: list[int] | None = Field(None, description="default: default_seeds")
    workers: int = Field(8, ge=1, description="workers simulated")
    policy: TunedPolicy = Field("ifs-memoryless", description="the policy whose weights to learn")
    learner: Learner = Field("optuna", description="optuna (TPE search) or rl (policy gradient)")
    trials: int = Field(40, ge=1, description="optuna trials, or rl iterations")
    seed: int = Field(0, ge=0, description="seed of the learner")
    windows: int = Field(20, ge=1, description="rl: decision windows per trace")
    objective: Objective = Field(default_factory=lambda: Objective(fairness_weight=5.0))

    def pairs(self, role: Literal["train", "heldout"]) -> list[tuple[str, int]]:
        specs = self.train if role == "train" else (self.heldout or self.train)
        given = self.train_seeds if role == "train" else self.heldout_seeds
        return [(s, seed) for s in specs
                for seed in (TraceSpec.parse(s).seeds or given or default_seeds(s, role))]


def split(settings: TuneSettings) -> tuple[list[Cell], list[Cell]]:
    """The training and held-out cells, checked disjoint."""
    train = build_cells(settings.pairs("train"), settings.workers)
    heldout = build_cells(settings.pairs("heldout"), settings.workers)
    check_disjoint(train, heldout)
    return train, heldout


def learn(settings: TuneSettings, train: Sequence[Cell]) -> LearnerResult:
    """Run the settings' learner on the training cells."""
    if settings.learner == "optuna":
        return tune_optuna(train, settings.policy, settings.workers, settings.trials,
                           settings.objective, settings.seed)
    return tune_rl(train, settings.policy, settings.workers, settings.trials,
                   settings.objective, settings.seed, settings.windows)


def candidates_of(learned: LearnerResult) -> dict[str, Candidate]:
    """What the held-out judgement compares with today's scorer: the learned static weights
    and, for the RL learner, the adaptive agent itself."""
    out: dict[str, Candidate] = {"learned": (learned.policy, dict(learned.weights), None)}
    if learned.policy == "ifs-counter":
        out["ifs-counter defaults"] = ("ifs-counter", {}, None)
    if learned.agent is not None:
        out["rl-adaptive"] = (learned.policy, {}, agent_controller(learned.agent, greedy=True))
    return out


def make_card(
    name: str,
    settings: TuneSettings,
    learned: LearnerResult,
    train: Sequence[Cell],
    heldout: Sequence[Cell],
    verdict: dict[str, Any],
    command: str | None = None,
) -> dict[str, Any]:
    """The weights card (``desched.weights``): weights, provenance, split, held-out verdict."""
    assert set(learned.weights) == set(WEIGHT_KEYS[learned.policy])
    card: dict[str, Any] = {
        "name": name,
        "policy": learned.policy,
        "weights": learned.weights,
        "learner": learned.learner,
        "objective": {"text": settings.objective.describe(),
                      **settings.objective.model_dump()},
        "reference": {"policy": REFERENCE_POLICY, "weights": REFERENCE_WEIGHTS},
        "workers": settings.workers,
        "settings": settings.model_dump(),
        "split": {
            "rule": "scenario seed = regenerated workload; file seed = disjoint time slice; "
                    "no held-out seed/slice/fingerprint is used in training",
            "train": [c.describe() for c in train],
            "heldout": [c.describe() for c in heldout],
        },
        "train_objective": learned.train_objective,
        "learning_curve": learned.curve,
        "learner_seconds": learned.seconds,
        "learner_details": learned.details,
        "heldout": {"by_workload": verdict["by_workload"], "overall": verdict["overall"]},
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": command,
    }
    if learned.agent is not None:
        card["agent"] = {"file": "agent.pt", **learned.details}
    return card


def verdict_markdown(card: dict[str, Any]) -> str:
    """The held-out verdict as a person reads it: one table per workload."""
    from desched.evaluate import fmt_ci

    w = ", ".join(f"{k}={v:.4g}" for k, v in card["weights"].items())
    lines = [
        f"# Weights `{card['name']}` ({card['learner']}, {card['policy']}): {w}",
        "",
        f"Objective: {card['objective']['text']}.",
        "",
        (f"Trained on {len(card['split']['train'])} traces, judged on "
         f"{len(card['split']['heldout'])} held-out traces never trained on; "
         f"{card['workers']} workers. Training objective {card['train_objective']:.4f}."),
        "",
        ("| held-out workload | candidate | J (today = 1) | Δ bsld % vs 0.1/0.9 | Δ Jain | "
         "Δ max lag s | verdict |"),
        "|---|---|---|---|---|---|---|",
    ]
    sections = {**card["heldout"]["by_workload"], "all held-out": card["heldout"]["overall"]}
    for workload, per in sections.items():
        for label, s in per.items():
            lines.append(f"| {workload} | {label} | {fmt_ci(s['J'])} | {fmt_ci(s['d_bsld_pct'])} "
                         f"| {fmt_ci(s['d_jain'])} | {fmt_ci(s['d_max_lag_s'])} "
                         f"| {s['verdict']} |")
    lines += ["", ("Mean ± half-width of the 95 % t-interval over held-out seeds; Δ is paired "
                   "(same trace) against ifs-memoryless 0.1/0.9.")]
    return "\n".join(lines) + "\n"


def draw_curve(ax: Any, curve: Sequence[dict[str, Any]], xlabel: str,
               legend_fontsize: float = 8) -> None:
    """A learning curve on a matplotlib axis: ``J`` per step (a step above
    ``max(1.25, best + 0.1)`` is drawn at the top edge and counted in the legend), best so
    far, and today's ``J = 1``."""
    steps = [p["step"] for p in curve]
    values = np.array([p["value"] for p in curve])
    top = min(float(values.max()), max(1.25, float(values.min()) + 0.1))
    clipped = int((values > top).sum())
    label = "objective of the step" + (f" ({clipped} above the axis)" if clipped else "")
    ax.plot(steps, np.minimum(values, top), ".", color="0.5", label=label)
    ax.set_ylim(min(float(values.min()), 1.0) - 0.01, top + 0.01)
    ax.plot(steps, [p["best"] for p in curve], "-", color="C0", label="best so far")
    ax.axhline(1.0, color="C3", lw=1, ls="--", label="today's 0.1/0.9")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("J on training traces")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=legend_fontsize)


def plot_curve(curve: Sequence[dict[str, Any]], title: str, xlabel: str, out: str | Path) -> Path:
    """The learning curve (``draw_curve``) as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.2))
    draw_curve(ax, curve, xlabel)
    ax.set_title(title, fontsize=10, loc="left")
    fig.tight_layout()
    out = Path(out)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def step_label(learner: str) -> str:
    """What one step of ``learner``'s curve is: an Optuna trial or an RL iteration."""
    return "trial" if learner == "optuna" else "iteration"


def save(
    folder: str | Path, card: dict[str, Any], learned: LearnerResult
) -> dict[str, Path]:
    """Write ``card.json``, ``card.md``, ``learning-curve.png`` (and ``agent.pt``)."""
    from desched.weights import write_card

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    if learned.agent is not None:
        import torch

        paths["agent"] = out / "agent.pt"
        torch.save(learned.agent.state_dict(), paths["agent"])
    paths["card"] = write_card(out, card)
    paths["markdown"] = out / "card.md"
    paths["markdown"].write_text(verdict_markdown(card))
    paths["curve"] = plot_curve(learned.curve, f"{card['name']}: {card['learner']} learning "
                                f"curve", step_label(learned.learner), out / "learning-curve.png")
    return paths


def tune(
    settings: TuneSettings, out: str | Path, command: str | None = None
) -> dict[str, Any]:
    """Split, learn, judge on the held-out traces, save the weights folder; returns the card."""
    train, heldout = split(settings)
    learned = learn(settings, train)
    verdict = judge(heldout, candidates_of(learned), settings.workers, settings.objective,
                    settings.windows)
    card = make_card(Path(out).name, settings, learned, train, heldout, verdict, command)
    save(out, card, learned)
    return card
