"""The held-back logs and seed (desched.bench.holdout) and the tuning paths that must never
see them (the judge's hook, desched.bench.lolo)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest

from desched.bench import holdout
from desched.bench import judge as jd
from desched.bench.judge_cases import Case, default_logs, log_name
from desched.bench.lolo import LoloTuner, grid_of


def test_the_held_back_logs_and_seed_are_what_the_stated_rule_gives() -> None:
    bundled = [log_name(p) for p in default_logs()]
    assert len(bundled) == 6
    assert holdout.held_back_by_rule(bundled) == holdout.HELD_BACK_LOGS
    assert set(holdout.HELD_BACK_LOGS) <= set(bundled)
    assert holdout.scenario_seed_by_rule() == holdout.HELD_BACK_SCENARIO_SEED
    assert holdout.HELD_BACK_SCENARIO_SEED not in (1, 2)  # the judge's test and model seeds
    assert len(holdout.development(bundled)) == 4


def tiny_case(name: str) -> Case:
    frame = pl.DataFrame({
        "task_id": [f"t{k}" for k in range(40)], "tenant": ["a", "b"] * 20,
        "task_type": ["x"] * 40, "submit_s": [float(3 * k) for k in range(40)],
        "duration_s": [float(1 + (k * 7) % 11) for k in range(40)],
        "predicted_s": [float(1 + (k * 5) % 11) for k in range(40)]})
    return Case(name=name, kind="log", source="test", frame=frame, workers=1,
                mean_train_duration_s=5.0)


def test_the_judge_never_hands_a_held_back_log_to_a_tuner() -> None:
    held = holdout.HELD_BACK_LOGS
    cases = [tiny_case("dev1"), tiny_case(held[0]), tiny_case("dev2"), tiny_case(held[1])]
    seen: list[list[str]] = []

    def tune(policy: str, training: list[Case]) -> dict[str, float]:
        seen.append([c.name for c in training])
        return {}

    result = jd.run_judge(cases, ["sjf-predicted"], tune=tune)
    assert seen == [["dev2"], ["dev1", "dev2"], ["dev1"], ["dev1", "dev2"]]
    assert result.settings["tuning_logs"] == ["dev1", "dev2"]
    assert len(result.frontiers) == 4


def test_the_final_verdict_tunes_on_the_development_logs_only() -> None:
    held = [tiny_case(n) for n in holdout.HELD_BACK_LOGS]
    dev = [tiny_case("dev1"), tiny_case("dev2")]
    seen: list[list[str]] = []

    def tune(policy: str, training: list[Case]) -> dict[str, float]:
        seen.append([c.name for c in training])
        return {}

    jd.run_judge(held, ["sjf-predicted"], tune=tune, training_logs=[*dev, *held])
    assert seen == [["dev1", "dev2"], ["dev1", "dev2"]]


def test_the_lolo_tuner_drops_a_held_back_log_and_picks_a_grid_point() -> None:
    tuner = LoloTuner()
    training = [tiny_case("dev1"), tiny_case(holdout.HELD_BACK_LOGS[0])]
    params = tuner("guarded-sjf", training)
    assert params in grid_of("guarded-sjf")
    assert list(tuner.choices) == [("guarded-sjf", ("dev1",))]
    assert tuner("guarded-sjf", [tiny_case(holdout.HELD_BACK_LOGS[1])]) == {}
    assert grid_of("sjf-predicted") == [{}]


def test_the_lolo_tuner_picks_the_point_the_rule_ranks_first() -> None:
    tuner = LoloTuner()
    logs = [tiny_case("dev1"), tiny_case("dev2")]
    chosen = tuner("guarded-sjf", logs)
    scores = {str(p): tuner.score("guarded-sjf", p, logs) for p in grid_of("guarded-sjf")}
    best = max(scores.values())
    assert scores[str(chosen)] == best
    first = next(p for p in grid_of("guarded-sjf") if scores[str(p)] == best)
    assert chosen == first  # ties go to grid order


def test_a_held_back_run_on_given_logs_tunes_on_the_development_seeds_scenarios(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # With --logs and --set held-back, the tuner's no-harm filter ran on the held-back seed's
    # scenarios, the very ones then judged (a QA pass).
    from click.testing import CliRunner

    from desched.bench import lolo, pooled_judge
    from desched.cli import cli

    def prepare(logs: list[Any], scenarios: list[Any], *, scenario_seed: int = 1,
                **_: Any) -> list[Case]:
        made = [tiny_case(f"log{k}") for k in range(len(logs))]
        for name, _tasks in scenarios:
            case = tiny_case(f"{name}-seed{scenario_seed}")
            case.kind = "scenario"
            made.append(case)
        return made

    tuned_on: list[list[str]] = []

    class Tuner:
        __name__ = "lolo"

        def __init__(self, scenarios: Any = (), thresholds: Any = None) -> None:
            tuned_on.append([c.name for c in scenarios])

        def __call__(self, policy: str, training: Any) -> dict[str, float]:
            return {}

    monkeypatch.setattr(pooled_judge, "prepare_cases", prepare)
    monkeypatch.setattr(lolo, "LoloTuner", Tuner)
    logs = [tmp_path / "a.swf", tmp_path / "b.swf"]
    for log in logs:
        log.write_text("; placeholder\n")
    result = CliRunner().invoke(cli, [
        "judge", "--set", "held-back", "--logs", ",".join(map(str, logs)), "--tune", "lolo",
        "--policies", "sjf-predicted", "--scenarios", "steady", "--jobs", "1",
        "--out", str(tmp_path / "out")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    seed = holdout.HELD_BACK_SCENARIO_SEED
    assert tuned_on == [["steady-seed1"]]
    assert f"steady-seed{seed}" in (tmp_path / "out" / "judge.md").read_text()
