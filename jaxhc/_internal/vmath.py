"""Float64 ``log`` and ``expm1`` from arithmetic XLA:CPU vectorises.

XLA:CPU lowers float64 ``log`` and ``expm1`` to scalar libm calls, one element at a time,
while ``exp``, division and multiply-adds run eight lanes wide. In the trellis's split loop
(one ``log`` per split) that call is most of an energy's cost. These versions use only
bit operations, selects, one division and a polynomial, so XLA keeps them inside the
vectorised loop. Both are within a few ulps of libm over the whole float64 range
(`tests/test_vmath.py`), with libm's values at 0, subnormals, infinities and NaN.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

__all__ = ["log", "expm1"]

_LN2 = 0.6931471805599453
_SQRT_HALF_BITS = 0x3FE6A09E667F3BCD  # bits of sqrt(1/2)
_EXP_MASK = -(1 << 52)  # the sign and exponent bits
# 2 atanh(f) = 2 f sum_k f^2k / (2k + 1); |f| <= 3 - 2 sqrt 2 ~ 0.1716 here, so the terms
# to k = 9 leave a relative error below 3e-17 (f^20 / 21)
_ATANH = tuple(1.0 / (2 * k + 1) for k in range(10))
# expm1(x) = sum_k x^k / k! for |x| <= ln2 / 2: the terms to x^13 leave a relative error
# below 2e-17 (x^13 / 14!)
_FACT = tuple(1.0 / math.factorial(k) for k in range(1, 14))


@jax.custom_jvp
def log(x: jax.Array) -> jax.Array:
    """Natural log of ``x`` (elementwise; ``-inf`` at 0, ``nan`` below 0 and at nan).

    ``x`` is read once, through its bits, so a division or ``exp`` that produces it stays
    fused with its producer (XLA:CPU computes an expensive value with several users apart).
    Subnormals get their exact log (XLA:CPU's own ``log`` flushes them to ``-inf``).
    """
    x = jnp.asarray(x)
    if x.dtype != jnp.float64:  # XLA's float32 log is vectorised already
        return jnp.log(x)
    bits = jax.lax.bitcast_convert_type(x, jnp.int64)
    mag = bits & 0x7FFFFFFFFFFFFFFF
    field = mag >> 52
    mant = mag & 0x000FFFFFFFFFFFFF
    # a subnormal is mant * 2^-1074: take the bits of float64(mant) (exact) and shift back
    sub = field == 0
    nb = jnp.where(sub, jax.lax.bitcast_convert_type(mant.astype(jnp.float64), jnp.int64), mag)
    # x = 2^k m with m in [sqrt 1/2, sqrt 2): k from the bits of x / sqrt(1/2), in integers
    tmp = nb - _SQRT_HALF_BITS
    k = ((tmp >> 52) - jnp.where(sub, 1074, 0)).astype(jnp.float64)
    m = jax.lax.bitcast_convert_type(nb - (tmp & _EXP_MASK), jnp.float64)
    # f = (m - 1) / (m + 1), log m = 2 atanh f; every quotient is used once (XLA:CPU does not
    # fuse a division with several users into the loop around it)
    u, v = m - 1.0, m + 1.0
    f2 = (u * u) * (1.0 / (v * v))
    p = _ATANH[-1]
    for c in _ATANH[-2::-1]:
        p = p * f2 + c
    num = k * _LN2 * v + 2.0 * u * p
    num = jnp.where(mag == 0, -jnp.inf, num)
    num = jnp.where(mag == 0x7FF0000000000000, jnp.inf, num)
    num = jnp.where((mag > 0x7FF0000000000000) | ((bits < 0) & (mag != 0)), jnp.nan, num)
    # the division last (v in [1.7, 2.42)): where the log has several users (a MAP's max and
    # logsumexp), XLA:CPU computes it once and re-reads it instead of recomputing it for each
    return num / v


@jax.custom_jvp
def expm1(x: jax.Array) -> jax.Array:
    """``exp(x) - 1`` without cancellation near 0 (elementwise); other dtypes than float64
    go to ``jnp.expm1``."""
    x = jnp.asarray(x)
    if x.dtype != jnp.float64:
        return jnp.expm1(x)
    small = jnp.abs(x) <= 0.5 * _LN2
    xs = jnp.where(small, x, 0.0)
    p = _FACT[-1]
    for c in _FACT[-2::-1]:
        p = p * xs + c
    return jnp.where(small, xs * p, jnp.exp(x) - 1.0)


@log.defjvp
def _log_jvp(primals, tangents):
    (x,), (dx,) = primals, tangents
    return log(x), dx / x


@expm1.defjvp
def _expm1_jvp(primals, tangents):
    (x,), (dx,) = primals, tangents
    y = expm1(x)
    return y, dx * (y + 1.0)
