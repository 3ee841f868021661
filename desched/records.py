"""The base of desched's typed records: what a run, an evaluation, a weights card or a report
writes to JSON is a frozen pydantic model, so a reader gets attributes, not string keys."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Record(BaseModel):
    """A frozen record; unknown keys are refused. ``model_dump()`` is its JSON content."""

    model_config = ConfigDict(frozen=True, extra="forbid")
