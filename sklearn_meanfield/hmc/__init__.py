"""Bayesian neural networks sampled by Hybrid Monte Carlo (Neal 1993, 1996)."""

from .regressor import HMCNetworkRegressor

__all__ = ["HMCNetworkRegressor"]
