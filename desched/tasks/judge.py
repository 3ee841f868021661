"""Prefect tasks of the ``judge`` flow: thin I/O around ``desched.bench.judge``.

A workload's case (its test part, rebased and predicted by a model trained on the first
70 %) is defined by its inputs: for a log, the log file's bytes (SHA-256), ``max_tasks``
and this task's source; for a scenario, its name and size. So ``prepare_log_case`` and
``prepare_scenario_case`` are cached on exactly that (``FILE_INPUTS + TASK_SOURCE``, Prefect's
result store) instead of the judge's own cache folder: a second judge of the same logs
prepares nothing again, and an edited log or task is prepared afresh.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from prefect import get_run_logger, task
from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact
from prefect.cache_policies import INPUTS, NONE, TASK_SOURCE, CacheKeyFnPolicy
from prefect.context import TaskRunContext

from desched.bench import judge as jd
from desched.bench.judge import JudgeResult
from desched.bench.judge_cases import Case, default_logs, prepare_log, prepare_scenario

MAX_MARKDOWN_BYTES = 200_000
"""A markdown artifact's size at most: Prefect publishes each as an event, and its server
refuses events over about 1.5 MB."""


def file_sha256(path: str | Path) -> str:
    """The SHA-256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _log_key(ctx: TaskRunContext, inputs: dict[str, Any]) -> str:
    return f"{file_sha256(inputs['path'])}-{inputs.get('max_tasks')}"


FILE_INPUTS = CacheKeyFnPolicy(cache_key_fn=_log_key)
"""A log case's cache key: the log file's content and ``max_tasks`` (not its path)."""


@task(name="bundled-logs", cache_policy=NONE)
def bundled_logs() -> list[str]:
    """The bundled real logs (``data/samples/traces/*.swf.gz``)."""
    return [str(p) for p in default_logs()]


@task(name="prepare-log-case", task_run_name="prepare-{path}",
      cache_policy=FILE_INPUTS + TASK_SOURCE)
def prepare_log_case(path: str, max_tasks: int | None) -> Case:
    """One real log's case: import, split 70/30 by submit time, train the duration model on
    the first part, predict and rescale the rest (``desched.bench.judge_cases``)."""
    return prepare_log(path, cache_dir=None, max_tasks=max_tasks,
                       progress=get_run_logger().info)


@task(name="prepare-scenario-case", task_run_name="prepare-{name}",
      cache_policy=INPUTS + TASK_SOURCE)
def prepare_scenario_case(name: str, tasks: int) -> Case:
    """One DES scenario's case for the no-harm check."""
    return prepare_scenario(name, cache_dir=None, tasks=tasks, progress=get_run_logger().info)


@task(name="judge-cases", cache_policy=NONE)
def judge_cases(cases: list[Case], policies: list[str] | None) -> JudgeResult:
    """Every candidate (and today's scorer and the oracle) on every case; the verdicts."""
    return jd.run_judge(cases, policies, progress=get_run_logger().info)


@task(name="write-judge", cache_policy=NONE)
def write_judge(result: JudgeResult, out: str) -> tuple[str, str]:
    """``judge.json`` and ``judge.md`` in ``out``; published as a link artifact to each file,
    the markdown (when under ``MAX_MARKDOWN_BYTES``) and a table of the verdicts."""
    json_path, md_path = jd.write_judge(result, Path(out))
    for path, what in ((md_path, "judge.md"), (json_path, "judge.json")):
        create_link_artifact(key=f"judge-{path.suffix[1:]}", link=path.resolve().as_uri(),
                             link_text=str(path), description=f"desched judge: {what}")
    text = md_path.read_text(encoding="utf-8")
    if len(text.encode()) > MAX_MARKDOWN_BYTES:
        text = (f"judge.md is {len(text.encode()):,} bytes, over what an artifact should "
                f"hold: read it at {md_path.resolve()}")
    create_markdown_artifact(key="judge", markdown=text,
                             description=f"recommendation: {result.recommendation or 'none'}")
    create_table_artifact(key="judge-verdicts", table=[
        {"workload": v.workload, "kind": v.kind, "policy": v.policy,
         "criteria passed": f"{v.passed} of {len(v.criteria)}",
         "mean response s": round(v.outcome.mean_response_s, 2),
         "today's mean response s": round(v.today.mean_response_s, 2)}
        for v in result.verdicts], description="every policy on every workload")
    return str(json_path), str(md_path)
