import jax

jax.config.update("jax_enable_x64", True)

"""PYDT collapsed MCMC on four points (the issue's N = 4 check): the detach / re-attach
sampler's visit frequencies over all 26 tree structures (15 binary, 11 multifurcating) match
the exact posterior p(structure | X), computed independently by importance sampling from the
prior: prior trees drawn by the generative process (section 1) and weighted by their
message-passing likelihood p(X | T, t), so p(structure | X) = E[w 1(structure)] / E[w]."""
from collections import Counter

import jax.numpy as jnp
import numpy as np
from test_pydt_mcmc import _clusters  # a structure as the set of leaf bitmasks of its branch points

from jaxhc.inference.pydt import mcmc as P
from jaxhc.models.pydt_math import sample_prior_tree

FREE = P.FREE


def test_moves_sample_the_posterior_over_structures_of_four_points():
    c, alpha, beta, s2 = 1.0, 0.8, 0.3, 0.5
    N = 4
    X = jnp.asarray([[0.0], [0.25], [1.4], [1.8]])
    # reference: S prior draws with self-normalised likelihood weights
    S = 200000
    par, tim = jax.jit(jax.vmap(lambda k: sample_prior_tree(k, N, jnp.float64, c, alpha, beta)))(
        jax.random.split(jax.random.key(11), S)
    )
    ll = jax.jit(jax.vmap(lambda p, t: P.log_marginal_masked(p, t, p != FREE, X, s2)))(par, tim)
    w = np.exp(np.asarray(ll) - float(np.max(ll)))
    ess = w.sum() ** 2 / np.sum(w**2)
    assert ess > 20000, ess  # reference error per probability <= 0.5 / sqrt(ess) = 0.0035
    ref = Counter()
    for p, wi in zip(np.asarray(par), w):
        ref[_clusters(p, N)] += wi
    tot = sum(ref.values())
    ref = {k: v / tot for k, v in ref.items()}
    assert len(ref) == 26  # every structure has prior mass (alpha, beta > 0)
    # the sampler at fixed hyperparameters
    T = 40000
    st = P.pydt_mcmc_init(jax.random.key(4), X, c=c, alpha=alpha, beta=beta, sigma2=s2)

    @jax.jit
    def run(key, st):
        def body(s, k):
            s, _ = P._move(k, s, X, True)
            return s, s.parent

        return jax.lax.scan(body, st, jax.random.split(key, T))[1]

    draws = np.asarray(run(jax.random.key(5), st))
    chain = Counter(_clusters(p, N) for p in draws)
    assert set(chain) <= set(ref)
    # MCMC error: ~ sqrt(p (1 - p) tau / T) with integrated autocorrelation tau ~ 10 moves:
    # <= 0.008 per structure; the tolerance is ~2.5x that plus the reference error
    diffs = {k: abs(chain[k] / T - ref[k]) for k in ref}
    worst = max(diffs, key=diffs.get)
    assert diffs[worst] < 0.02, (sorted(worst), chain[worst] / T, ref[worst])
    assert 0.5 * sum(diffs.values()) < 0.045  # observed 0.02 (worst structure 0.009)
    # the structures holding both pairs {0, 1} and {2, 3} (0.19 of the mass), together
    pairs = sum(v for k, v in ref.items() if 0b0011 in k and 0b1100 in k)
    assert pairs > 0.1
    assert abs(sum(chain[k] for k in ref if 0b0011 in k and 0b1100 in k) / T - pairs) < 0.03
