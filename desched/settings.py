"""The settings family: every settings model of desched derives from ``DeschedSettings``.

Each field reads the environment variable ``DESCHED_<FIELD>`` (a subclass may narrow the
prefix, e.g. ``DESCHED_TRAIN_``), values are validated once and frozen, and unknown keys are
refused. Nothing is read at import time: a settings object reads the environment when built.
"""

from __future__ import annotations

from pydantic_settings import BaseSettings, SettingsConfigDict


class DeschedSettings(BaseSettings):
    """Base of every settings model; environment prefix ``DESCHED_``."""

    model_config = SettingsConfigDict(env_prefix="DESCHED_", extra="forbid", frozen=True)
