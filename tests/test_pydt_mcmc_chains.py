import jax

jax.config.update("jax_enable_x64", True)

"""Several PYDT chains: ``chain_method`` "vectorized" (vmap), "sequential" and "parallel"
(threads) give the same samples for the same key, and the chains differ from one another."""
import numpy as np
import pytest

from jaxhc.inference.pydt import mcmc as P


def test_chain_methods_agree():
    rng = np.random.default_rng(4)
    X = np.concatenate([rng.normal(-2, 0.3, (3, 2)), rng.normal(2, 0.3, (3, 2))])
    kw = dict(
        num_samples=6,
        num_warmup=2,
        num_chains=3,
        progress_bar=False,
        sample_sigma2=False,
        sample_alpha=False,
        sample_beta=False,
    )
    outs = {
        cm: P.pydt_mcmc(jax.random.key(3), X, chain_method=cm, **kw) for cm in ("vectorized", "sequential", "parallel")
    }
    ref = outs["vectorized"]
    assert ref.parent.shape == (3, 6, 11)
    for cm in ("sequential", "parallel"):
        np.testing.assert_array_equal(outs[cm].parent, ref.parent)
        np.testing.assert_allclose(outs[cm].log_lik, ref.log_lik, rtol=1e-12)
        np.testing.assert_allclose(outs[cm].c, ref.c, rtol=1e-12)
    # independent chains: not all the same trajectory
    assert not np.array_equal(ref.times[0], ref.times[1])
    with pytest.raises(ValueError, match="chain_method"):
        P.pydt_mcmc(jax.random.key(3), X, chain_method="pmap", **kw)
