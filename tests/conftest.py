"""Shared fixtures. Prefect state lives under the project's ignored .prefect/ folder."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "data" / "samples"

os.environ.setdefault("PREFECT_HOME", str(ROOT / ".prefect" / "tests"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
# Compiled forests shared across registries (desched.models.duration.shared_forest): the
# project's ignored build/ folder, never the user's ~/.cache.
os.environ.setdefault("DESCHED_FOREST_CACHE", str(ROOT / "build" / "forest-cache"))
# Prefect creates its home folder without parents: on a fresh clone .prefect/ is not there yet.
Path(os.environ["PREFECT_HOME"]).mkdir(parents=True, exist_ok=True)


# Markers (registered in pyproject.toml). `pytest -m "not slow"` (make test-fast) is the inner
# loop; `make test` and CI run everything.
#
# e2e: the test starts a server or subprocess that it talks to over HTTP (``desched serve``,
# a Prefect server and worker), or runs a Prefect flow (any test using ``prefect_harness``,
# directly or through a fixture). Every e2e test is also slow.
E2E_MODULES = {
    "test_deploy.py",
    "test_live_demo.py",
    "test_local_api.py",
    "test_operator_page.py",
    "test_replay.py",
    "test_service.py",
    "test_service_fuzz.py",
    "test_service_ha.py",
    "test_service_shutdown.py",
    "test_service_tenancy.py",
    "test_tenant_controls_service.py",
}
# Tests of those modules that start no server: the CLI in this process, a fake transport,
# the admin CLI refusing bad arguments.
NOT_E2E: dict[str, tuple[str, ...]] = {
    "test_local_api.py": (
        "test_no_server_is_started_where_an_api_is_configured_or_the_ephemeral_one_is_off",
        "test_a_server_that_exits_or_stays_silent_is_an_error_naming_it",
        "test_the_server_stops_when_the_flow_cannot_be_imported",
    ),
    "test_replay.py": (
        "test_a_log_case_is_keyed_on_the_file_content_not_its_path",
        "test_an_evaluation_cell_is_keyed_on_its_trace_content_and_its_other_inputs",
        "test_the_report_artifact_drops_inline_images",
    ),
    "test_service.py": (
        "test_tenants_add_prints_a_token_that_is_stored_hashed",
        "test_a_child_that_writes_more_to_stderr_than_a_pipe_holds_runs_to_its_end",
    ),
    "test_service_ha.py": (
        "test_the_worker_client_fails_over_between_addresses_and_backs_off_until_one_serves",
    ),
    "test_service_tenancy.py": (
        "test_the_admin_commands_refuse_bad_expiries_and_names_in_one_line",
    ),
}
# slow, besides e2e: every test that took 2 s or more (setup, call and teardown, summed over
# its parameters) in `pytest --durations=0` of the whole suite (2026-12-03, 2 cores at load
# 13-19, so about 0.5 s or more on a quiet machine), except the golden decisions, which the
# inner loop keeps, and modules whose shared fixture is slow. "*" marks a whole module.
SLOW: dict[str, tuple[str, ...]] = {
    "test_kernels.py": ("test_every_kernel_agrees_with_the_python_loop_on_a_large_scenario",),
    "test_architecture.py": ("test_the_wheel_claims_only_the_desched_name",),
    "test_enrich.py": ("test_the_pinned_weights_refuse_a_tampered_copy",),
    "test_evaluate.py": ("test_cells_run_on_spawned_processes_equal_the_cells_run_in_this_one",),
    "test_ingest.py": ("*",),
    # every rule through the warehouse and its Great Expectations audit, and `desched ingest`
    # run as a process (Prefect's temporary server): a minute on a quiet machine
    "test_inputs_ingest.py": ("*",),
    "test_cli_output.py": (
        "test_verbose_lets_prefect_and_great_expectations_info_through",
        "test_ingest_prints_its_result_on_stdout_and_no_library_info_logs",
    ),
    "test_memory_dispatch.py": ("test_no_poll_gets_a_task_that_does_not_fit_and_no_task_is_lost",),
    "test_policies_fair.py": (
        "test_fast_policy_equals_its_naive_twin_when_some_tasks_lack_a_prediction",
    ),
    "test_policies_predicted.py": (
        "test_the_kinetic_tournament_agrees_with_a_brute_force_maximum_at_every_query",
    ),
    # the registry's contract suite (test_policy_contract.py, test_policy_state.py) is not
    # here: it runs in the inner loop with a tenth of its examples (tests/builders.examples)
    # Its module fixture trains and compiles a forest (lleaves): most of a minute.
    "test_predictor.py": ("*",),
    "test_pool.py": (
        "test_evaluation_cells_on_two_processes_equal_the_cells_run_here",
        "test_the_judge_on_two_processes_gives_the_serial_cases_verdicts_and_recommendation",
        "test_a_pool_on_a_dask_cluster_gives_the_serial_results",
    ),
    "test_reference_models.py": (
        "test_the_simpy_model_gives_the_same_starts_workers_and_decisions_as_the_simulator",
        "test_fifo_under_poisson_load_matches_the_erlang_c_mean_wait_and_wait_probability",
        "test_the_simpy_store_fifo_gives_the_simulators_fifo_start_times",
        "test_the_simpy_model_agrees_on_a_poisson_trace_with_unrounded_times",
    ),
    "test_service_hot_path.py": (
        "test_the_hot_path_answers_every_request_as_the_fastapi_routes_do",
    ),
    "test_simulator.py": (
        "test_runs_in_separate_processes_with_different_hash_seeds_decide_identically",
    ),
    "test_toy_policy.py": (
        "test_the_report_tables_and_pareto_points_include_the_toy_policy",
        "test_both_learners_tune_the_toy_policy_and_its_card_loads",
    ),
    "test_training.py": (
        "test_a_champion_that_cannot_score_the_new_slice_is_replaced_with_the_reason",
        "test_a_better_version_is_promoted_and_a_worse_one_is_kept_as_rejected_with_its_reason",
        "test_the_cli_trains_predicts_and_lists_models_end_to_end",
        "test_the_card_records_features_window_metrics_baselines_and_commit",
    ),
    "test_workloads.py": (
        "test_duration_is_learnable_from_tenant_type_and_size_but_not_exactly",
        "test_task_ids_are_s_and_seven_digits_for_fewer_than_ten_million_tasks",
    ),
}


def is_e2e(module: str, name: str, fixtures: list[str]) -> bool:
    if "prefect_harness" in fixtures:
        return True
    return module in E2E_MODULES and name not in NOT_E2E.get(module, ())


def is_slow(module: str, name: str, fixtures: list[str]) -> bool:
    named = SLOW.get(module, ())
    return is_e2e(module, name, fixtures) or "*" in named or name in named


@pytest.hookimpl(tryfirst=True)  # before -m deselects by these markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        module = item.path.name
        name = getattr(item, "originalname", item.name)
        fixtures = list(getattr(item, "fixturenames", ()))
        if is_e2e(module, name, fixtures):
            item.add_marker(pytest.mark.e2e)
        if is_slow(module, name, fixtures):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _notes_not_shared_between_tests(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no file of notes said (``desched.swf.share_notes``, which a test
    that starts a pool calls in this process): a note one test's processes said is said
    again in the next test's, as a command's would be."""
    monkeypatch.setenv("DESCHED_NOTES_SEEN", "")


@pytest.fixture(autouse=True)
def _prefect_workers_stopped() -> Iterator[None]:
    """After a test that ran a flow in this process, Prefect's events and log workers are
    drained and stopped. Left running, the events worker's websocket sends a keepalive ping
    every 20 s whose payload comes from the global ``random`` (``websockets``:
    ``random.getrandbits``), from a background thread: a ping that lands while Hypothesis
    draws an example changes the global random state under it, and Hypothesis reports that
    as a strategy using ``random`` (a deprecation warning now, an error later). The next flow
    starts new workers."""
    yield
    stop_prefect_workers()


def stop_prefect_workers() -> None:
    """Drain and stop Prefect's events and log workers, where Prefect is imported."""
    import sys

    if "prefect.events.worker" not in sys.modules:
        return
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for worker in (EventsWorker, APILogWorker):
        worker.drain_all(timeout=10, at_exit=False)


@pytest.fixture(scope="session")
def prefect_harness() -> Iterator[None]:
    """One Prefect test server for the whole session (about 15 s to start, once)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=90):
        yield


@pytest.fixture(scope="session")
def small_duration_registry(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A duration-model registry with one champion (and its p50/p90 models) trained on a
    small generated trace; tests that alter it work on a copy."""
    from desched.models.promotion import register
    from desched.models.training import TrainSettings, train
    from desched.workloads import generate

    root = tmp_path_factory.mktemp("models") / "duration"
    frame = generate("steady", tasks=2500, tenants=10, seed=21)
    register(root, train(frame, TrainSettings(max_rounds=150)), commit="test")
    return root
