"""Commands of the live service: serve, and the admin groups tenants, workers, policy."""

from __future__ import annotations

import math
import sys
import threading
from pathlib import Path
from typing import Any

import click

from desched.cli.grammar import POLICY_SPEC_HELP, policy_spec
from desched.errors import DeschedError

DB_HELP = (
    "the service's state store: a SQLite path or a postgresql:// URL (--db is its older "
    "name) [default: $DESCHED_DB or data/desched.db]"
)
STORE_OPTION = click.option("--store", "--db", "db", default=None, help=DB_HELP)


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
@STORE_OPTION
@click.option("--host", default=None, help="address to bind [default: 127.0.0.1]")
@click.option("--port", default=None, type=click.IntRange(1, 65535),
              help="port to bind [default: 8000]")
@click.option(
    "--policy",
    default=None,
    metavar="SPEC",
    help=f"policy to run, recorded as the live policy: {POLICY_SPEC_HELP} "
    "[default: the recorded one]",
)
@click.option("--lease-s", default=None, type=click.FloatRange(min=0, min_open=True),
              help="lease period, seconds [default: 30]")
@click.option(
    "--logs", "log_dir", default=None,
    help="decision-log folder, the one `desched ingest --logs` reads [default: data/logs]",
)
def serve(
    db: str | None,
    host: str | None,
    port: int | None,
    policy: str | None,
    lease_s: float | None,
    log_dir: str | None,
) -> None:
    """Run the HTTP service (tenants submit, workers poll) until interrupted.

    On PostgreSQL a second `desched serve` on the same database stands by (503 with
    Retry-After, /healthz 503) and takes over within about a second when the active one
    dies. On SQLite a second one is refused.

    Every setting also reads DESCHED_<NAME> (DESCHED_DB, DESCHED_LEASE_S, ...).
    """
    name, params = policy_spec(policy) if policy is not None else (None, None)
    settings = _settings(
        db=db,
        host=host,
        port=port,
        policy=name,
        policy_params=params or None,
        lease_s=lease_s,
        log_dir=log_dir,
    )
    import sqlite3

    import uvicorn

    from desched.cli.grammar import writable_folder
    from desched.service.app import create_app
    from desched.service.store import Dialect, Store, parse_db

    if name is not None:  # refused before start-up, in one line, not by a failed start-up
        from desched.models.registry import Registry
        from desched.policies import get_policy

        if get_policy(name).clairvoyant():
            raise DeschedError(f"--policy {policy}: ranks on the true durations, which a live "
                               "service never knows (a bound for the bench, not a policy "
                               "to run)")
        registry = settings.predictor_registry
        if "predicted_s" in get_policy(name).reads and (
                registry is None or Registry(registry).champion() is None):
            raise DeschedError(
                f"--policy {policy}: ranks on predicted durations, and no duration model is "
                "loaded (give DESCHED_PREDICTOR_REGISTRY a registry with a champion, or start "
                "without --policy and `desched policy set` it once a model is promoted)")
    # decision records that could not be written would be lost after every commit
    writable_folder(Path(settings.log_dir), "--logs")
    try:
        probe = Store(settings.db, durability=settings.durability)
    except sqlite3.DatabaseError as exc:
        raise DeschedError(f"--store {parse_db(settings.db)[1]}: not a desched store "
                           f"({exc})") from None
    try:
        if probe.dialect is Dialect.SQLITE and probe.service_running():
            probe.acquire_writer_lock()  # raises: another service owns this SQLite file
    finally:
        probe.close()
    log = _log_with_levels()
    app = create_app(settings)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level="warning",
        access_log=False,
        # a backstop: requests still open this long after SIGTERM are cancelled
        timeout_graceful_shutdown=math.ceil(settings.shutdown_grace_s) + 2,
        **_fast_io(settings.header_timeout_s),
    )
    try:
        draining_server(config, app.state.scheduler, settings.shutdown_grace_s).run()
    finally:
        if log is not None:
            log.close()


def _log_with_levels() -> Any:
    """The service's warnings and errors on stderr with their time, level and logger (an
    ERROR such as "memory and database disagree" must read as one), written by a thread of
    their own so that a stderr nobody reads never blocks the service
    (``desched.service.log_sink``); the ``NonBlockingLog`` to close at exit, or None when
    the logger had a handler already."""
    import logging

    from desched.service.log_sink import NonBlockingLog

    service_log = logging.getLogger("desched.service")
    if service_log.handlers:
        return None
    out = logging.StreamHandler()
    out.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    log = NonBlockingLog(out)
    service_log.addHandler(log.handler)
    return log


def draining_server(config: Any, scheduler: Any, grace_s: float) -> Any:
    """A uvicorn server that, at the first SIGTERM or SIGINT, also drains the scheduler's
    writer in a thread of its own (``Scheduler.drain``): requests waiting on a commit get
    their answer, 503 with ``Retry-After`` for what does not commit within ``grace_s``,
    before uvicorn waits for them; so the process exits within a few seconds whatever
    the writer's state (blocked on a database lock, queued writes)."""
    import uvicorn

    class DrainingServer(uvicorn.Server):
        draining = False

        def handle_exit(self, sig: int, frame: Any) -> None:
            super().handle_exit(sig, frame)
            if not self.draining:
                self.draining = True
                threading.Thread(
                    target=scheduler.drain, args=(grace_s,), name="desched-drain", daemon=True
                ).start()

    return DrainingServer(config)


def _fast_io(header_timeout_s: float) -> dict[str, Any]:
    """uvicorn's C HTTP parser and event loop (httptools, uvloop; the service extra installs
    both): a fifth less service CPU per decision than the pure-Python h11 and asyncio
    (BENCHMARKS.md); the parser's protocol carries the headers' deadline
    (``desched.service.header_deadline``). Without them uvicorn's defaults run."""
    import importlib.util

    from desched.service.header_deadline import header_deadline_protocol

    fast: dict[str, Any] = {}
    if importlib.util.find_spec("httptools") is not None:
        fast["http"] = header_deadline_protocol(header_timeout_s)
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


def _store(db: str | None, must_exist: bool = False) -> Any:
    """The store ``--store`` names, its schema brought up to date. ``must_exist`` (a command
    that only reads or revokes): a SQLite store that is absent or an empty file is refused,
    not created, so that a mistyped path does not read as a service with no tenants. A file
    that is not a SQLite database is refused in one line."""
    import sqlite3

    from desched.service.store import Dialect, Store, parse_db

    settings = _settings(db=db)
    dialect, target = parse_db(settings.db)
    created = False
    if dialect is Dialect.SQLITE:
        path = Path(target)
        absent = not path.is_file() or path.stat().st_size == 0
        if absent and must_exist:
            what = "is an empty file" if path.is_file() else "does not exist"
            raise DeschedError(f"--store {target}: {what}, not a desched store (give the "
                               "store `desched serve` runs on)")
        created = absent
    try:
        store = Store(settings.db, durability=settings.durability)
        store.migrate()
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            raise DeschedError(f"--store {target}: locked by another process ({exc}); "
                               "try again") from None
        raise DeschedError(f"--store {target}: not a desched store ({exc})") from None
    except sqlite3.DatabaseError as exc:
        raise DeschedError(f"--store {target}: not a desched store ({exc})") from None
    if created:  # a mistyped path would otherwise read as the service's store
        click.echo(f"note: --store {target} did not exist: created a new store (a service "
                   "running on another store does not see this change)", err=True)
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


EXPIRES_HELP = (
    "the token expires after this long (90s, 45m, 12h, 30d, 2w) or at this ISO time "
    "(2031-01-31T12:00:00Z) [default: never]"
)
REVOKE_WAIT_S = 10.0


def _add(role_name: str, name: str, db: str | None, expires: str | None) -> None:
    import time

    from desched.service.records import Role
    from desched.service.tokens import iso, parse_expiry

    expires_at = None if expires is None else parse_expiry(expires, time.time())
    store = _store(db)
    try:
        token = store.add_principal(Role(role_name), _name(name), expires_at)
    finally:
        store.close()
    click.echo(token)
    if expires_at is not None:
        click.echo(f"{role_name} {name}: token expires at {iso(expires_at)}", err=True)


def _revoke(role_name: str, name: str, db: str | None) -> None:
    """Revoke, then wait until a running service acknowledges it (module docstring of
    ``desched.service.tokens``)."""
    import time

    from desched.service.records import Role

    store = _store(db, must_exist=True)
    try:
        epoch = store.revoke_principal(Role(role_name), name)
        if not store.service_running():
            click.echo(f"revoked {role_name} {name!r}")
            return
        deadline = time.monotonic() + REVOKE_WAIT_S
        while store.token_epoch_seen() < epoch:
            if time.monotonic() > deadline:
                click.echo(
                    f"revoked {role_name} {name!r} in the database; the running service has "
                    f"not confirmed within {REVOKE_WAIT_S:.0f} s (it refuses the token from "
                    "its next sweep on)",
                    err=True,
                )
                return
            time.sleep(0.05)
    finally:
        store.close()
    click.echo(f"revoked {role_name} {name!r}; the running service refuses its token")


def _none(what: str, db: str | None, hint: str) -> None:
    """An empty listing says so, on stderr (stdout stays one row per line for scripts)."""
    click.echo(f"{what} in {_settings(db=db).db} (add one: {hint})", err=True)


def _list(role_name: str, db: str | None) -> None:
    import time

    from desched.service.records import Role
    from desched.service.tokens import iso

    store = _store(db, must_exist=True)
    try:
        rows = store.principal_rows(Role(role_name))
    finally:
        store.close()
    if not rows:
        _none(f"no {role_name}s", db, f"desched {role_name}s add NAME")
        return
    now = time.time()
    for name, created_at, expires_at, revoked_at in rows:
        if revoked_at is not None:
            state = f"revoked {iso(revoked_at)}"
        elif expires_at is not None and expires_at <= now:
            state = f"expired {iso(expires_at)}"
        elif expires_at is not None:
            state = f"expires {iso(expires_at)}"
        else:
            state = "active"
        click.echo(f"{name}\tcreated {iso(created_at)}\t{state}")


@click.group()
def tenants() -> None:
    """Tenants: who may submit tasks."""


@tenants.command("add")
@click.argument("name")
@click.option("--expires", default=None, help=EXPIRES_HELP)
@STORE_OPTION
def tenants_add(name: str, expires: str | None, db: str | None) -> None:
    """Register tenant NAME and print its token (shown once; stored as a SHA-256 hash). A
    tenant whose token was revoked gets a new one."""
    _add("tenant", name, db, expires)


@tenants.command("revoke")
@click.argument("name")
@STORE_OPTION
def tenants_revoke(name: str, db: str | None) -> None:
    """Revoke tenant NAME's token: 401 from now on. With a service running, returns once the
    service has confirmed."""
    _revoke("tenant", name, db)


@tenants.command("list")
@STORE_OPTION
def tenants_list(db: str | None) -> None:
    """Every tenant with its token's state (active, expires, expired, revoked)."""
    _list("tenant", db)


def _rate(value: str) -> float | None:
    """``R``, ``R/s``, ``R/m`` or ``R/h`` as tasks per second; ``none`` clears the limit."""
    from desched.controls import rate_per_s

    if value.strip().lower() == "none":
        return None
    try:
        rate = rate_per_s(value)
    except ValueError:
        rate = math.nan
    if not (math.isfinite(rate) and rate > 0):
        raise DeschedError(f"--rate {value!r}: expected a number > 0 per s, m or h (5/s, 300/m)")
    return rate


def _optional(option: str, value: str, kind: type) -> Any:
    """``value`` as ``kind``, None for ``none``; a one-line error naming ``option``."""
    if value.strip().lower() == "none":
        return None
    try:
        return kind(value)
    except ValueError:
        raise DeschedError(f"{option} {value!r}: expected {kind.__name__} or none") from None


CONTROLS_WAIT_S = 10.0


@tenants.command("set")
@click.argument("name")
@click.option("--weight", type=float, default=None,
              help="share of service while backlogged, relative to weight 1 [default: 1]")
@click.option("--cap", default=None, help="at most N tasks leased at once; none: no cap")
@click.option("--rate", default=None,
              help="submit rate limit, tasks per s, m or h (5/s, 300/m); none: no limit")
@click.option("--burst", default=None,
              help="token bucket size, tasks [default: max(1, rate per s)]; none: default")
@STORE_OPTION
def tenants_set(name: str, weight: float | None, cap: str | None, rate: str | None,
                burst: str | None, db: str | None) -> None:
    """Set tenant NAME's controls (README, tenant controls); options not given keep their
    value. With a service running, returns once the service applies them."""
    import time

    from desched.controls import DEFAULT, TenantControl

    store = _store(db)
    try:
        old = store.tenant_controls().tenants.get(_name(name), DEFAULT)
        values = old.as_dict()
        if weight is not None:
            values["weight"] = weight
        if cap is not None:
            values["cap"] = _optional("--cap", cap, int)
        if rate is not None:
            values["rate"] = _rate(rate)
            if values["rate"] is None:
                values["burst"] = None
        if burst is not None:
            values["burst"] = _optional("--burst", burst, float)
        try:
            control = TenantControl(**values)
        except DeschedError as exc:
            raise DeschedError(f"tenant {name!r}: {exc}") from None
        from desched.service.records import Role

        if name not in store.principals(Role.TENANT):  # a typo would leave the intended one
            click.echo(f"note: no tenant {name!r} has a token in this store; its controls "
                       f"apply once `desched tenants add {name}` gives it one", err=True)
        epoch = store.set_tenant_control(name, control)
        shown = ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}"
                          for k, v in control.as_dict().items() if v is not None)
        if not store.service_running():
            click.echo(f"tenant {name}: {shown}")
            return
        deadline = time.monotonic() + CONTROLS_WAIT_S
        while store.controls_epoch_seen() < epoch:
            if time.monotonic() > deadline:
                click.echo(f"tenant {name}: {shown} (recorded; the running service has not "
                           f"confirmed within {CONTROLS_WAIT_S:.0f} s)", err=True)
                return
            time.sleep(0.05)
    finally:
        store.close()
    click.echo(f"tenant {name}: {shown}; the running service applies them")


@tenants.command("controls")
@STORE_OPTION
def tenants_controls(db: str | None) -> None:
    """Every tenant's recorded controls: tenant, weight, cap, rate (per s), burst."""
    store = _store(db, must_exist=True)
    try:
        controls = store.tenant_controls()
    finally:
        store.close()
    if not controls.tenants:
        _none("no tenant controls", db, "desched tenants set NAME --weight 2")
        return
    for name, c in controls.tenants.items():
        cells = [name, f"{c.weight:g}", *("-" if v is None else f"{v:g}"
                                          for v in (c.cap, c.rate, c.burst))]
        click.echo("\t".join(cells))


@click.group()
def workers() -> None:
    """Workers: who may poll for tasks."""


@workers.command("add")
@click.argument("name")
@click.option("--expires", default=None, help=EXPIRES_HELP)
@STORE_OPTION
def workers_add(name: str, expires: str | None, db: str | None) -> None:
    """Register worker NAME and print its token (shown once; stored as a SHA-256 hash). A
    worker whose token was revoked gets a new one."""
    _add("worker", name, db, expires)


@workers.command("revoke")
@click.argument("name")
@STORE_OPTION
def workers_revoke(name: str, db: str | None) -> None:
    """Revoke worker NAME's token: 401 from now on. With a service running, returns once the
    service has confirmed."""
    _revoke("worker", name, db)


@workers.command("list")
@STORE_OPTION
def workers_list(db: str | None) -> None:
    """Every worker with its token's state (active, expires, expired, revoked)."""
    _list("worker", db)


@click.group()
def operators() -> None:
    """Operators: who may read the operator page (GET /ui) of `desched serve`."""


@operators.command("add")
@click.argument("name")
@click.option("--expires", default=None, help=EXPIRES_HELP)
@STORE_OPTION
def operators_add(name: str, expires: str | None, db: str | None) -> None:
    """Register operator NAME and print its token (shown once; stored as a SHA-256 hash):
    open http://HOST:PORT/ui#token=TOKEN. An operator whose token was revoked gets a new
    one."""
    _add("operator", name, db, expires)


@operators.command("revoke")
@click.argument("name")
@STORE_OPTION
def operators_revoke(name: str, db: str | None) -> None:
    """Revoke operator NAME's token: 401 from now on."""
    _revoke("operator", name, db)


@operators.command("list")
@STORE_OPTION
def operators_list(db: str | None) -> None:
    """Every operator with its token's state (active, expires, expired, revoked)."""
    _list("operator", db)


@click.group()
def policy() -> None:
    """The live policy of the service."""


@policy.command("set")
@click.argument("spec", metavar="SPEC")
@STORE_OPTION
def policy_set(spec: str, db: str | None) -> None:
    """Switch the live policy to SPEC, NAME or 'NAME?KEY=VALUE&KEY=VALUE'; a running service
    picks it up within one sweep."""
    from desched.policies import get_policy, parse_params

    name, raw = policy_spec(spec, "policy set")
    parsed = parse_params(name, raw)
    if get_policy(name).clairvoyant():  # no live service knows a queued task's true duration
        raise DeschedError(f"policy set {spec!r}: ranks on the true durations, which a live "
                           "service never knows (a bound for the bench, not a policy to run)")
    store = _store(db)
    try:
        store.set_policy(name, raw)
    finally:
        store.close()
    click.echo(f"live policy: {name} {parsed.model_dump()} (recorded; a running service "
               "switches within one sweep, or refuses it and says why in /healthz policy_error)")
    if "predicted_s" in get_policy(name).reads:
        click.echo(f"note: {name} ranks on predicted durations: a service without a duration "
                   "model loaded refuses it and keeps its policy", err=True)
