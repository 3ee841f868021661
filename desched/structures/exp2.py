"""``2**x`` for ``x <= 0`` with the same bits on every machine: ``ifs-counter``'s decay.

numpy's ``exp2`` takes a different code path on a CPU with AVX-512 than on one without, and
the two differ in the last bits; ``ifs-counter`` compares decayed counters across tenants, so
those bits changed its decisions from one machine to another (its golden recordings failed
on a CPU without AVX-512). Here ``2**x`` is built from IEEE-754 operations alone, each
correctly rounded and never fused, in a fixed order, so CPython, numpy's element-wise
operations and the compiled kernels (``desched.kernels``, which compile ``exp2d`` itself)
all get the same double:

- ``x < MIN_EXPONENT`` (-1000) is 0.0: a counter decayed over 1000 half-lives is gone, and
  every product below stays a normal number;
- ``n = round(x)`` (half to even), ``r = x - n`` (exact, ``|r| <= 1/2``), ``y = r * ln 2``;
- ``2**r = e**y`` by its Taylor series to ``y**13 / 13!`` (truncation below ``4e-18``
  relative for ``|y| <= 0.35``), evaluated in Estrin's scheme (pairs, then powers ``y**2``,
  ``y**4``, ``y**8``): eight dependent operations where Horner's form has 26, which is what
  a kernel deciding over a thousand tenants waits for; within two units in the last place;
- ``2**n`` by squaring 1/2 (2 where ``n > 0``; exact: powers of two), times ``e**y``.

``exp2d`` is also in the compiled subset of ``desched.structures.kernelc`` (a kernel calls
it); ``exp2d_array`` is the same operations on a numpy array, element by element.
"""

from __future__ import annotations

import numpy as np

MIN_EXPONENT = -1000.0
LN2 = 0.6931471805599453  # math.log(2.0)
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


def exp2d(x: float) -> float:
    """``2**x`` (module docstring; the decay calls it with ``x <= 0``, and it is exact in its
    power of two up to ``x = 1023``); 0.0 below ``MIN_EXPONENT``."""
    if x < MIN_EXPONENT:
        return 0.0
    n = round(x)
    y = (x - float(n)) * LN2
    y2 = y * y
    y4 = y2 * y2
    y8 = y4 * y4
    r0 = (1.0 + y) + (C2 + C3 * y) * y2
    r1 = (C4 + C5 * y) + (C6 + C7 * y) * y2
    r2 = (C8 + C9 * y) + (C10 + C11 * y) * y2
    r3 = C12 + C13 * y
    p = (r0 + r1 * y4) + (r2 + r3 * y4) * y8
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
    return p * scale


def exp2d_array(x: np.ndarray) -> np.ndarray:
    """``exp2d`` of every element of a float64 array: the same operations in the same order
    (``np.rint`` rounds half to even; ``np.ldexp`` of 1.0 is the exact power of two that
    ``exp2d``'s squaring builds)."""
    x = np.asarray(x, dtype=np.float64)
    low = x < MIN_EXPONENT
    safe = np.where(low, 0.0, x)
    n = np.rint(safe)
    y = (safe - n) * LN2
    y2 = y * y
    y4 = y2 * y2
    y8 = y4 * y4
    r0 = (1.0 + y) + (C2 + C3 * y) * y2
    r1 = (C4 + C5 * y) + (C6 + C7 * y) * y2
    r2 = (C8 + C9 * y) + (C10 + C11 * y) * y2
    r3 = C12 + C13 * y
    p = (r0 + r1 * y4) + (r2 + r3 * y4) * y8
    out = p * np.ldexp(1.0, n.astype(np.int64))
    out[low] = 0.0
    return out
