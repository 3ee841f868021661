"""``desched demo``: the research bench end to end (the ``demo`` Prefect flow, run here)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from desched.tasks.demo import DemoRun


@click.command()
@click.option("--quick", is_flag=True,
              help="Small traces and few tuning steps: a first look (about 25 s on a quiet "
                   "2-vCPU machine).")
@click.option("--out", default="data/demo", show_default=True,
              type=click.Path(file_okay=False, path_type=Path),
              help="Folder of demo runs: the report goes to OUT/RUN/ (report.md, report.json, "
                   "plots), its working files to OUT/RUN/work/.")
@click.option("--run", "run_name", default=None,
              help="Name of the run (default: UTC time and mode).")
@click.option("--force", is_flag=True,
              help="Write into OUT/RUN even when it already holds a run (replaced).")
@click.option("--jobs", type=click.IntRange(min=1), default=None,
              help="Processes for the independent simulations and trainings [default: one "
                   "per core]; the same report with any number.")
@click.option("--dask", "dask_address", default=None, metavar="ADDRESS",
              help="Run them on the Dask cluster at this scheduler address instead.")
def demo(quick: bool, out: Path, run_name: str | None, force: bool, jobs: int | None,
         dask_address: str | None) -> None:
    """Generate the workloads, simulate, ingest, train, tune, evaluate; write the report.

    Runs on Prefect's ephemeral local server, DuckDB and files under OUT; nothing else has to
    be running. One line per step on stderr shows where it is.
    """
    from desched.cli import exit_without_teardown
    from desched.cli.grammar import fresh_folder

    if run_name is not None:
        fresh_folder(out / run_name, force, "--run")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from desched.cli.local_api import early_api

    def load() -> Callable[..., DemoRun]:
        from desched.flows.demo import demo as run_demo
        from desched.warehouse.audit import import_gx

        # The ingest step's Great Expectations (about 3 s of imports in this process): paid
        # here, while this process would otherwise wait for the server, not on the flow's
        # path.
        import_gx()
        return run_demo

    with early_api(load) as run_demo:  # Prefect's server starts while the flow is imported
        result = run_demo(quick=quick, out=str(out), run=run_name, jobs=jobs,
                          dask_address=dask_address)
    folder = Path(result.report_dir)
    taken = result.total_s if result.process_s is None else result.process_s
    click.echo(f"{folder / 'report.md'} ({taken:.0f} s); also report.html, "
               f"report.json and {len(list(folder.glob('*.png')))} plots")
    # The report is written, the pool's processes and Prefect's server stopped, the flow's
    # logs and events sent: nothing is left for the interpreter's teardown (about 1.5 s).
    exit_without_teardown()
