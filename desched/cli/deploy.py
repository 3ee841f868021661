"""``desched deploy``: the work pools and deployments of prefect.yaml on a Prefect server.

Waits for the server at ``PREFECT_API_URL`` to answer, creates the work pools that
prefect.yaml names (``cpu`` and ``gpu``, process type) where they do not exist yet (an
existing pool is left as it is), then runs ``prefect --no-prompt deploy --all`` in the
project folder. Running it again changes nothing but the deployments' code version. The
README's "Run it on a Prefect server" has the whole path (server, workers, first runs).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import click

from desched.errors import DeschedError
from desched.samples import CHECKOUT

POOLS: tuple[str, ...] = ("cpu", "gpu")
"""The work pools prefect.yaml's deployments run on."""
POOL_TYPE = "process"


def project_dir(given: Path | None) -> Path:
    """The folder holding prefect.yaml: ``given``, else the current directory, else the
    checkout desched runs from."""
    for folder in ([given] if given is not None else [Path.cwd(), CHECKOUT]):
        if (folder / "prefect.yaml").is_file():
            return folder.resolve()
    where = given if given is not None else Path.cwd()
    raise DeschedError(f"{where}: no prefect.yaml here; run from the desched checkout")


def api_url() -> str:
    """The server's API address; an error when none is set (the ephemeral server a bare
    Prefect would start is gone when the command ends: nothing deployed there would run)."""
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if not url:
        raise DeschedError(
            "PREFECT_API_URL is not set: start a server (prefect server start) and "
            "export PREFECT_API_URL=http://127.0.0.1:4200/api"
        )
    return str(url)


async def _wait_for_server(wait_s: float) -> None:
    from prefect.client.orchestration import get_client

    deadline = time.monotonic() + wait_s
    async with get_client() as client:
        while True:
            error = await client.api_healthcheck()
            if error is None:
                return
            if time.monotonic() > deadline:
                raise DeschedError(f"no Prefect server answers at {api_url()} ({error})")
            await asyncio.sleep(1.0)


async def ensure_pools(names: tuple[str, ...] = POOLS) -> list[str]:
    """Create each work pool that does not exist (type process, the default job template);
    one line per pool saying what was done."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound
    from prefect.workers.utilities import get_default_base_job_template_for_infrastructure_type

    lines = []
    async with get_client() as client:
        for name in names:
            try:
                pool = await client.read_work_pool(name)
                lines.append(f"work pool {name}: exists (type {pool.type}), left as it is")
                continue
            except ObjectNotFound:
                pass
            template = await get_default_base_job_template_for_infrastructure_type(POOL_TYPE)
            try:
                await client.create_work_pool(
                    WorkPoolCreate(name=name, type=POOL_TYPE, base_job_template=template or {})
                )
                lines.append(f"work pool {name}: created (type {POOL_TYPE})")
            except ObjectAlreadyExists:  # created meanwhile by another deploy
                lines.append(f"work pool {name}: exists (type {POOL_TYPE}), left as it is")
    return lines


@click.command()
@click.option(
    "--project",
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder holding prefect.yaml (default: the current directory, else the checkout).",
)
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(0),
    default=120.0,
    show_default=True,
    help="Seconds to wait for the server to answer.",
)
@click.option("--pools-only", is_flag=True, help="Create the work pools; deploy nothing.")
def deploy(project: Path | None, wait_s: float, pools_only: bool) -> None:
    """Create the work pools cpu and gpu (if missing) and deploy every flow of prefect.yaml.

    Talks to the server at PREFECT_API_URL (required). Then start a worker per pool:
    prefect worker start --pool cpu (and --pool gpu on a machine with a GPU).
    """
    folder = project_dir(project)
    url = api_url()
    click.echo(f"Prefect server {url}")

    async def pools() -> list[str]:
        await _wait_for_server(wait_s)
        return await ensure_pools()

    for line in asyncio.run(pools()):
        click.echo(line)
    if pools_only:
        return
    click.echo(f"prefect --no-prompt deploy --all  (in {folder})")
    done = subprocess.run(
        [sys.executable, "-m", "prefect", "--no-prompt", "deploy", "--all"],
        cwd=folder,
        env={**os.environ, "PREFECT_API_URL": url},  # the server the pools are on, always
        check=False,
    )
    if done.returncode != 0:
        raise DeschedError(f"prefect deploy --all failed (exit status {done.returncode})")
    click.echo(
        "deployed; start a worker per pool: prefect worker start --pool cpu "
        "(and --pool gpu where there is a GPU)"
    )
