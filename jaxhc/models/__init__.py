"""NumPyro programs (generative models): usable with ``Predictive``, handlers and NUTS.

One shape for the programs that generate or condition on data (`dpm.dpm`, `cdpm.cdpm`,
`ncrp_hdp.ncrp_hdp`, `ncrp_hdp.ncrp_hdp_truncated`, `pydt.pydt`): every argument is a
keyword, the data is ``X=None`` (given: observed; None: sampled), and the sizes
``num_points`` / ``dim`` are taken from ``X`` when it is given. Each runs with its defaults
under ``Predictive`` (``parallel=True`` or ``False``), ``jit`` and ``vmap`` over keys
(``tests/test_programs_defaults.py`` finds every program here and checks that). `ginkgo.shower`
observes no data (its arguments are the shower's parameters), and
`ginkgo_lambda.lambda_model` only conditions (the trees are summed out in a
``numpyro.factor`` of the given jets).
"""

from . import cdpm, dpm, ginkgo, ginkgo_lambda, ncrp_hdp, pydt

__all__ = ["ginkgo", "ginkgo_lambda", "dpm", "cdpm", "ncrp_hdp", "pydt"]
