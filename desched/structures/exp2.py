"""``2**x`` and ``e**x`` with the same bits on every machine: ifs-counter's decay and the
Boost policies' moments ``E[e^(γS)]``.

numpy's ``exp2`` and ``exp`` take a different code path on a CPU with AVX-512 than on one
without, and the paths differ in the last bits; ``ifs-counter`` compares decayed counters
across tenants and the Boost policies solve for γ from a mean of moments, so those bits
changed their decisions from one machine to another (ifs-counter's golden recordings failed
on a CPU without AVX-512). Here both are built from IEEE-754 operations alone, each
correctly rounded and never fused, in a fixed order, so CPython, numpy's element-wise
operations and the compiled kernels (``desched.kernels``, which compile these functions'
own source) all get the same double. ``exp2d``:

- ``x < MIN_EXPONENT`` (-1000) is 0.0: a counter decayed over 1000 half-lives is gone, and
  every product below stays a normal number;
- ``n = round(x)`` (half to even), ``r = x - n`` (exact, ``|r| <= 1/2``), ``y = r * ln 2``;
- ``2**r = e**y`` by its Taylor series to ``y**13 / 13!`` (truncation below ``4e-18``
  relative for ``|y| <= 0.35``), evaluated in Estrin's scheme (pairs, then powers ``y**2``,
  ``y**4``, ``y**8``): eight dependent operations where Horner's form has 26, which is what
  a kernel deciding over a thousand tenants waits for; within two units in the last place;
- ``2**n`` by squaring 1/2 (2 where ``n > 0``; exact: powers of two), times ``e**y``.

``expd`` reduces by ``ln 2`` in two parts (Cody and Waite) and shares the series and the power
of two. Within two units in the last place of the C library's. ``series``, ``pow2``,
``exp2d`` and ``expd`` are in the compiled subset of ``desched.structures.kernelc``;
``compiled`` builds them natively from this source (the policy objects' fast paths call
those: ``fast_exp2d``, ``fast_expd``, the array forms); ``exp2d_numpy`` and ``expd_numpy`` are
the same operations on a numpy array, element by element, where llvmlite cannot build them.
"""

from __future__ import annotations

import ast
import hashlib
import math
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any, cast

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]

MIN_EXPONENT = -1000.0
LN2 = 0.6931471805599453  # math.log(2.0)
INV_LN2 = 1.4426950408889634  # 1 / math.log(2.0)
LN2_HI = 0.6931471803691238  # ln 2 to 32 bits (fdlibm's ln2HI): n * LN2_HI is exact
LN2_LO = 1.9082149292705877e-10  # ln 2 - LN2_HI to double precision (fdlibm's ln2LO)
MAX_EXP = 708.0
C13 = 1.6059043836821613e-10  # 1 / k! for k = 13 down to 2 (a test checks each)
C12 = 2.08767569878681e-09
C11 = 2.505210838544172e-08
C10 = 2.755731922398589e-07
C9 = 2.7557319223985893e-06
C8 = 2.48015873015873e-05
C7 = 0.0001984126984126984
C6 = 0.001388888888888889
C5 = 0.008333333333333333
C4 = 0.041666666666666664
C3 = 0.16666666666666666
C2 = 0.5
COEFFICIENTS = (C13, C12, C11, C10, C9, C8, C7, C6, C5, C4, C3, C2)
"""``1 / k!`` for ``k`` = 13 down to 2."""


def series(y: float) -> float:
    """``e**y`` for ``|y| <= 0.35``: the Taylor series to ``y**13 / 13!`` in Estrin's scheme
    (additions and multiplications only: numpy arrays go through it element by element)."""
    y2 = y * y
    y4 = y2 * y2
    y8 = y4 * y4
    r0 = (1.0 + y) + (C2 + C3 * y) * y2
    r1 = (C4 + C5 * y) + (C6 + C7 * y) * y2
    r2 = (C8 + C9 * y) + (C10 + C11 * y) * y2
    r3 = C12 + C13 * y
    return (r0 + r1 * y4) + (r2 + r3 * y4) * y8


def pow2(n: int) -> float:
    """``2**n``, exactly, for ``-1022 <= n <= 1023``: 1/2 (or 2) squared."""
    m = -n
    base = 0.5
    if m < 0:
        m = n
        base = 2.0
    scale = 1.0
    while m > 0:
        if m % 2 == 1:
            scale = scale * base
        base = base * base
        m = m // 2
    return scale


def exp2d(x: float) -> float:
    """``2**x`` (module docstring; the decay calls it with ``x <= 0``, and it is exact in its
    power of two up to ``x = 1023``); 0.0 below ``MIN_EXPONENT``."""
    if x < MIN_EXPONENT:
        return 0.0
    n = round(x)
    return series((x - float(n)) * LN2) * pow2(n)


def expd(x: float) -> float:
    """``e**x`` the same way: ``n = round(x / ln 2)``, ``r = x - n ln 2`` in two parts
    (``n * LN2_HI`` is exact), ``series(r) * 2**n``; ``inf`` above ``MAX_EXP``, 0.0 below
    ``-MAX_EXP``, NaN for NaN. Boost's moments ``E[e^(γS)]`` call it with ``0 <= x <= 700``."""
    if x != x:  # noqa: PLR0124 (NaN; math.isnan is outside the compiled subset)
        return x
    if x > MAX_EXP:
        return math.inf
    if x < -MAX_EXP:
        return 0.0
    n = round(x * INV_LN2)
    fn = float(n)
    return series((x - fn * LN2_HI) - fn * LN2_LO) * pow2(n)


def exp2d_loop(x: F64, out: F64, n: int) -> None:
    """``out[j] = exp2d(x[j])`` for ``j < n`` (compiled: ``compiled``)."""
    for j in range(n):
        out[j] = exp2d(x[j])


def expd_loop(x: F64, out: F64, n: int) -> None:
    """``out[j] = expd(x[j])`` for ``j < n`` (compiled: ``compiled``)."""
    for j in range(n):
        out[j] = expd(x[j])


COMPILED = ("series", "pow2", "exp2d", "expd", "exp2d_loop", "expd_loop")
"""The functions of this module in ``desched.structures.kernelc``'s subset."""


@cache
def compiled() -> dict[str, Callable[..., Any]] | None:
    """Native ``exp2d``, ``expd`` and their loops, compiled from this module's own source
    (cached on disk as the kernels are), or None where llvmlite cannot build them: the
    policy objects then use the Python and numpy forms, which give the same bits."""
    try:
        import llvmlite

        from desched.structures import kernelc

        def build() -> tuple[ast.Module, list[str]]:
            source = ast.parse(Path(__file__).read_text(), __file__)
            tree = ast.Module(body=[n for n in source.body if isinstance(n, ast.Assign)
                                    or (isinstance(n, ast.FunctionDef) and n.name in COMPILED)],
                              type_ignores=[])
            return tree, ["exp2d", "expd", "exp2d_loop", "expd_loop"]

        digest = hashlib.sha256(Path(__file__).read_bytes())
        digest.update(Path(kernelc.__file__).read_bytes())
        digest.update(llvmlite.__version__.encode())
        text, sigs = kernelc.cached_translation(digest.hexdigest()[:24], __file__, build)
        return kernelc.native(text, sigs, __file__)
    except Exception:  # noqa: BLE001 (no native code: the Python forms run instead)
        return None


def _native(name: str, python: Callable[[float], float]) -> Callable[[float], float]:
    functions = compiled()
    return python if functions is None else functions[name]


def fast_exp2d(x: float) -> float:
    """``exp2d(x)``, by the native function where there is one (a tenth of the cost)."""
    return _native("exp2d", exp2d)(x)


def fast_expd(x: float) -> float:
    """``expd(x)``, by the native function where there is one (a tenth of the cost)."""
    return _native("expd", expd)(x)


_series_array = cast(Callable[[np.ndarray], np.ndarray], series)
"""``series`` on an array: its additions and multiplications are numpy's, element by element."""


def exp2d_array(x: np.ndarray) -> np.ndarray:
    """``exp2d`` of every element of a float64 array: the native loop where there is one,
    else ``exp2d_numpy``; the same bits either way."""
    return _by_loop("exp2d_loop", exp2d_numpy, x)


def _by_loop(loop: str, numpy_form: Callable[[np.ndarray], np.ndarray],
             x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float64)
    functions = compiled()
    if functions is None:
        return numpy_form(x)
    out = np.empty_like(x)
    functions[loop](x.ctypes.data, out.ctypes.data, x.size)
    return out


def exp2d_numpy(x: np.ndarray) -> np.ndarray:
    """``exp2d`` of every element by numpy's element-wise operations, in ``exp2d``'s order
    (``np.rint`` rounds half to even; ``np.ldexp`` of 1.0 is the exact power of two that
    ``pow2`` builds)."""
    x = np.asarray(x, dtype=np.float64)
    low = x < MIN_EXPONENT
    safe = np.where(low, 0.0, x)
    n = np.rint(safe)
    out = _series_array((safe - n) * LN2) * np.ldexp(1.0, n.astype(np.int64))
    out[low] = 0.0
    return out


def expd_array(x: np.ndarray) -> np.ndarray:
    """``expd`` of every element of a float64 array: the native loop where there is one,
    else ``expd_numpy``; the same bits either way."""
    return _by_loop("expd_loop", expd_numpy, x)


def expd_numpy(x: np.ndarray) -> np.ndarray:
    """``expd`` of every element by numpy's element-wise operations (NaN stays NaN)."""
    x = np.asarray(x, dtype=np.float64)
    high, low = x > MAX_EXP, x < -MAX_EXP
    safe = np.where(high | low | np.isnan(x), 0.0, x)
    n = np.rint(safe * INV_LN2)
    out = _series_array((safe - n * LN2_HI) - n * LN2_LO) * np.ldexp(1.0, n.astype(np.int64))
    out[high] = np.inf
    out[low] = 0.0
    out[np.isnan(x)] = np.nan
    return out
