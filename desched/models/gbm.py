"""LightGBM, imported without scikit-learn.

LightGBM's package imports scikit-learn when it is installed (for its estimator classes,
``LGBMRegressor`` and the rest), and scikit-learn's import costs about 1.3 s of CPU here: a
second per process that fits or loads a model (the demo's pool processes, the judge's, a
retraining). desched calls ``lightgbm.train``, ``Dataset`` and ``Booster`` only, which do not
need it. ``import_lightgbm()`` imports LightGBM as though scikit-learn were absent, unless
scikit-learn is imported already (then as usual: nothing is saved); scikit-learn itself stays
importable afterwards (sentence-transformers uses it). Every ``lightgbm`` import of the model
layer goes through here.
"""

from __future__ import annotations

import sys
import threading
from types import ModuleType

_lock = threading.Lock()


def import_lightgbm() -> ModuleType:
    """The ``lightgbm`` module (imported on first call, without scikit-learn: module
    docstring)."""
    loaded = sys.modules.get("lightgbm")
    if loaded is not None:
        return loaded
    with _lock:
        blocked = "sklearn" not in sys.modules
        if blocked:
            sys.modules["sklearn"] = None  # type: ignore[assignment]  # an ImportError
        try:
            import lightgbm
        finally:
            if blocked and sys.modules.get("sklearn", 0) is None:
                del sys.modules["sklearn"]
    return lightgbm
