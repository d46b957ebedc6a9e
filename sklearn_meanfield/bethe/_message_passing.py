"""Belief propagation on the RBM factor graph: Bethe free energy and moments.

Everything here is a pure function on arrays.  The public parametrisation is
scikit-learn's BernoulliRBM, with units in {0, 1}: weights ``W`` of shape
``(n_hidden, n_visible)``, visible biases ``b`` and hidden biases ``c``, energy
``E(v, h) = -b.v - c.h - h.W.v``.  Internally the messages live in the +-1 spin
form of Huang and Toyoizumi (2015), reached by ``v = (1 + sigma) / 2`` and
``h = (1 + s) / 2`` (:func:`to_spin`), with the constant term carried into
``log Z`` so that the results keep BernoulliRBM's conventions.

Two forms of message passing are provided.

``"bipartite"``
    Hidden units stay variables of a pairwise model on the bipartite graph and
    messages (cavity fields) flow both ways, with no Gaussian step:
    ``u_{a->i} = f(H_{a->i}, J_ai)`` and ``u_{i->a} = f(H_{i->a}, J_ai)`` with
    ``f(H, J) = [lncosh(H + J) - lncosh(H - J)] / 2``.
``"gaussian"``
    The paper's eq. (3): hidden units summed out, the cavity field on each
    hidden unit taken as Gaussian (messages ``m_{i->a}`` and ``u_{b->i}``);
    free energy eq. (4), moments eq. (6), stability eq. (5).

Both forms are exact on trees and agree with enumeration on small weak models;
the bipartite form stays accurate at the larger weights of trained models
(see ``NOTES.md`` section 4 and ``tests/test_bethe_message_passing.py``), so
it is the estimator's default.

References
----------
.. [1] H. Huang and T. Toyoizumi, "Advanced mean field theory of the
   restricted Boltzmann machine", Phys. Rev. E 91, 050101(R) (2015).
"""

from collections import namedtuple

import numpy as np
from scipy.special import expit

from .._gaussian import gauss_hermite_expectation

__all__ = [
    "BetheSolution",
    "METHODS",
    "bethe_solve",
    "cold_messages",
    "stability",
    "to_spin",
]

METHODS = ("bipartite", "gaussian")

BetheSolution = namedtuple(
    "BetheSolution",
    [
        "log_z",
        "mean_visible",
        "mean_hidden",
        "mean_hidden_visible",
        "messages",
        "n_sweeps",
        "converged",
    ],
)
BetheSolution.__doc__ = """Result of :func:`bethe_solve`, in {0, 1} units.

log_z : float
    Bethe estimate of ``log Z`` in BernoulliRBM's convention.
mean_visible, mean_hidden : ndarray of shape (n_visible,), (n_hidden,)
    ``<v_i>`` and ``<h_a>`` under the model.
mean_hidden_visible : ndarray of shape (n_hidden, n_visible)
    ``<h_a v_i>`` under the model (the negative phase of the weight gradient).
messages : tuple of two ndarrays of shape (n_hidden, n_visible)
    The messages at exit, to warm-start the next call.
n_sweeps : int
    Sweeps run.
converged : bool
    Whether the largest message change fell below ``tol``.
"""


def _log2cosh(x):
    """``log(2 cosh x)``, stable for any ``x``."""
    return np.logaddexp(x, -x)


def _cavity_bias(field, coupling):
    """``[lncosh(field + J) - lncosh(field - J)] / 2``: the message a unit with
    cavity field ``field`` sends through coupling ``J`` (eq. 3b)."""
    # log 2cosh(x) = |x| + log1p(exp(-2|x|)); the two log1p terms are merged,
    # log1p(a) - log1p(b) = log1p((a - b) / (1 + b)), with a, b in (0, 1]:
    # two exps and one log1p per message, nothing can overflow.
    plus = np.abs(field + coupling)
    minus = np.abs(field - coupling)
    exp_plus = np.exp(-2.0 * plus)
    exp_minus = np.exp(-2.0 * minus)
    return 0.5 * (plus - minus + np.log1p((exp_plus - exp_minus) / (1.0 + exp_minus)))


def to_spin(weights, visible_bias, hidden_bias):
    """Convert {0, 1} RBM parameters to the +-1 spin form, constant included.

    With ``v = (1 + sigma) / 2`` and ``h = (1 + s) / 2``,
    ``-E(v, h) = const + sum J_ai s_a sigma_i + sum phi_i sigma_i + sum theta_a s_a``.

    Parameters
    ----------
    weights : ndarray of shape (n_hidden, n_visible)
    visible_bias : ndarray of shape (n_visible,)
    hidden_bias : ndarray of shape (n_hidden,)

    Returns
    -------
    couplings : ndarray of shape (n_hidden, n_visible)
        ``J = W / 4``.
    visible_field : ndarray of shape (n_visible,)
        ``phi = b / 2 + sum_a W_ai / 4``.
    hidden_field : ndarray of shape (n_hidden,)
        ``theta = c / 2 + sum_i W_ai / 4``.
    constant : float
        ``sum b / 2 + sum c / 2 + sum W / 4``, so that
        ``log Z = constant + log Z_spin``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.bethe._message_passing import to_spin
    >>> J, phi, theta, const = to_spin(np.array([[4.0]]), np.zeros(1), np.zeros(1))
    >>> float(J[0, 0]), float(phi[0]), float(theta[0]), float(const)
    (1.0, 1.0, 1.0, 1.0)
    """
    weights = np.asarray(weights, dtype=float)
    visible_bias = np.asarray(visible_bias, dtype=float)
    hidden_bias = np.asarray(hidden_bias, dtype=float)
    couplings = weights / 4.0
    visible_field = visible_bias / 2.0 + couplings.sum(axis=0)
    hidden_field = hidden_bias / 2.0 + couplings.sum(axis=1)
    constant = visible_bias.sum() / 2.0 + hidden_bias.sum() / 2.0 + couplings.sum()
    return couplings, visible_field, hidden_field, float(constant)


def cold_messages(n_hidden, n_visible):
    """Zero messages (no information yet), the start of a cold solve."""
    return (np.zeros((n_hidden, n_visible)), np.zeros((n_hidden, n_visible)))


# --------------------------------------------------------------------------
# Bipartite form: messages (u_hv, u_vh), both cavity biases of shape (M, N);
# u_hv[a, i] = u_{a->i} (hidden a to visible i), u_vh[a, i] = u_{i->a}.
# --------------------------------------------------------------------------


def _bipartite_visible_cavity(J, phi, u_hv):
    # H_{i->a} = phi_i + sum_{b != a} u_{b->i}
    return (phi + u_hv.sum(axis=0)) - u_hv


def _bipartite_hidden_cavity(J, theta, u_vh):
    # H_{a->i} = theta_a + sum_{j != i} u_{j->a}
    return (theta + u_vh.sum(axis=1))[:, np.newaxis] - u_vh


def _bipartite_sweep(J, phi, theta, u_hv, u_vh, damping):
    """One sweep: visible-to-hidden messages, then hidden-to-visible."""
    new_vh = _cavity_bias(_bipartite_visible_cavity(J, phi, u_hv), J)
    if damping:
        new_vh = (1.0 - damping) * new_vh + damping * u_vh
    new_hv = _cavity_bias(_bipartite_hidden_cavity(J, theta, new_vh), J)
    if damping:
        new_hv = (1.0 - damping) * new_hv + damping * u_hv
    delta = max(np.max(np.abs(new_vh - u_vh)), np.max(np.abs(new_hv - u_hv)))
    return new_hv, new_vh, delta


def _bipartite_log_z(J, phi, theta, u_hv, u_vh):
    """Bethe ``log Z`` (spin form): site terms minus one term per edge."""
    cav_v = _bipartite_visible_cavity(J, phi, u_hv)
    cav_h = _bipartite_hidden_cavity(J, theta, u_vh)
    # Visible site i: sum over sigma_i of e^{phi sigma} prod_a 2cosh(H_{a->i} + J sigma)
    log_z_visible = np.logaddexp(
        phi + _log2cosh(cav_h + J).sum(axis=0),
        -phi + _log2cosh(cav_h - J).sum(axis=0),
    )
    log_z_hidden = np.logaddexp(
        theta + _log2cosh(cav_v + J).sum(axis=1),
        -theta + _log2cosh(cav_v - J).sum(axis=1),
    )
    # Edge (a, i): sum over sigma, s of e^{J sigma s + H_{i->a} sigma + H_{a->i} s}
    log_z_edge = np.logaddexp(
        J + _log2cosh(cav_v + cav_h), -J + _log2cosh(cav_v - cav_h)
    )
    return float(log_z_visible.sum() + log_z_hidden.sum() - log_z_edge.sum())


def _bipartite_moments(J, phi, theta, u_hv, u_vh):
    """Node and edge beliefs, returned in {0, 1} units."""
    mean_visible = expit(2.0 * (phi + u_hv.sum(axis=0)))
    mean_hidden = expit(2.0 * (theta + u_vh.sum(axis=1)))
    cav_v = _bipartite_visible_cavity(J, phi, u_hv)
    cav_h = _bipartite_hidden_cavity(J, theta, u_vh)
    # Edge belief b(sigma, s) ~ e^{J sigma s + H_{i->a} sigma + H_{a->i} s}:
    # P(sigma=+1) P(s=+1 | sigma=+1), each a logistic (no cancellation).
    p_visible = expit(2.0 * (cav_v + _cavity_bias(cav_h, J)))
    p_hidden_given = expit(2.0 * (cav_h + J))
    return mean_visible, mean_hidden, p_visible * p_hidden_given


def _bipartite_stability(J, phi, theta, u_hv, u_vh, n_steps):
    """Growth factor of the variance of message perturbations per sweep.

    The squared derivatives of the message updates propagate variances
    (the bipartite counterpart of eq. 5); the ratio of total variance in
    successive sweeps converges to the spectral radius of that linear map.
    """
    cav_v = _bipartite_visible_cavity(J, phi, u_hv)
    cav_h = _bipartite_hidden_cavity(J, theta, u_vh)
    # d f(H, J) / dH = [tanh(H + J) - tanh(H - J)] / 2
    gain_vh = (0.5 * (np.tanh(cav_v + J) - np.tanh(cav_v - J))) ** 2
    gain_hv = (0.5 * (np.tanh(cav_h + J) - np.tanh(cav_h - J))) ** 2
    var_hv = np.ones_like(J)
    return _power_iteration(
        var_hv,
        lambda v_hv: gain_hv * _exclusive_row_sum(gain_vh * _exclusive_col_sum(v_hv)),
        n_steps,
    )


def _exclusive_col_sum(x):
    return x.sum(axis=0) - x


def _exclusive_row_sum(x):
    return x.sum(axis=1, keepdims=True) - x


def _power_iteration(start, step, n_steps):
    """Ratio ``S(t+1) / S(t)`` of total variance after ``n_steps`` steps."""
    current = start / max(start.sum(), np.finfo(float).tiny)
    ratio = 0.0
    for _ in range(n_steps):
        nxt = step(current)
        total = nxt.sum()
        ratio = float(total)  # current sums to one
        if not total > 0:
            return 0.0
        current = nxt / total
    return ratio


# --------------------------------------------------------------------------
# Gaussian (paper's) form: messages (u_hv, m_vh) of shape (M, N);
# u_hv[a, i] = u_{a->i}, m_vh[a, i] = m_{i->a} (cavity magnetisation).
# --------------------------------------------------------------------------


def _gaussian_cavity_mean(J, theta, m_vh):
    # theta_a + G_{a->i}, with G_{a->i} = sum_{j != i} J_aj m_{j->a}
    weighted = J * m_vh
    return (theta + weighted.sum(axis=1))[:, np.newaxis] - weighted


def _gaussian_sweep(J, phi, theta, u_hv, m_vh, damping):
    """Eq. (3a) then eq. (3b)."""
    new_m = np.tanh(_bipartite_visible_cavity(J, phi, u_hv))
    if damping:
        new_m = (1.0 - damping) * new_m + damping * m_vh
    new_u = _cavity_bias(_gaussian_cavity_mean(J, theta, new_m), J)
    if damping:
        new_u = (1.0 - damping) * new_u + damping * u_hv
    delta = max(np.max(np.abs(new_m - m_vh)), np.max(np.abs(new_u - u_hv)))
    return new_u, new_m, delta


def _gaussian_log_z(J, phi, theta, u_hv, m_vh):
    """Eq. (4), ``log Z = sum_i ln Z_i - sum_a (deg_a - 1) ln Z_a``.

    The ``exp(Xi^2 / 2)`` factors of ``Z_i`` and ``Z_a`` cancel exactly between
    the two sums (``Xi_{a->i}^2 = Xi_a^2 - J_ai^2 (1 - m_{i->a}^2)``), so they
    are left out.
    """
    cavity = _gaussian_cavity_mean(J, theta, m_vh)
    log_z_visible = np.logaddexp(
        phi + _log2cosh(cavity + J).sum(axis=0),
        -phi + _log2cosh(cavity - J).sum(axis=0),
    )
    log_z_hidden = _log2cosh(theta + (J * m_vh).sum(axis=1))
    n_visible = J.shape[1]
    return float(log_z_visible.sum() - (n_visible - 1) * log_z_hidden.sum())


def _gaussian_moments(J, phi, theta, u_hv, m_vh, n_points=32):
    """Eq. (6), returned in {0, 1} units."""
    m = np.tanh(phi + u_hv.sum(axis=0))
    mean_field = theta + J @ m
    std = np.sqrt(np.maximum((J**2) @ (1.0 - m**2), 0.0))
    m_hat = gauss_hermite_expectation(np.tanh, mean_field, std, n_points)
    second = gauss_hermite_expectation(lambda x: np.tanh(x) ** 2, mean_field, std)
    a_factor = 1.0 - second
    corr = np.outer(m_hat, m) + J * (1.0 - m**2) * a_factor[:, np.newaxis]
    mean_visible = 0.5 * (1.0 + m)
    mean_hidden = 0.5 * (1.0 + m_hat)
    joint = 0.25 * (1.0 + m[np.newaxis, :] + m_hat[:, np.newaxis] + corr)
    return mean_visible, mean_hidden, np.clip(joint, 0.0, 1.0)


def _gaussian_stability(J, phi, theta, u_hv, m_vh, n_steps):
    """Eq. (5): growth factor of the variance messages ``V_{i->a}``."""
    cavity = _gaussian_cavity_mean(J, theta, m_vh)
    gamma = cavity + J
    gain = (np.tanh(gamma) - np.tanh(gamma - 2.0 * J)) ** 2
    m_cavity = np.tanh(_bipartite_visible_cavity(J, phi, u_hv))
    prefactor = (1.0 - m_cavity**2) ** 2 / 4.0
    J2 = J**2

    def step(v):
        # P_{b->i} = sum_{j != i} J_bj^2 V_{j->b}
        pressure = _exclusive_row_sum(J2 * v)
        return prefactor * _exclusive_col_sum(pressure * gain)

    return _power_iteration(np.ones_like(J), step, n_steps)


_FORMS = {
    "bipartite": (
        _bipartite_sweep,
        _bipartite_log_z,
        _bipartite_moments,
        _bipartite_stability,
    ),
    "gaussian": (
        _gaussian_sweep,
        _gaussian_log_z,
        _gaussian_moments,
        _gaussian_stability,
    ),
}


def bethe_solve(
    weights,
    visible_bias,
    hidden_bias,
    *,
    method="bipartite",
    messages=None,
    damping=0.5,
    tol=1e-6,
    max_sweeps=500,
    compute_log_z=True,
):
    """Run message passing to a fixed point; return log Z and the moments.

    Parameters
    ----------
    weights : ndarray of shape (n_hidden, n_visible)
        BernoulliRBM's ``components_``.
    visible_bias : ndarray of shape (n_visible,)
    hidden_bias : ndarray of shape (n_hidden,)
    method : {"bipartite", "gaussian"}, default="bipartite"
        The form of message passing (see the module docstring).
    messages : tuple of two ndarrays or None, default=None
        Warm start (the ``messages`` of a previous solution for the same
        ``method``); None starts from zero messages.
    damping : float in [0, 1), default=0.5
        Fraction of the old message kept at each update.
    tol : float, default=1e-6
        Stop when no message changes by more than ``tol`` in a sweep.
    max_sweeps : int, default=500
        Upper bound on sweeps.
    compute_log_z : bool, default=True
        Skip the free energy (NaN is returned) when only moments are needed.

    Returns
    -------
    BetheSolution

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.bethe._message_passing import bethe_solve
    >>> # One hidden unit: a tree, where the Bethe free energy is exact.
    >>> W, b, c = np.array([[1.0, -2.0]]), np.array([0.5, 0.0]), np.array([0.3])
    >>> sol = bethe_solve(W, b, c)
    >>> v = np.array([[0, 0], [0, 1], [1, 0], [1, 1]])
    >>> exact = np.log(np.exp(v @ b + np.logaddexp(0, v @ W.T + c).ravel()).sum())
    >>> bool(abs(sol.log_z - exact) < 1e-8), sol.converged
    (True, True)
    """
    if method not in _FORMS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}.")
    sweep, log_z_fn, moments_fn, _ = _FORMS[method]
    J, phi, theta, constant = to_spin(weights, visible_bias, hidden_bias)
    if messages is None:
        first, second = cold_messages(*J.shape)
    else:
        first, second = messages
    converged = False
    n_sweeps = 0
    while n_sweeps < max_sweeps:
        first, second, delta = sweep(J, phi, theta, first, second, damping)
        n_sweeps += 1
        if delta < tol:
            converged = True
            break
    log_z = (
        constant + log_z_fn(J, phi, theta, first, second) if compute_log_z else np.nan
    )
    mean_visible, mean_hidden, joint = moments_fn(J, phi, theta, first, second)
    return BetheSolution(
        log_z, mean_visible, mean_hidden, joint, (first, second), n_sweeps, converged
    )


def stability(
    weights, visible_bias, hidden_bias, messages, *, method="bipartite", n_steps=100
):
    """Growth factor of the message-variance iteration at a fixed point (eq. 5).

    Below 1 perturbations of the messages die out and the Bethe solution is
    locally stable; above 1 they grow and the approximation is unreliable (the
    spin-glass susceptibility diverges).

    Parameters
    ----------
    weights, visible_bias, hidden_bias : ndarray
        {0, 1} parameters as in :func:`bethe_solve`.
    messages : tuple of two ndarrays
        The fixed point, ``BetheSolution.messages``.
    method : {"bipartite", "gaussian"}, default="bipartite"
        The form that produced ``messages``.
    n_steps : int, default=100
        Power-iteration steps.

    Returns
    -------
    float
        ``lambda = S(t + 1) / S(t)`` after ``n_steps`` sweeps of the variance
        messages, ``S`` their total.
    """
    if method not in _FORMS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}.")
    J, phi, theta, _ = to_spin(weights, visible_bias, hidden_bias)
    return _FORMS[method][3](J, phi, theta, messages[0], messages[1], n_steps)
