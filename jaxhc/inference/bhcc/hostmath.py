"""Host-side (numpy) special functions of BHCC's bookkeeping (scores of column sets, Eq. 6-8).

``host_gammaln`` is scipy's ``gammaln``. scipy is not among jaxhc's own dependencies, but
jax and jaxlib require it (both list scipy in their package metadata), so it is installed
wherever jaxhc is. ``math.lgamma`` and ``jax.scipy.special.gammaln`` differ from it in the
last digits (about 60% of arguments in 0.5 .. 300, up to ~7e-12), which could change the
greedy searches' choices between near-ties, so BHCC keeps scipy's values."""

from scipy.special import gammaln as host_gammaln

__all__ = ["host_gammaln"]
