"""The REINFORCE learner of ``desched.bench.tuning``: a policy-gradient agent that sets a
learnable policy's parameters once per window of simulated time.

A small MLP in torch reads queue features at the first decision of every window and picks
one parameter setting from the policy's action grid (the product of its search space's
grids, ``desched.policies.learnable``); an episode is one simulated trace and its reward is
``-J``. The simulator does not know: ``WindowControlled`` is a policy that wraps the learnable
policy and swaps its parameters between windows. The loadable *static* weights are the grid
setting the greedy agent used for most decisions on the training traces; the adaptive agent
itself is saved as ``agent.pt`` and judged on the held-out traces too.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from desched.bench.learning import Cell, LearnerResult, Objective, RunScore, mean_objective, run_on
from desched.bench.weights import CurvePoint
from desched.policies import learnable_params
from desched.policies.base import Policy
from desched.structures.tenant_queues import TenantQueues

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


def action_grid(policy: str) -> list[dict[str, float]]:
    """The parameter settings the agent chooses among: the product of the grids of the
    policy's search space (today's weights are one of them for the IFS scorers)."""
    return learnable_params(policy).search.grid()


Controller = Callable[[np.ndarray], int]


class WindowControlled(Policy):
    """Wraps a learnable policy; at the first decision at or after each window boundary it
    reads queue features (``FEATURES``), asks ``controller`` for an action and installs that
    action's parameters, then decides exactly as the wrapped policy.

    The simulator sees an ordinary policy: the wrapper forwards ``push``, ``pop`` and
    ``complete`` and keeps counters and a per-tenant index of the queued tasks by submission
    time, for the features, so it wraps any policy. The index is the wrapped policy's own
    ``queues`` where it declares them such an index (``submit_ordered_queues``: the IFS
    scorers), else one of its own. Cost per decision: the wrapped policy's, plus O(log m)
    for an index of its own, and O(K) numpy work and one controller call per window.
    """

    name = "adaptive"
    summary = "a learnable policy whose parameters a controller sets once per window"

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
        # the same arrays, slot for slot, whichever keeps them (Policy.submit_ordered_queues)
        self.shares_queues = bool(inner.submit_ordered_queues)
        if self.shares_queues:
            self.queues: TenantQueues = inner.queues  # type: ignore[attr-defined]
        else:
            s = inner.tasks.submit_s
            self.queues = TenantQueues(inner.tasks, lambda i: (s[i],))
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
        if not self.shares_queues:
            self.queues.push(i)
        self.inner.push(i, now)

    def complete(self, i: int, now: float, duration_s: float) -> None:
        self.running -= 1
        self.done += 1
        self.done_s += duration_s
        self.inner.complete(i, now, duration_s)

    def observe(self, now: float) -> np.ndarray:
        """``FEATURES`` at ``now`` (the queue is not empty)."""
        q = self.queues
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
        if not self.shares_queues:
            self.queues.remove(i)
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
    policy: str,
    controller: Controller,
    workers: int,
    objective: Objective,
    windows: int,
) -> tuple[RunScore, WindowControlled]:
    """Simulate ``cell`` under ``controller``; the result and the wrapper (its trajectory)."""
    actions = action_grid(policy)
    t0, window_s = window_of(cell, windows)
    holder: list[WindowControlled] = []

    def wrap(inner: Policy) -> Policy:
        holder.append(WindowControlled(inner, controller, actions, workers, window_s, t0))
        return holder[0]

    result = run_on(cell, policy, {}, workers, objective, wrap=wrap)
    return result, holder[0]


def json_key(weights: dict[str, float]) -> str:
    return ",".join(f"{k}={v:g}" for k, v in weights.items())


def tune_rl(
    train: Sequence[Cell],
    policy: str,
    workers: int,
    iterations: int,
    objective: Objective,
    seed: int = 0,
    windows: int = 20,
    lr: float = 0.02,
    entropy_weight: float = 0.01,
    progress: Callable[[int], None] | None = None,
) -> LearnerResult:
    """REINFORCE with a per-cell baseline: every iteration runs one sampled episode per
    training cell, reward ``-J``, advantage ``-J - b_cell`` (``b_cell`` an exponential moving
    average, starting at the reference's ``-1``), one Adam step on
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
    curve: list[CurvePoint] = []
    best = math.inf
    for step in range(iterations):
        controller = agent_controller(agent, greedy=False, rng=rng)
        losses = []
        values = []
        for c in train:
            result, wrapper = run_controlled(c, policy, controller, workers, objective, windows)
            reward = -result.J
            values.append(result.J)
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
        curve.append(CurvePoint(step=step, value=value, best=best))
        if progress is not None:
            progress(step + 1)
    greedy = agent_controller(agent, greedy=True)
    used = np.zeros(len(actions))
    greedy_values = []
    for c in train:
        result, wrapper = run_controlled(c, policy, greedy, workers, objective, windows)
        used += wrapper.decisions_by_action
        greedy_values.append(result.J)
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
