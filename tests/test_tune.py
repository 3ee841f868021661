"""Weight tuning: weights cards loaded by the policies, the held-out split, both learners."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from desched.bench.learning import Objective, build_cells, check_disjoint, mean_objective, run_on
from desched.bench.rl import WindowControlled, action_grid, tune_rl
from desched.bench.tuning import TuneSettings, split, tune_optuna
from desched.bench.weights import read_card
from desched.cli import cli
from desched.errors import DeschedError
from desched.policies import make_policy, parse_params
from desched.simulator import simulate
from desched.trace import TaskTable, write_trace
from desched.workloads import generate

TINY = "flood?tasks=200&tenants=4"


def decisions(tasks: TaskTable, name: str, params: dict[str, str], naive: bool = False) -> list[int]:
    result = simulate(tasks, make_policy(name, tasks, params, naive=naive), workers=2)
    return list(result.decisions.task)


@pytest.fixture(scope="module")
def flood_tasks() -> TaskTable:
    return TaskTable.from_frame(generate("flood", tasks=300, tenants=4, workers=2, seed=1))


def card(folder: Path, policy: str, weights: dict[str, float]) -> Path:
    """A hand-written weights card: a policy and its weights, nothing else."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "card.json").write_text(json.dumps(
        {"name": folder.name, "policy": policy, "weights": weights}))
    return folder


def test_learned_weights_are_loaded_and_used_by_the_policy(
    tmp_path: Path, flood_tasks: TaskTable
) -> None:
    folder = card(tmp_path / "backlog-first", "ifs-memoryless",
                  {"w_backlog": 0.8, "w_wait": 0.2})
    loaded = decisions(flood_tasks, "ifs-memoryless", {"weights": str(folder)})
    explicit = decisions(flood_tasks, "ifs-memoryless", {"w_backlog": "0.8", "w_wait": "0.2"})
    default = decisions(flood_tasks, "ifs-memoryless", {})
    assert loaded == explicit
    assert loaded != default
    assert decisions(flood_tasks, "ifs-memoryless", {"weights": str(folder)}, naive=True) == loaded


def test_an_ifs_counter_card_sets_the_service_weight_and_half_life_too(
    tmp_path: Path, flood_tasks: TaskTable
) -> None:
    w = {"w_backlog": 0.3, "w_wait": 0.7, "w_service": 0.5, "half_life_s": 120.0}
    folder = card(tmp_path / "counter", "ifs-counter", w)
    params = parse_params("ifs-counter", {"weights": str(folder / "card.json")})
    assert params.model_dump() == {**w, "weights": str(folder / "card.json")}
    explicit = {k: str(v) for k, v in w.items()}
    assert (decisions(flood_tasks, "ifs-counter", {"weights": str(folder)})
            == decisions(flood_tasks, "ifs-counter", explicit)
            != decisions(flood_tasks, "ifs-counter", {}))


def test_a_card_for_one_policy_is_refused_by_the_other(tmp_path: Path) -> None:
    folder = card(tmp_path / "m", "ifs-memoryless", {"w_backlog": 0.2, "w_wait": 0.8})
    with pytest.raises(DeschedError, match="learned for 'ifs-memoryless'"):
        parse_params("ifs-counter", {"weights": str(folder)})


def test_explicit_weights_that_contradict_the_card_are_refused_and_equal_ones_accepted(
    tmp_path: Path,
) -> None:
    folder = card(tmp_path / "m", "ifs-memoryless", {"w_backlog": 0.2, "w_wait": 0.8})
    with pytest.raises(DeschedError, match="contradicts weights="):
        parse_params("ifs-memoryless", {"weights": str(folder), "w_wait": "0.5"})
    params = parse_params("ifs-memoryless", {"weights": str(folder)})
    again = type(params)(**params.model_dump())  # a dumped model rebuilds itself
    assert again == params


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no weights card"),
        ("{not json", "not a readable weights card"),
        ('{"policy": "fifo", "weights": {}}', "'policy' must be one of"),
        ('{"policy": "ifs-memoryless", "weights": {"w_wait": 1}}', "must hold exactly"),
        ('{"policy": "ifs-memoryless", "weights": {"w_wait": 1, "w_backlog": -1}}', ">= 0"),
        # an integer past a double's range had raised OverflowError (a QA pass)
        ('{"policy": "ifs-memoryless", "weights": {"w_wait": 1, "w_backlog": 1%s}}' % ("0" * 400),
         "got 1000000000000000000000000000000000000..."),
    ],
)
def test_a_bad_weights_path_or_card_is_a_one_line_error_naming_the_file(
    tmp_path: Path, content: str | None, message: str
) -> None:
    folder = tmp_path / "w"
    if content is not None:
        folder.mkdir()
        (folder / "card.json").write_text(content)
    trace = write_trace(generate("steady", tasks=30, tenants=3, workers=2), tmp_path / "t.parquet")
    result = CliRunner().invoke(cli, [
        "simulate", "--trace", str(trace), "--policy", f"ifs-memoryless?weights={folder}",
        "--workers", "2", "--out", str(tmp_path / "run"),
    ])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and str(folder / "card.json") in lines[0] and message in lines[0]


def test_tune_refuses_an_infinite_fairness_weight_before_any_trial(tmp_path: Path) -> None:
    # inf had run the trials, crashed drawing the curve and left a card that loaded (QA)
    result = CliRunner().invoke(cli, [
        "tune", "--trace", "steady?tasks=300", "--workers", "4", "--trials", "2",
        "--fairness-weight", "inf", "--out", str(tmp_path / "w")])
    assert result.exit_code == 2
    assert "fairness_weight: Input should be a finite number" in result.output
    assert not (tmp_path / "w" / "card.json").exists()


def test_tune_refuses_a_policy_the_traces_cannot_feed_before_any_trial(tmp_path: Path) -> None:
    # it ran a trial first, and Optuna printed its traceback above the one-line error (QA)
    result = CliRunner().invoke(cli, [
        "tune", "--trace", "flood?tasks=500", "--workers", "4", "--trials", "2", "--policy",
        "guarded-sjf", "--out", str(tmp_path / "w")])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.output.strip().splitlines() == [(
        "error: policy 'guarded-sjf' ranks on 'predicted_s', which the trace lacks or has NaN "
        "in (run `desched predict` first)")]


def test_a_spec_named_twice_runs_once_so_it_cannot_narrow_the_intervals(tmp_path: Path) -> None:
    # fifo,fifo counted each seed twice: n 4 for 2 seeds, the interval 0.557 against 3.853
    outs = {}
    for name, policies in (("once", "fifo"), ("twice", "fifo,fifo")):
        result = CliRunner().invoke(cli, [
            "evaluate", "--traces", "steady?tasks=300", "--policies", policies, "--seeds",
            "0-1", "--workers", "4", "--out", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
        outs[name] = pl.read_parquet(tmp_path / name / "table.parquet")
    assert "note: --policies names fifo more than once; each runs once" in result.stderr
    assert outs["twice"].equals(outs["once"])


def test_a_held_out_trace_that_was_trained_on_is_refused(tmp_path: Path) -> None:
    flood = build_cells([(TINY, 0)], workers=2)
    with pytest.raises(DeschedError, match="overlaps training"):
        check_disjoint(flood, build_cells([(TINY, 0)], workers=2))
    # every scenario of one seed shares its documents: steady seed 0 is not held out from flood 0
    with pytest.raises(DeschedError, match="overlaps training"):
        check_disjoint(flood, build_cells([("steady?tasks=200&tenants=4", 0)], workers=2))
    path = write_trace(generate("steady", tasks=120, tenants=4, workers=2), tmp_path / "t.parquet")
    by_40 = build_cells([(f"{path}?slice_tasks=40", 1)], workers=2)  # rows 40..79
    with pytest.raises(DeschedError, match="overlaps training"):
        check_disjoint(by_40, build_cells([(f"{path}?slice_tasks=60", 1)], workers=2))
    check_disjoint(by_40, build_cells([(f"{path}?slice_tasks=40", 2)], workers=2))


def test_a_window_controller_that_always_picks_one_setting_decides_as_that_setting(
    flood_tasks: TaskTable,
) -> None:
    actions = action_grid("ifs-memoryless")
    pick = next(i for i, a in enumerate(actions) if a["w_backlog"] == 0.5)
    inner = make_policy("ifs-memoryless", flood_tasks, {})
    wrapped = WindowControlled(inner, lambda obs: pick, actions, workers=2, window_s=50.0)
    controlled = list(simulate(flood_tasks, wrapped, 2).decisions.task)
    assert controlled == decisions(flood_tasks, "ifs-memoryless",
                                   {"w_backlog": "0.5", "w_wait": "0.5"})
    assert len(wrapped.trajectory) > 2
    assert all(obs.shape == (7,) and np.isfinite(obs).all() for obs, _ in wrapped.trajectory)


def test_a_window_controller_changes_the_weights_between_windows(flood_tasks: TaskTable) -> None:
    actions = action_grid("ifs-memoryless")
    seen: list[int] = []

    def alternate(obs: np.ndarray) -> int:
        seen.append(len(seen) % 2 * (len(actions) - 1))
        return seen[-1]

    inner = make_policy("ifs-memoryless", flood_tasks, {})
    wrapped = WindowControlled(inner, alternate, actions, workers=2, window_s=50.0)
    simulate(flood_tasks, wrapped, 2)
    assert wrapped.decisions_by_action[0] > 0 and wrapped.decisions_by_action[-1] > 0


@pytest.mark.parametrize("policy", ["ifs-memoryless", "ifs-counter"])
def test_a_window_controller_on_the_policys_own_queues_sees_what_its_own_index_sees(
    flood_tasks: TaskTable, policy: str,
) -> None:
    # The wrapper reads the IFS scorers' queues instead of keeping an index beside them: the
    # features (bit for bit), the actions and the decisions are those of the index of its own.
    actions = action_grid(policy)
    runs = []
    for shared in (True, False):
        inner = make_policy(policy, flood_tasks, {})
        if not shared:
            inner.submit_ordered_queues = False  # type: ignore[misc]
        picks = iter(range(10_000))
        wrapped = WindowControlled(inner, lambda obs, picks=picks: next(picks) * 7 % len(actions),
                                   actions, workers=2, window_s=20.0)
        assert wrapped.shares_queues is shared
        runs.append((list(simulate(flood_tasks, wrapped, 2).decisions.task),
                     wrapped.trajectory))
    (shared_tasks, shared_path), (own_tasks, own_path) = runs
    assert shared_tasks == own_tasks
    assert len(shared_path) == len(own_path) > 5
    for (a, act_a), (b, act_b) in zip(shared_path, own_path, strict=True):
        assert act_a == act_b
        assert a.tobytes() == b.tobytes()


def test_optuna_starts_from_todays_weights_so_it_never_reports_worse_on_training() -> None:
    train = build_cells([(TINY, 0), (TINY, 1)], workers=2)
    learned = tune_optuna(train, "ifs-memoryless", 2, trials=4, objective=Objective())
    assert learned.curve[0].params()["w_backlog"] == pytest.approx(0.1)
    assert learned.curve[0].value == pytest.approx(1.0)
    assert learned.train_objective <= 1.0
    assert [p.step for p in learned.curve] == [0, 1, 2, 3]
    assert learned.weights["w_backlog"] + learned.weights["w_wait"] == pytest.approx(1.0)


def test_the_rl_agent_learns_a_per_window_choice_and_a_static_setting_from_the_grid() -> None:
    train = build_cells([(TINY, 0)], workers=2)
    learned = tune_rl(train, "ifs-memoryless", 2, iterations=2, objective=Objective(), windows=5)
    assert len(learned.curve) == 2
    assert learned.weights in action_grid("ifs-memoryless")
    assert sum(learned.details["decision_share_by_action"].values()) == pytest.approx(1.0)
    assert learned.agent is not None
    # the training objective reported with the static weights is theirs, not the agent's
    static = mean_objective([run_on(c, "ifs-memoryless", learned.weights, 2, Objective())
                             for c in train])
    assert learned.train_objective == pytest.approx(static)


def test_the_tune_flow_writes_a_card_judged_only_on_traces_disjoint_from_training(
    prefect_harness: None, tmp_path: Path
) -> None:
    from desched.flows.tune import tune_weights

    out = tmp_path / "weights" / "tiny"
    result = tune_weights(train=[TINY], out=str(out), train_seeds=[0, 1],
                          heldout_seeds=[10, 11, 12], workers=2, trials=3, learner="optuna")
    saved = read_card(out)
    train_seeds = {c.seed for c in saved.split.train}
    heldout_seeds = {c.seed for c in saved.split.heldout}
    assert train_seeds == {0, 1} and heldout_seeds == {10, 11, 12}
    assert train_seeds.isdisjoint(heldout_seeds)
    prints = {c.fingerprint for c in saved.split.train}
    assert prints.isdisjoint(c.fingerprint for c in saved.split.heldout)
    assert saved.heldout.by_workload[TINY]["learned"].J.n == 3
    assert result.weights == saved.weights
    assert (out / "learning-curve.png").stat().st_size > 0 and (out / "card.md").is_file()
    parse_params("ifs-memoryless", {"weights": str(out)})  # loadable as written


def test_the_tune_command_trains_on_a_file_and_judges_on_its_later_slices(tmp_path: Path) -> None:
    trace = write_trace(generate("flood", tasks=400, tenants=4, workers=2, seed=5),
                        tmp_path / "train.parquet")
    out = tmp_path / "weights" / "cli"
    result = CliRunner().invoke(cli, [
        "tune", "--trace", f"{trace}?slice_tasks=50", "--workers", "2", "--trials", "2",
        "--out", str(out), "--learner", "rl",
    ])
    assert result.exit_code == 0, result.output
    saved = json.loads((out / "card.json").read_text())
    assert [c["seed"] for c in saved["split"]["train"]] == [0, 1, 2]
    assert [c["seed"] for c in saved["split"]["heldout"]] == [3, 4, 5, 6, 7]
    assert saved["learner"] == "rl" and (out / "agent.pt").is_file()
    assert "rl-adaptive" in saved["heldout"]["overall"]


def test_tuning_settings_default_to_other_seeds_for_the_held_out_traces() -> None:
    settings = TuneSettings(train=[TINY], trials=1)
    assert {s for _, s in settings.pairs("train")}.isdisjoint(
        s for _, s in settings.pairs("heldout"))
    with pytest.raises(DeschedError, match="overlaps training"):
        split(TuneSettings(train=[TINY], train_seeds=[0, 1], heldout_seeds=[1, 2], trials=1))


def test_tuning_settings_read_the_environment_and_refuse_a_policy_with_nothing_to_learn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DESCHED_TUNE_TRIALS", "7")
    monkeypatch.setenv("DESCHED_TUNE_POLICY", "ifs-counter")
    settings = TuneSettings(train=[TINY])
    assert (settings.trials, settings.policy, settings.reference) == (7, "ifs-counter",
                                                                      "ifs-memoryless")
    result = CliRunner().invoke(cli, ["tune", "--trace", TINY, "--workers", "2", "--out",
                                      "unused", "--policy", "fifo"])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and "'fifo' has no learnable parameters" in result.output
