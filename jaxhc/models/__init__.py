"""NumPyro programs (generative models): usable with ``Predictive``, handlers and NUTS."""

from . import cdpm, dpm, ginkgo, ginkgo_lambda, ncrp_hdp, pydt

__all__ = ["ginkgo", "ginkgo_lambda", "dpm", "cdpm", "ncrp_hdp", "pydt"]
