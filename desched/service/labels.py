"""Labels for a policy that ranks on predictions: every task it holds needs a finite
``predicted_s`` in the scheduler's task table.

``make_policy`` refuses a table with a NaN ``predicted_s``, and a NaN that reached a running
policy would poison its ranking (Boost's γ estimate is solved from a window of labels; every
comparison with NaN is false) and its saved state (JSON has no NaN). Two kinds of task lack
one:

- tasks stored without a prediction because no duration model was loaded at their submit:
  where a model is loaded when such a policy is installed (a restart, ``desched policy
  set``), ``label_stored`` predicts each from its stored features;
- tasks the loaded model cannot label (a prediction that is not a positive number):
  ``label_typical`` ranks each as a typical task, the median ``predicted_s`` of the live
  tasks that have one (1 s where none has), without quantiles.

Both change the scheduler's task table only: the database keeps what was known at submit
(``predicted_s`` unknown), so ``GET /v1/tasks/{id}`` shows it unknown. Each is counted
(``desched_tasks_labelled_late_total``, ``desched_tasks_labelled_typical_total``) and logged.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Collection, Mapping

from desched.errors import DeschedError
from desched.policies import get_policy
from desched.policies.base import Policy
from desched.service.policy_host import PolicySpec
from desched.service.predictions import Predictions
from desched.service.records import LiveTask
from desched.service.telemetry import Counters
from desched.trace import TaskTable

logger = logging.getLogger("desched.service")


def recorded_name(config: str | None) -> str | None:
    """The policy a config row records, or None (no row, or one that cannot be read: the
    switch refuses it and says why)."""
    try:
        return PolicySpec.recorded(config).name if config is not None else None
    except DeschedError:
        return None


def label_stored(predictions: Predictions, tasks: TaskTable, live: Mapping[int, LiveTask],
                 counters: Counters, name: str | None) -> None:
    """Where policy ``name`` ranks on predictions and a duration model is loaded, predict
    every live task stored without a prediction from its stored features (submitted at its
    ``submit_s``); a task the model cannot label either goes to ``label_typical``."""
    try:
        reads = get_policy(name).reads if name is not None else frozenset()
    except DeschedError:
        return  # an unknown policy: the install says so
    if predictions.duration is None or "predicted_s" not in reads:
        return
    labelled, unlabelled = 0, []
    for i, task in live.items():
        if math.isnan(tasks.predicted_s[i]):
            d = predictions.durations(task.tenant, task, task.submit_s)  # type: ignore[arg-type]
            tasks.predicted_s[i], tasks.predicted_p50_s[i], tasks.predicted_p90_s[i] = d
            if math.isnan(d.predicted_s):
                unlabelled.append(i)
            else:
                labelled += 1
    if labelled:
        logger.warning("predicted %d live task(s) stored without a prediction (submitted "
                       "while no duration model was loaded), for %s", labelled, name)
        counters.tasks_labelled_late += labelled
    _typical(tasks, live, unlabelled, counters)


def label_typical(policy: Policy, tasks: TaskTable, live: Mapping[int, LiveTask],
                  positions: Collection[int], counters: Counters) -> None:
    """Where ``policy`` ranks on predictions, rank each of ``positions`` (newly submitted)
    that the model could not label as a typical task (module docstring)."""
    if "predicted_s" in policy.reads:
        _typical(tasks, live, [i for i in positions if math.isnan(tasks.predicted_s[i])],
                 counters)


def _typical(tasks: TaskTable, live: Mapping[int, LiveTask], positions: list[int],
             counters: Counters) -> None:
    if not positions:
        return
    known = [tasks.predicted_s[i] for i in live if not math.isnan(tasks.predicted_s[i])]
    typical = statistics.median(known) if known else 1.0
    for i in positions:
        tasks.predicted_s[i] = typical
        tasks.predicted_p50_s[i] = tasks.predicted_p90_s[i] = math.nan
    counters.tasks_labelled_typical += len(positions)
    logger.warning("%d task(s) the duration model could not label ranked as typical (%.3g s, "
                   "the median prediction of the live tasks)", len(positions), typical)
