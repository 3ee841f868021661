"""``desched deploy``: the work pools and deployments of prefect.yaml on a Prefect server.

Waits for the server at ``PREFECT_API_URL`` to answer, creates the work pools that
prefect.yaml names (``cpu`` and ``gpu``, process type) where they do not exist yet (an
existing pool is left as it is), saves the configuration prefect.yaml names (the Variable
``desched_service_url``, the service's address, and, from $DESCHED_WORKER_TOKEN when set, the
Secret block ``desched-worker-token``), then runs ``prefect --no-prompt deploy --all`` in the
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
SERVICE_URL_VARIABLE = "desched_service_url"
"""The Prefect Variable prefect.yaml reads the service's address from."""
WORKER_TOKEN_BLOCK = "desched-worker-token"
"""The Prefect Secret block the replay and the enrichment workers read the worker token from."""


async def save_configuration(service_url: str, worker_token: str | None) -> list[str]:
    """Set the Variable ``desched_service_url`` and, given a token, the Secret block
    ``desched-worker-token`` (both overwritten); one line per item saying what was done."""
    from prefect.blocks.system import Secret
    from prefect.variables import Variable

    await Variable.aset(SERVICE_URL_VARIABLE, service_url, overwrite=True)
    lines = [f"variable {SERVICE_URL_VARIABLE}: {service_url}"]
    if worker_token:
        secret: Secret[str] = Secret(value=worker_token)  # type: ignore[arg-type]
        await secret.asave(WORKER_TOKEN_BLOCK, overwrite=True)
        lines.append(f"secret block {WORKER_TOKEN_BLOCK}: saved from $DESCHED_WORKER_TOKEN")
    else:
        lines.append(f"secret block {WORKER_TOKEN_BLOCK}: not saved ($DESCHED_WORKER_TOKEN is "
                     "empty; the replay and the enrichment workers will read the environment)")
    return lines


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
@click.option("--service-url", default="http://127.0.0.1:8000", show_default=True,
              help="The desched service's address (or several, comma-separated), saved as "
                   "the Prefect Variable desched_service_url that prefect.yaml reads.")
def deploy(project: Path | None, wait_s: float, pools_only: bool, service_url: str) -> None:
    """Create the work pools cpu and gpu (if missing) and deploy every flow of prefect.yaml.

    Talks to the server at PREFECT_API_URL (required). Saves the service's address as the
    Variable desched_service_url and, when DESCHED_WORKER_TOKEN is set, the worker token as
    the Secret block desched-worker-token. Then start a worker per pool: prefect worker
    start --pool cpu (and --pool gpu on a machine with a GPU).
    """
    folder = project_dir(project)
    url = api_url()
    click.echo(f"Prefect server {url}")

    async def pools() -> list[str]:
        await _wait_for_server(wait_s)
        lines = await ensure_pools()
        if not pools_only:
            token = os.environ.get("DESCHED_WORKER_TOKEN")
            lines += await save_configuration(service_url, token)
        return lines

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
