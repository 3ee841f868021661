"""Request and response bodies of the HTTP API, with the limits that keep bad input a 4xx.

Every string is bounded and may hold neither NUL nor lone surrogates (PostgreSQL and UTF-8
refuse both); every number is finite and bounded; unknown fields are refused. Request bodies
are strict (``RequestBody``): a value must have the JSON type the schema names (a number
field refuses ``"1"`` and ``true``, a boolean refuses ``1`` and ``"true"``, an integer
refuses ``1.0``, a string refuses numbers), so the OpenAPI schema and the behaviour agree.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

MAX_TASKS_PER_SUBMIT = 1000
"""Most tasks one submit may carry."""
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$"
"""Tenant, worker and worker-instance names, task types, idempotency keys."""
TASK_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
MAX_TEXT = 2048


def _printable(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode (no lone surrogates)") from None
    return value


Text = Annotated[str, Field(max_length=MAX_TEXT), AfterValidator(_printable)]
Name = Annotated[str, Field(pattern=NAME_PATTERN)]
Seconds = Annotated[float, Field(gt=0, le=1e9, allow_inf_nan=False)]
MemoryMb = Annotated[float, Field(ge=0, le=1e9, allow_inf_nan=False)]


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RequestBody(Body):
    """A request body: strict JSON types (module docstring)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class TaskIn(RequestBody):
    """One document enrichment request."""

    task_type: Name = Field(description="enrichment asked for: ocr_clean, extract, ...")
    document_ref: Text = Field("", description="where the worker reads the document")
    doc_bytes: int | None = Field(None, ge=0, le=2**50, description="document size, bytes")
    pages: int | None = Field(None, ge=0, le=10**7, description="document pages")
    mem_mb: MemoryMb | None = Field(None, description="memory the task is expected to need")
    priority: int = Field(
        0,
        ge=-1_000_000,
        le=1_000_000,
        description="priority within the tenant's own tasks, higher first (README, tenant "
        "controls); it never moves the tenant ahead of another",
    )


TaskList = Annotated[list[TaskIn], Field(min_length=1, max_length=MAX_TASKS_PER_SUBMIT)]


class Submitted(Body):
    task_ids: list[str] = Field(description="ids of the tasks, in the order submitted")
    created: bool = Field(description="false when an earlier submit with this key is replayed")


class TaskView(Body):
    task_id: str
    tenant: str
    task_type: str
    state: str = Field(description="queued, leased, done, dead or cancelled")
    attempts: int = Field(description="leases granted so far")
    submit_s: float
    start_s: float | None = Field(None, description="start of the latest attempt")
    end_s: float | None
    predicted_s: float | None
    predicted_p50_s: float | None = Field(
        None, description="median of the task's duration by the quantile model (Boost's label)"
    )
    predicted_p90_s: float | None = Field(
        None, description="90th percentile of the task's duration by the quantile model"
    )
    predicted_mem_mb: float | None = Field(
        None, description="memory the task is predicted to need (mem_mb hint or model)"
    )
    priority: int = Field(0, description="priority within the tenant, higher first")
    duration_s: float | None = Field(None, description="real duration, as the worker reported")
    peak_mem_mb: float | None
    result_ref: str | None = Field(None, description="where the worker put the result")
    error: str | None = Field(None, description="the latest failure, if any")


class PollIn(RequestBody):
    worker_id: Name = Field(description="the polling instance of this worker (slot, GPU, ...)")
    free_mem_mb: MemoryMb | None = Field(
        None,
        description="memory free on the worker: only a task predicted to fit is handed out "
        "(a task without a prediction fits anywhere); none: every task fits",
    )


class LeaseOut(Body):
    task_id: str
    lease_id: str = Field(description="present it on heartbeat, complete and fail")
    lease_expires_at: float = Field(description="epoch seconds; heartbeat before then")
    attempt: int
    tenant: str
    task_type: str
    document_ref: str
    doc_bytes: int | None
    pages: int | None
    mem_mb: float | None
    predicted_s: float | None
    predicted_mem_mb: float | None = Field(
        None, description="memory the task is predicted to need; at most the poll's free_mem_mb"
    )


class LeaseIn(RequestBody):
    lease_id: Annotated[str, Field(min_length=1, max_length=64, pattern=TASK_ID_PATTERN)]


class HeartbeatOut(Body):
    lease_expires_at: float


class CompleteIn(LeaseIn):
    duration_s: Seconds = Field(description="real service time of the task")
    peak_mem_mb: MemoryMb | None = Field(None, description="peak memory the task used")
    result_ref: Text | None = Field(None, description="where the result was put")


class FailIn(LeaseIn):
    error: Text = Field(description="what went wrong")
    retryable: bool = Field(True, description="false dead-letters the task at once")


class FailOut(Body):
    state: str = Field(description="queued (will retry) or dead (dead-lettered)")


class CancelOut(Body):
    task_id: str
    state: str = Field(description="cancelled")
    was: str = Field(
        description="the state it was cancelled in: queued or leased; cancelled for a repeat"
    )


class Problem(Body):
    detail: str | list[object]
    retry: bool | None = Field(
        None,
        description="on a 503 or 429: true, nothing was acknowledged and the same request "
        "may be retried (a submit with the same Idempotency-Key) after retry_after_s",
    )
    retry_after_s: int | None = Field(
        None, description="seconds to wait before that retry (also the Retry-After header)"
    )


def health_status(active: bool, stale: bool, failing: str | None) -> tuple[str, str | None]:
    """``/healthz``'s status and why: standby; degraded while memory is being reloaded
    (``stale``) or from a write the database did not take (``Writer.failing``); else ok."""
    if not active:
        return "standby", None
    if stale:
        return "degraded", "reloading state from the database"
    if failing is not None:
        return "degraded", f"the database did not take the last write: {failing}"
    return "ok", None


class Health(Body):
    status: str = Field(
        description="ok; degraded while memory waits to be rebuilt from an unreachable "
        "database, or from a failed write until a write or a check of the database gets "
        "through; standby while another service holds the writer lock"
    )
    detail: str | None = Field(None, description="why the status is degraded")
    role: str = Field(
        "active",
        description="active (holds the database's writer lock and serves) or standby",
    )
    policy: str
    params: dict[str, object]
    queued: int
    leased: int
    predictor: bool
    predicted_labels: list[str] = Field(
        default_factory=list,
        description="what the duration model predicts at submit: predicted_s and the "
        "quantile labels it has (predicted_p50_s, predicted_p90_s); empty without a model",
    )
    policy_error: str | None = Field(
        None, description="why the last recorded policy switch was refused, if it was"
    )
    default_policy: str = Field(
        description="the policy run when none is recorded: the recommended one with a "
        "duration model loaded, one that needs no prediction without"
    )
    default_policy_reason: str = Field(description="why default_policy is the default")
    model_version: str | None = Field(
        default=None, description="the duration model's version serving (None without one); the "
        "housekeeper loads the registry's new champion within seconds of its promotion"
    )
    model_error: str | None = Field(
        default=None, description="why the registry's champion is not the model serving, if it is not"
    )


class Live(Body):
    role: str = Field(description="active or standby")
