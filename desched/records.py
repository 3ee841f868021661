"""The base of desched's typed records: what a run, an evaluation, a weights card or a report
writes to JSON is a frozen pydantic model, so a reader gets attributes, not string keys.

JSON has no NaN or infinity: ``json_text`` writes a non-finite float as ``null`` (so that
JavaScript's ``JSON.parse``, Go, serde and ``jq`` read every file desched writes), and a
``Record`` reads ``null`` back as NaN in a field typed plain ``float``, where NaN is what an
undefined figure (a window without tasks, a share of a zero gain) is in memory.
"""

from __future__ import annotations

import json
import math
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator


class Record(BaseModel):
    """A frozen record; unknown keys are refused. ``model_dump()`` is its JSON content."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _null_is_nan(cls, data: Any) -> Any:
        """``null`` in a plain ``float`` field is the NaN ``json_text`` wrote as ``null``."""
        if not isinstance(data, dict):
            return data
        fields = cls.model_fields
        nulls = [k for k, v in data.items()
                 if v is None and k in fields and fields[k].annotation is float]
        if not nulls:
            return data
        return {**data, **dict.fromkeys(nulls, math.nan)}


def finite(data: Any) -> Any:
    """``data`` (dicts, lists, tuples, scalars) with every non-finite float replaced by None."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [finite(v) for v in data]
    return data


def json_text(data: Any, indent: int | None = 1, **kwargs: Any) -> str:
    """Strict JSON of ``data``: NaN and infinities written as ``null`` (module docstring)."""
    return json.dumps(finite(data), indent=indent, allow_nan=False, **kwargs)
