"""The explicit outside pass equals the gradient of log Z w.r.t. per-cluster log weights."""

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp
import numpy as np
import pytest

from jaxhc import trellis
from jaxhc.trellis.exact import run_dp as _dp


@pytest.mark.parametrize("n", [3, 6])
def test_outside_pass_equals_grad_of_log_z(n):
    rng = np.random.default_rng(n)
    W = rng.uniform(-1, 1, (n, n))
    W = (W + W.T) / 2
    energy = trellis.CorrelationEnergy(0.8)
    sol = trellis.solve(energy, W)
    feats = energy.features(jnp.asarray(W))

    @jax.jit  # one compiled program each for log Z(u) and its gradient (eager AD dispatches op by op)
    def root_log_z(u):
        return _dp(energy, feats, n, u=u, with_map=False)[0][2**n - 1]

    g = jax.jit(jax.grad(root_log_z))(jnp.zeros(2**n))
    np.testing.assert_allclose(np.exp(np.asarray(sol.log_marginals)), np.asarray(g), atol=1e-12)
    # adding a log weight u(S) multiplies every tree containing S: Z(u) = Z (1 + (e^u - 1) P(S))
    S = 0b011
    u = jnp.zeros(2**n).at[S].set(0.7)
    lhs = float(root_log_z(u))
    rhs = float(sol.log_z) + np.log1p((np.exp(0.7) - 1) * float(g[S]))
    np.testing.assert_allclose(lhs, rhs, atol=1e-10)
