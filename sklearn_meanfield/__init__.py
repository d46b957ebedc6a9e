"""Bayesian estimators for scikit-learn built on mean-field methods.

TAP mean-field theory and the Bethe approximation of statistical physics, with
the Hybrid Monte Carlo and variational (ensemble learning) methods they are
measured against; every supervised estimator reports a leave-one-out error that
comes free with its fit.
"""

from . import diagnostics
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
    "diagnostics",
]
