"""Commands of the live service: serve, and the admin groups tenants, workers, policy."""

from __future__ import annotations

import sys
from typing import Any

import click

from desched.cli.sim import parse_param_args
from desched.errors import DeschedError

DB_HELP = (
    "state database: a SQLite path or a postgresql:// URL [default: $DESCHED_DB or data/desched.db]"
)


def _settings(**overrides: Any) -> Any:
    from pydantic import ValidationError

    from desched.service.settings import ServiceSettings

    try:
        return ServiceSettings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise DeschedError(f"setting {where!r}: {err['msg']}") from None


@click.command()
@click.option("--db", default=None, help=DB_HELP)
@click.option("--host", default=None, help="address to bind [default: 127.0.0.1]")
@click.option("--port", default=None, type=int, help="port to bind [default: 8000]")
@click.option(
    "--policy",
    default=None,
    help="policy to run, recorded as the live policy [default: the recorded one]",
)
@click.option(
    "--param",
    "params",
    multiple=True,
    metavar="KEY=VALUE",
    help="a parameter of --policy (repeatable)",
)
@click.option("--lease-s", default=None, type=float, help="lease period, seconds [default: 30]")
@click.option("--log-dir", default=None, help="decision-log folder [default: data/logs]")
def serve(
    db: str | None,
    host: str | None,
    port: int | None,
    policy: str | None,
    params: tuple[str, ...],
    lease_s: float | None,
    log_dir: str | None,
) -> None:
    """Run the HTTP service (tenants submit, workers poll) until interrupted.

    Every setting also reads DESCHED_<NAME> (DESCHED_DB, DESCHED_LEASE_S, ...).
    """
    if params and policy is None:
        raise DeschedError("--param needs --policy")
    settings = _settings(
        db=db,
        host=host,
        port=port,
        policy=policy,
        policy_params=parse_param_args(params) if params else None,
        lease_s=lease_s,
        log_dir=log_dir,
    )
    import uvicorn

    from desched.service.app import create_app

    app = create_app(settings)
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level="warning",
        access_log=False,
        **_fast_io(),
    )


def _fast_io() -> dict[str, Any]:
    """uvicorn's C HTTP parser and event loop (httptools, uvloop; the service extra installs
    both): a fifth less service CPU per decision than the pure-Python h11 and asyncio
    (BENCHMARKS.md). Without them uvicorn's defaults run."""
    import importlib.util

    fast: dict[str, Any] = {}
    if importlib.util.find_spec("httptools") is not None:
        fast["http"] = "httptools"
    if importlib.util.find_spec("uvloop") is not None:
        fast["loop"] = "uvloop"
    return fast


def serve_argv(port: int, *options: str) -> list[str]:
    """The command that runs ``desched serve`` on ``port`` as a child of this interpreter."""
    return [
        sys.executable,
        "-c",
        "from desched.cli import main; main()",
        "serve",
        "--port",
        str(port),
        *options,
    ]


def _store(db: str | None) -> Any:
    from desched.service.store import Store

    settings = _settings(db=db)
    store = Store(settings.db, durability=settings.durability)
    store.migrate()
    return store


def _name(value: str) -> str:
    import re

    from desched.service.schemas import NAME_PATTERN

    if not re.fullmatch(NAME_PATTERN, value):
        raise DeschedError(
            f"name {value!r}: use 1-128 letters, digits and _ . : / - (starting with a letter "
            "or digit)"
        )
    return value


def _add(role_name: str, name: str, db: str | None) -> None:
    from desched.service.records import Role

    store = _store(db)
    try:
        token = store.add_principal(Role(role_name), _name(name))
    finally:
        store.close()
    click.echo(token)


@click.group()
def tenants() -> None:
    """Tenants: who may submit tasks."""


@tenants.command("add")
@click.argument("name")
@click.option("--db", default=None, help=DB_HELP)
def tenants_add(name: str, db: str | None) -> None:
    """Register tenant NAME and print its token (shown once; stored as a SHA-256 hash)."""
    _add("tenant", name, db)


@click.group()
def workers() -> None:
    """Workers: who may poll for tasks."""


@workers.command("add")
@click.argument("name")
@click.option("--db", default=None, help=DB_HELP)
def workers_add(name: str, db: str | None) -> None:
    """Register worker NAME and print its token (shown once; stored as a SHA-256 hash)."""
    _add("worker", name, db)


@click.group()
def policy() -> None:
    """The live policy of the service."""


@policy.command("set")
@click.argument("name")
@click.option(
    "--param",
    "params",
    multiple=True,
    metavar="KEY=VALUE",
    help="a parameter of the policy (repeatable)",
)
@click.option("--db", default=None, help=DB_HELP)
def policy_set(name: str, params: tuple[str, ...], db: str | None) -> None:
    """Switch the live policy to NAME; a running service picks it up within one sweep."""
    from desched.policies import parse_params

    raw = parse_param_args(params)
    parsed = parse_params(name, raw)
    store = _store(db)
    try:
        store.set_policy(name, raw)
    finally:
        store.close()
    click.echo(f"live policy: {name} {parsed.model_dump()}")
