"""Bayesian estimators for scikit-learn built on mean-field methods.

TAP mean-field theory and the Bethe approximation of statistical physics, with
the Hybrid Monte Carlo and variational (ensemble learning) methods they are
measured against; every supervised estimator reports a leave-one-out error that
comes free with its fit.
"""

# The public diagnostics module, reachable as sklearn_meanfield.diagnostics;
# __all__ lists the estimators (the tests and the demo walk it).
from . import diagnostics  # noqa: F401
from .bethe import BetheRBM
from .hmc import HMCNetworkRegressor
from .tap.gpc import TAPGaussianProcessClassifier
from .tap.perceptron import TAPPerceptronClassifier
from .variational import EnsembleLearningRegressor

__version__ = "0.1.0.dev0"

__all__ = [
    "BetheRBM",
    "EnsembleLearningRegressor",
    "HMCNetworkRegressor",
    "TAPGaussianProcessClassifier",
    "TAPPerceptronClassifier",
    "__version__",
]
