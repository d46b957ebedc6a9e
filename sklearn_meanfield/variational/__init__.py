"""Ensemble learning (Gaussian variational Bayes) for erf networks."""

from .regressor import EnsembleLearningRegressor

__all__ = ["EnsembleLearningRegressor"]
