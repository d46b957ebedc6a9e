"""Targets of known moments for the HMC sampler tests."""

import numpy as np


def gaussian_target(mean, cov):
    """``log N(q; mean, cov)`` (up to a constant) and its gradient, batched
    over the rows of ``q``."""
    precision = np.linalg.inv(cov)

    def log_prob_and_grad(q):
        centred = q - mean
        grad = -centred @ precision
        return 0.5 * np.sum(centred * grad, axis=1), grad

    return log_prob_and_grad
