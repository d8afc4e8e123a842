"""Inference algorithms: each a pure function or an init/step kernel pair."""
from .bhc import BHCResult, bhc, bhc_predictive, tree_log_evidence
from .ginkgo_fit import LambdaFit, LambdaPosterior, fit_lambda, lambda_model, sample_lambda
from .hyperopt import HyperoptResult, learn_hyperparameters
from .rbhc import rbhc

__all__ = [
    "BHCResult", "HyperoptResult", "LambdaFit", "LambdaPosterior", "bhc", "bhc_predictive", "fit_lambda",
    "lambda_model", "learn_hyperparameters", "rbhc", "sample_lambda", "tree_log_evidence",
]
