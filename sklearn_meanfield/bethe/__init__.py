"""Bethe approximation (belief propagation) for the restricted Boltzmann machine."""

from .rbm import BetheRBM

__all__ = ["BetheRBM"]
