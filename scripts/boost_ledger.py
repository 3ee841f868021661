"""The development-log judge run of ``boost-ledger`` beside ``boost-lanes``, with the tight
variant, as first run when the candidate was a script (docs/deploy-policy.md, "What would
close the gap"). ``boost-ledger`` (``ALPHA = 1/2``) is registered now
(``desched.policies.boost_ledger``, whose docstring holds the rule committed at ``f1c66f0``
before any run); ``boost-ledger-tight`` (``ALPHA = 1/20``, under the gain floor on all four
development logs) stays here, unregistered: the same classes with the other constant. Run

    .venv/bin/python -m scripts.boost_ledger --out data/judge-ledger

to register the tight variant in this process and run ``desched judge --set dev --jobs 1``
on both beside ``boost-lanes`` (its own judge options may follow).
"""

from __future__ import annotations

from typing import ClassVar

from desched.policies.boost_ledger import BoostLedger, BoostLedgerNaive

__all__ = ["VARIANTS", "BoostLedger", "BoostLedgerNaive", "BoostLedgerTight",
           "BoostLedgerTightNaive", "main"]


class BoostLedgerTight(BoostLedger):
    """``boost-ledger`` with ``ALPHA = 1/20`` (module docstring)."""

    name = "boost-ledger-tight"
    summary = ("boost-lanes; a tenant whose tasks were overtaken for 1/20 of its backlogged "
               "time gets its oldest task served next")
    ALPHA: ClassVar[float] = 1.0 / 20.0


class BoostLedgerTightNaive(BoostLedgerNaive):
    name = "boost-ledger-tight"
    summary = BoostLedgerTight.summary
    ALPHA: ClassVar[float] = 1.0 / 20.0


BoostLedgerTight.naive = BoostLedgerTightNaive

VARIANTS = (BoostLedger, BoostLedgerTight)


def main(argv: list[str]) -> None:
    from desched.cli import cli
    from desched.policies import REGISTRY

    for cls in VARIANTS:
        REGISTRY[cls.name] = cls
    cli.main(["judge", "--set", "dev", "--jobs", "1",
              "--policies", "boost-lanes,boost-ledger,boost-ledger-tight", *argv])


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])

