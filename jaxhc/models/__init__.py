"""NumPyro programs (generative models): usable with ``Predictive``, handlers and NUTS."""
from . import cdpm, dpm, ginkgo

__all__ = ["ginkgo", "dpm", "cdpm"]
