"""Plain reference implementations that the tests compare the library against.

Each is the textbook form of a computation that the library writes for speed
(in place, batched, or from statistics it already holds): the tests check that
the fast form gives the same numbers.
"""

import numpy as np
from scipy.special import expit

from sklearn_meanfield.variational._erf_network import (
    negative_bound,
    reestimate_from_stats,
)


def relaxed_sweep(weights, weights_sq, visible_bias, hidden_bias, state, damping):
    """One sweep of the TAP iteration: hidden means, then visible means.

    The arithmetic of ``sklearn_meanfield.bethe._relaxed.relaxed_iterate``
    (and of ``augmented_sweeps``), one new array per step: with
    ``var = m (1 - m)``,
    ``m_h <- sigmoid(c + W m_v - (m_h - 1/2) W**2 var_v)``, then
    ``m_v <- sigmoid(b + W^T m_h - (m_v - 1/2) W**2^T var_h)``, each mixed
    with ``damping`` times its previous value.

    Returns ``((mean_visible, mean_hidden), delta)``, ``delta`` the largest
    change of a mean; ``state`` is not modified.
    """
    m_v, m_h = state
    var_v = m_v * (1.0 - m_v)
    new_h = expit(hidden_bias + weights @ m_v - (m_h - 0.5) * (weights_sq @ var_v))
    if damping:
        new_h = (1.0 - damping) * new_h + damping * m_h
    var_h = new_h * (1.0 - new_h)
    new_v = expit(visible_bias + new_h @ weights - (m_v - 0.5) * (var_h @ weights_sq))
    if damping:
        new_v = (1.0 - damping) * new_v + damping * m_v
    delta = max(np.max(np.abs(new_h - m_h)), np.max(np.abs(new_v - m_v)))
    return (new_v, new_h), float(delta)


def reestimate(theta, X1, T, shape, groups, max_precision=1e8, sample_weight=None):
    """Hyperparameters that maximise the bound at fixed ``Q``, from scratch.

    The bound's statistics at ``theta`` (``negative_bound``) handed to
    ``reestimate_from_stats``, which the fit calls with the statistics it
    already has.  Returns ``(alpha, lambda_groups)``.
    """
    _, stats = negative_bound(
        theta,
        X1,
        T,
        np.ones(shape.n_outputs),
        np.ones(shape.n_weights),
        shape,
        return_grad=False,
        return_stats=True,
        sample_weight=sample_weight,
    )
    return reestimate_from_stats(stats, stats.n_samples, groups, max_precision)
