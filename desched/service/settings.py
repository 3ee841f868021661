"""The service's settings: one pydantic-settings model, environment prefix ``DESCHED_``."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from desched.settings import DeschedSettings

DEFAULT_DB = "data/desched.db"


class ServiceSettings(DeschedSettings):
    """Everything ``desched serve`` reads; each field also reads ``DESCHED_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="DESCHED_", extra="forbid", frozen=True)

    db: str = Field(
        DEFAULT_DB,
        description="state database: a SQLite file path (or sqlite:///path), or a "
        "postgresql:// URL",
    )
    host: str = Field("127.0.0.1", description="address the HTTP server binds")
    port: int = Field(8000, ge=0, le=65535, description="TCP port the HTTP server binds")
    lease_s: float = Field(
        30.0,
        gt=0,
        le=86_400,
        description="seconds a worker holds a task without a heartbeat before it is requeued",
    )
    max_retries: int = Field(
        3,
        ge=0,
        le=100,
        description="failed or expired attempts a task may retry before it is dead-lettered",
    )
    hot_path: bool = Field(
        True,
        description="answer well-formed polls and completions of known workers without "
        "FastAPI's routing (same checks, same answers, half the CPU); false sends every "
        "request through the FastAPI routes",
    )
    max_body_bytes: int = Field(
        1_048_576, ge=1024, description="largest request body accepted; larger gets 413"
    )
    header_timeout_s: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="a connection that has not sent a request's whole headers this long after "
        "it opened, or after the request's first byte, gets 408 (closed if nothing arrived): "
        "a stalled client holds no connection for ever",
    )
    policy: str | None = Field(
        None,
        description="policy to run; when set it is also recorded as the live policy, else "
        "the live policy recorded in the database is used (default ifs-memoryless)",
    )
    policy_params: dict[str, str] = Field(
        default_factory=dict, description="parameters of ``policy`` (name -> value)"
    )
    log_dir: Path = Field(
        Path("data/logs"),
        description="folder of the decision log (JSON lines, one file per process and day)",
    )
    sweep_s: float = Field(
        0.25,
        gt=0,
        le=60,
        description="period of the housekeeper that expires leases and picks up a policy switch",
    )
    state_save_s: float = Field(
        5.0,
        gt=0,
        le=3600,
        description="how often, at most, the live policy's per-tenant state (counters of "
        "service, round-robin turn) is saved to the database for a restart to take back",
    )
    standby_poll_s: float = Field(
        0.25,
        gt=0,
        le=60,
        description="how often a standby service (PostgreSQL: another one holds the writer "
        "lock) tries to take over, and an active one checks its writer session",
    )
    shutdown_grace_s: float = Field(
        3.0,
        gt=0,
        le=300,
        description="at SIGTERM, how long the writes already queued get to commit; what has "
        "not committed by then is answered 503 with Retry-After, and the process exits",
    )
    predictor_registry: Path | None = Field(
        Path("models/duration"),
        description="model registry whose champion predicts durations at submit; None or a "
        "missing registry leaves predicted_s unset",
    )
    memory_model: Path | None = Field(
        None,
        description="registry of the peak-memory model (desched.models.memory) whose champion "
        "predicts predicted_mem_mb at submit; None or a missing registry uses the mem_mb hints",
    )
    max_fit_skips: int = Field(
        64,
        ge=1,
        le=100_000,
        description="candidates a poll may skip, in the policy's order, because they do not "
        "fit the worker's free_mem_mb; past that the poll gets nothing",
    )
    operator_refresh_s: float = Field(
        5.0,
        gt=0,
        le=3600,
        description="how often, at most, the operator page (GET /ui) re-reads the database "
        "for its per-tenant counts, waits and fairness windows, whatever the number of viewers; "
        "nothing is read while nobody looks",
    )
    durability: Literal["process", "machine"] = Field(
        "process",
        description="what an acknowledged write survives. process: a crash of the service "
        "(SIGKILL), but the last commits may be lost if the machine or the database server "
        "goes down (SQLite synchronous=NORMAL under WAL; PostgreSQL synchronous_commit=off: "
        "never corrupt, only the last ~0.2 s of commits at risk). machine: that too, at one "
        "WAL flush per commit (SQLite synchronous=FULL; PostgreSQL synchronous_commit=on)",
    )
