"""NumPyro programs (generative models): usable with ``Predictive``, handlers and NUTS."""
from . import ginkgo

__all__ = ["ginkgo"]
