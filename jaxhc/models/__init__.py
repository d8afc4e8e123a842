"""NumPyro programs (generative models): usable with ``Predictive``, handlers and NUTS."""
from . import cdpm, dpm, ginkgo, ncrp_hdp, pydt

__all__ = ["ginkgo", "dpm", "cdpm", "ncrp_hdp", "pydt"]
