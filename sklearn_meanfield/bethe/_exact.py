"""Exact references for small RBMs: enumeration of the smaller layer.

Given one layer's state the other layer's units are independent, so
``log Z`` is a log-sum-exp over the ``2**n`` states of the smaller layer of a
closed form (softplus) sum over the larger one.  Feasible up to ~20 units on
the smaller side; used by the tests and offered to users with small models.
All functions take BernoulliRBM's {0, 1} parameters: weights ``(n_hidden,
n_visible)``, visible biases, hidden biases.

References
----------
.. [1] H. Huang and T. Toyoizumi, "Advanced mean field theory of the
   restricted Boltzmann machine", Phys. Rev. E 91, 050101(R) (2015).
"""

import numpy as np
from scipy.special import expit, logsumexp

__all__ = [
    "MAX_ENUMERATED_UNITS",
    "exact_log_likelihood",
    "exact_log_partition",
    "exact_moments",
    "free_energy",
]

MAX_ENUMERATED_UNITS = 24
_CHUNK = 1 << 14


def free_energy(X, weights, visible_bias, hidden_bias):
    """``F(v) = -log sum_h exp(-E(v, h))`` for each row of ``X`` (BernoulliRBM's).

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_visible)
    weights : ndarray of shape (n_hidden, n_visible)
    visible_bias : ndarray of shape (n_visible,)
    hidden_bias : ndarray of shape (n_hidden,)

    Returns
    -------
    ndarray of shape (n_samples,)
    """
    return -(X @ visible_bias) - np.logaddexp(0.0, X @ weights.T + hidden_bias).sum(
        axis=1
    )


def _states(n_units, start, stop):
    """Rows ``start..stop-1`` of the ``2**n_units`` binary states, as floats."""
    codes = np.arange(start, stop, dtype=np.int64)[:, np.newaxis]
    return ((codes >> np.arange(n_units, dtype=np.int64)) & 1).astype(float)


def _enumerated_side(weights, visible_bias, hidden_bias):
    """Orient the model so that the enumerated layer ("rows") is the smaller.

    Returns ``(K, bias_enum, bias_sum, transposed)`` with ``K`` of shape
    ``(n_enum, n_summed)``.
    """
    weights = np.asarray(weights, dtype=float)
    n_hidden, n_visible = weights.shape
    if min(n_hidden, n_visible) > MAX_ENUMERATED_UNITS:
        raise ValueError(
            f"Exact enumeration needs a layer of at most {MAX_ENUMERATED_UNITS} "
            f"units; got {n_hidden} hidden and {n_visible} visible."
        )
    if n_hidden <= n_visible:
        return (
            weights,
            np.asarray(hidden_bias, float),
            np.asarray(visible_bias, float),
            False,
        )
    return (
        weights.T,
        np.asarray(visible_bias, float),
        np.asarray(hidden_bias, float),
        True,
    )


def _log_weights(K, bias_enum, bias_sum, start, stop):
    states = _states(K.shape[0], start, stop)
    return states, states @ bias_enum + np.logaddexp(0.0, states @ K + bias_sum).sum(
        axis=1
    )


def exact_log_partition(weights, visible_bias, hidden_bias):
    """Exact ``log Z`` of a {0, 1} RBM by enumerating the smaller layer.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.bethe._exact import exact_log_partition
    >>> # No couplings: log Z = sum softplus(b) + sum softplus(c).
    >>> float(exact_log_partition(np.zeros((1, 2)), np.zeros(2), np.zeros(1)))
    ... # doctest: +ELLIPSIS
    2.0794...
    """
    K, bias_enum, bias_sum, _ = _enumerated_side(weights, visible_bias, hidden_bias)
    n_states = 1 << K.shape[0]
    parts = [
        logsumexp(_log_weights(K, bias_enum, bias_sum, s, min(s + _CHUNK, n_states))[1])
        for s in range(0, n_states, _CHUNK)
    ]
    return float(logsumexp(parts))


def exact_moments(weights, visible_bias, hidden_bias):
    """Exact ``log Z``, ``<v>``, ``<h>`` and ``<h v^T>`` by enumeration.

    Returns
    -------
    log_z : float
    mean_visible : ndarray of shape (n_visible,)
    mean_hidden : ndarray of shape (n_hidden,)
    mean_hidden_visible : ndarray of shape (n_hidden, n_visible)
    """
    K, bias_enum, bias_sum, transposed = _enumerated_side(
        weights, visible_bias, hidden_bias
    )
    log_z = exact_log_partition(weights, visible_bias, hidden_bias)
    n_states = 1 << K.shape[0]
    mean_enum = np.zeros(K.shape[0])
    mean_sum = np.zeros(K.shape[1])
    joint = np.zeros(K.shape)
    for start in range(0, n_states, _CHUNK):
        states, log_w = _log_weights(
            K, bias_enum, bias_sum, start, min(start + _CHUNK, n_states)
        )
        p = np.exp(log_w - log_z)
        conditional = expit(states @ K + bias_sum)  # <other layer | state>
        mean_enum += p @ states
        mean_sum += p @ conditional
        joint += states.T @ (p[:, np.newaxis] * conditional)
    if transposed:  # enumerated the visible layer
        return log_z, mean_enum, mean_sum, joint.T
    return log_z, mean_sum, mean_enum, joint


def exact_log_likelihood(X, weights, visible_bias, hidden_bias):
    """Exact ``log p(v)`` of each row of ``X`` (``-F(v) - log Z``)."""
    log_z = exact_log_partition(weights, visible_bias, hidden_bias)
    return -free_energy(X, weights, visible_bias, hidden_bias) - log_z
