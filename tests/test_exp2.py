"""``desched.structures.exp2``: ``2**x`` from IEEE operations alone, the same bits everywhere."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from desched.structures import exp2
from desched.structures.exp2 import (
    MAX_EXP,
    MIN_EXPONENT,
    compiled,
    exp2d,
    exp2d_array,
    exp2d_numpy,
    expd,
    expd_array,
    expd_numpy,
    fast_exp2d,
    fast_expd,
)

# Bits written down once (float.hex): IEEE-754 addition and multiplication are the same on
# every machine, so these hold on any CPU; numpy's exp2 would not (AVX-512 or not).
PINNED = {
    -0.3: "0x1.9fdf8bcce533dp-1",
    -1.0 / 3: "0x1.965fea53d6e3dp-1",
    -7.25: "0x1.ae89f995ad3adp-8",
    -123.456: "0x1.75401a474749cp-124",
    -999.5: "0x1.6a09e667f3bcdp-1000",
    -0.5: "0x1.6a09e667f3bccp-1",
    -1e-09: "0x1.fffffffa0bc0dp-1",
}

PINNED_E = {
    0.5: "0x1.a61298e1e069dp+0",
    1.0: "0x1.5bf0a8b145769p+1",
    10.25: "0x1.b9ea2aed2a0f1p+14",
    123.456: "0x1.1428e1cbc0142p+178",
    699.9: "0x1.ac3c2d2582f8ep+1009",
    -3.3: "0x1.2e259bb85be85p-5",
}
arguments = st.one_of(st.floats(-720.0, 720.0, allow_nan=False), st.floats(-1.0, 1.0),
                      st.integers(-720, 720).map(float))

exponents = st.one_of(
    st.floats(-1100.0, 8.0, allow_nan=False),
    st.floats(-2.0, 0.0),
    st.integers(-1100, 8).map(float),
    st.integers(-2200, 16).map(lambda k: k / 2.0),  # halves: round() ties to even
)


def test_the_coefficients_are_the_taylor_series_of_e_to_the_y() -> None:
    assert exp2.LN2 == math.log(2.0)
    for k, c in zip(range(13, 1, -1), exp2.COEFFICIENTS, strict=True):
        assert c == 1.0 / math.factorial(k)


def test_the_native_functions_are_built_where_llvmlite_is() -> None:
    assert compiled() is not None  # llvmlite is a dependency: the fast paths are native


def test_known_values_have_their_pinned_bits() -> None:
    for x, bits in PINNED.items():
        assert exp2d(x).hex() == bits, x
        assert float(exp2d_array(np.array([x]))[0]).hex() == bits, x
    assert exp2d(0.0) == exp2d(-0.0) == 1.0
    assert exp2d(-1.0) == 0.5 and exp2d(-10.0) == 2.0**-10 and exp2d(3.0) == 8.0


@settings(max_examples=400, deadline=None)
@given(xs=st.lists(exponents, min_size=1, max_size=40))
def test_the_array_forms_and_the_native_function_give_the_scalars_bits(xs: list[float]) -> None:
    want = np.array([exp2d(x) for x in xs]).view(np.int64).tolist()
    assert exp2d_numpy(np.array(xs)).view(np.int64).tolist() == want
    assert exp2d_array(np.array(xs)).view(np.int64).tolist() == want
    assert np.array([fast_exp2d(x) for x in xs]).view(np.int64).tolist() == want


@settings(max_examples=400, deadline=None)
@given(x=exponents)
def test_it_is_within_two_units_in_the_last_place_and_zero_below_the_floor(x: float) -> None:
    got = exp2d(x)
    if x < MIN_EXPONENT:
        assert got == 0.0
        return
    want = math.pow(2.0, x)
    assert abs(got - want) <= 2 * math.ulp(want)


def test_e_to_the_x_has_its_pinned_bits_and_special_values() -> None:
    for x, bits in PINNED_E.items():
        assert expd(x).hex() == bits, x
        assert float(expd_array(np.array([x]))[0]).hex() == bits, x
        assert fast_expd(x).hex() == bits, x
    assert expd(0.0) == 1.0 and expd(MAX_EXP + 1) == math.inf and expd(-MAX_EXP - 1) == 0.0
    for form in (expd_array, expd_numpy):
        assert math.isnan(float(form(np.array([math.nan]))[0]))
        assert form(np.array([math.inf, -math.inf])).tolist() == [math.inf, 0.0]
    assert math.isnan(expd(math.nan)) and math.isnan(fast_expd(math.nan))


@settings(max_examples=400, deadline=None)
@given(xs=st.lists(arguments, min_size=1, max_size=40))
def test_e_to_the_x_in_array_and_native_forms_gives_the_scalars_bits(xs: list[float]) -> None:
    want = np.array([expd(x) for x in xs]).view(np.int64).tolist()
    assert expd_numpy(np.array(xs)).view(np.int64).tolist() == want
    assert expd_array(np.array(xs)).view(np.int64).tolist() == want
    assert np.array([fast_expd(x) for x in xs]).view(np.int64).tolist() == want


@settings(max_examples=400, deadline=None)
@given(x=arguments)
def test_e_to_the_x_is_within_two_units_in_the_last_place_of_the_c_library(x: float) -> None:
    got = expd(x)
    if x > MAX_EXP:
        assert got == math.inf
    elif x < -MAX_EXP:
        assert got == 0.0
    else:
        want = math.exp(x)
        assert abs(got - want) <= 2 * math.ulp(want)
