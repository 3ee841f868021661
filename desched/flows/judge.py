"""Flow ``judge``: which policy to deploy (``desched judge``'s protocol), as a deployment.

Composition only: each workload's case is a cached task of ``desched/tasks/judge.py`` (its
key: the log's content, or the scenario's name and size), then one task judges every
candidate on every case and one writes and publishes ``judge.json`` and ``judge.md``.
Every step logs through the run logger, so the Prefect UI shows where it is.
"""

from __future__ import annotations

from prefect import flow, get_run_logger

from desched.records import Record
from desched.tasks import judge as t

SCENARIO_TASKS = 20_000
"""Tasks of a no-harm scenario at most (``desched.bench.judge_cases.SCENARIO_TASKS``)."""


class JudgeRun(Record):
    """Where a judge run wrote ``judge.json`` and ``judge.md``, and the policy it recommends
    (None: none beats today's scorer)."""

    judge_json: str
    judge_md: str
    recommendation: str | None


@flow(name="judge")
def judge(
    logs: list[str] | None = None,
    scenarios: list[str] | None = None,
    policies: list[str] | None = None,
    max_tasks: int | None = None,
    out: str = "data/judge",
) -> JudgeRun:
    """Judge the candidates (default: every policy that ranks on ``predicted_s``) against
    today's scorer on ``logs`` (default: the six bundled SWF logs) and the no-harm
    ``scenarios`` (default: steady and flood); ``max_tasks`` keeps the first N tasks of each
    (a quick look, not the protocol). Writes ``out/judge.json`` and ``out/judge.md``."""
    log = get_run_logger()
    paths = logs if logs is not None else t.bundled_logs()
    names = scenarios if scenarios is not None else ["steady", "flood"]
    size = SCENARIO_TASKS if max_tasks is None else min(max_tasks, SCENARIO_TASKS)
    log.info("judging on %d logs and %d scenarios (max_tasks %s)", len(paths), len(names),
             max_tasks)
    cases = [t.prepare_log_case(p, max_tasks) for p in paths]
    cases += [t.prepare_scenario_case(s, size) for s in names]
    result = t.judge_cases(cases, policies)
    json_path, md_path = t.write_judge(result, out)
    log.info("recommendation: %s (%s); %s", result.recommendation or "none",
             result.recommendation_reason, md_path)
    return JudgeRun(judge_json=json_path, judge_md=md_path,
                    recommendation=result.recommendation)
