"""Hybrid Monte Carlo on flat parameter vectors, several chains at once.

Every function works on a batch of independent chains stored as rows of a
``(n_chains, n_params)`` array: for small models the cost of a leapfrog step is
Python overhead, so advancing the chains together in one array costs little more
than advancing one.  ``log_prob_and_grad(q)`` maps such a batch to the log
density (up to a constant) per chain and its gradient.

Step sizes are per parameter (a diagonal mass matrix ``M_i = 1 / eps_i^2`` with
unit step, as in Neal 1996, section 3.5), momenta are standard normal.

References
----------
Duane, S., Kennedy, A. D., Pendleton, B. J. and Roweth, D. (1987). Hybrid Monte
Carlo. Physics Letters B, 195(2), 216-222.

Horowitz, A. M. (1991). A generalized guided Monte Carlo algorithm. Physics
Letters B, 268(2), 247-252.

Neal, R. M. (1993). Bayesian learning via stochastic dynamics. Advances in
Neural Information Processing Systems 5, 475-482.

Neal, R. M. (1996). Bayesian Learning for Neural Networks. Springer.

Hoffman, M. D. and Gelman, A. (2014). The No-U-Turn sampler. Journal of Machine
Learning Research, 15, 1593-1623 (dual averaging, section 3.2).
"""

from typing import NamedTuple

import numpy as np

__all__ = [
    "DualAveraging",
    "HMCStep",
    "hmc_step",
    "leapfrog",
]

# An energy error above this is a divergence: the trajectory left the region the
# step size can integrate, and is rejected whatever the uniform draw says.
DIVERGENCE_THRESHOLD = 1000.0


def leapfrog(q, p, grad, step_sizes, n_steps, log_prob_and_grad):
    """Integrate Hamiltonian dynamics with ``n_steps`` leapfrog steps.

    Implements Neal (1993), eq. 15 with per-parameter step sizes:
    ``p += eps/2 grad; (q += eps p; p += eps grad) x (L - 1); q += eps p;
    p += eps/2 grad`` where ``grad`` is the gradient of the log density (minus
    the gradient of the energy).

    Parameters
    ----------
    q, p, grad : ndarray of shape (n_chains, n_params)
        Position, momentum and log-density gradient at ``q``.
    step_sizes : ndarray broadcastable to (n_chains, n_params)
        Step size of every coordinate.
    n_steps : int
        Number of leapfrog steps (at least 1).
    log_prob_and_grad : callable
        Maps ``q`` to ``(log_prob of shape (n_chains,), grad)``.

    Returns
    -------
    q, p : ndarray of shape (n_chains, n_params)
        The end point.
    log_prob, grad : ndarray
        Log density and gradient at the end point.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.hmc._sampler import leapfrog
    >>> def standard_normal(q):
    ...     return -0.5 * np.sum(q**2, axis=1), -q
    >>> q, p = np.array([[1.0]]), np.array([[0.0]])
    >>> # A quarter period of the harmonic oscillator: q -> 0, p -> -1.
    >>> q, p, _, _ = leapfrog(q, p, -q, 0.01 * np.pi / 2, 100, standard_normal)
    >>> bool(abs(q[0, 0]) < 1e-3), bool(abs(p[0, 0] + 1) < 1e-3)
    (True, True)
    """
    p = p + 0.5 * step_sizes * grad
    for step in range(n_steps):
        q = q + step_sizes * p
        log_prob, grad = log_prob_and_grad(q)
        if step < n_steps - 1:
            p = p + step_sizes * grad
    p = p + 0.5 * step_sizes * grad
    return q, p, log_prob, grad


class HMCStep(NamedTuple):
    """The state after one transition, per chain.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.hmc._sampler import HMCStep
    >>> sorted(HMCStep._fields)[:3]
    ['accept_prob', 'accepted', 'divergent']
    """

    q: np.ndarray
    log_prob: np.ndarray
    grad: np.ndarray
    momentum: np.ndarray
    accepted: np.ndarray
    accept_prob: np.ndarray
    energy_error: np.ndarray
    divergent: np.ndarray


def _trajectory(q, p, log_prob, grad, step_sizes, n_leapfrog, log_prob_and_grad):
    """The leapfrog end point and the change of total energy along the way.

    Returns ``q, p, log_prob, grad`` at the end point, the energy error
    (``inf`` where the end point, its gradient or the error is not finite)
    and whether they are finite.  Overflows on the way are expected of
    divergent trajectories and silenced.
    """
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        q_new, p_new, log_prob_new, grad_new = leapfrog(
            q, p, grad, step_sizes, n_leapfrog, log_prob_and_grad
        )
        energy_error = (-log_prob_new + 0.5 * np.sum(p_new**2, axis=1)) - (
            -log_prob + 0.5 * np.sum(p**2, axis=1)
        )
        finite = (
            np.isfinite(energy_error)
            & np.all(np.isfinite(q_new), axis=1)
            & np.all(np.isfinite(grad_new), axis=1)
        )
    energy_error = np.where(finite, energy_error, np.inf)
    return q_new, p_new, log_prob_new, grad_new, energy_error, finite


def hmc_step(
    q,
    log_prob,
    grad,
    log_prob_and_grad,
    step_sizes,
    n_leapfrog,
    random_state,
    *,
    momentum=None,
    persistence=0.0,
    metropolis=True,
):
    """One Hybrid Monte Carlo transition of every chain.

    The momentum is refreshed as ``p <- a p + sqrt(1 - a^2) n`` (Neal 1993,
    eq. 16; ``a = persistence``, a full refresh when 0), ``n_leapfrog`` leapfrog
    steps propose a new state, and a Metropolis test on the change of total
    energy accepts it.  A rejection negates the momentum, which keeps the chain
    exact with partial refreshes (Horowitz 1991).  With ``metropolis=False``
    every finite proposal is accepted: with one leapfrog step this is Neal's
    stochastic dynamics, which is biased by O(eps^2).

    Parameters
    ----------
    q, log_prob, grad : ndarray
        Current positions (n_chains, n_params), log densities (n_chains,) and
        gradients.
    log_prob_and_grad : callable
        Maps positions to ``(log_prob, grad)``.
    step_sizes : ndarray broadcastable to (n_chains, n_params)
    n_leapfrog : int
    random_state : numpy.random.Generator or RandomState
    momentum : ndarray of shape (n_chains, n_params) or None, default=None
        Previous momentum, used only when ``persistence > 0``.
    persistence : float in [0, 1), default=0.0
    metropolis : bool, default=True

    Returns
    -------
    step : HMCStep
        New state, momentum, and per chain: ``accepted`` (bool),
        ``accept_prob`` (min(1, exp(-dH)), 0 for divergent or non-finite
        proposals), ``energy_error`` (dH, ``inf`` if not finite) and
        ``divergent``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.hmc._sampler import hmc_step
    >>> def standard_normal(q):
    ...     return -0.5 * np.sum(q**2, axis=1), -q
    >>> q = np.zeros((3, 2))
    >>> log_prob, grad = standard_normal(q)
    >>> step = hmc_step(q, log_prob, grad, standard_normal, 0.01, 10,
    ...                 np.random.default_rng(0))
    >>> # A tiny step conserves the energy: every proposal is accepted.
    >>> bool(np.all(step.accepted)), bool(np.all(np.abs(step.energy_error) < 1e-3))
    (True, True)
    """
    noise = random_state.standard_normal(q.shape)
    if momentum is None or persistence == 0.0:
        p = noise
    else:
        p = persistence * momentum + np.sqrt(1.0 - persistence**2) * noise
    q_new, p_new, log_prob_new, grad_new, energy_error, finite = _trajectory(
        q, p, log_prob, grad, step_sizes, n_leapfrog, log_prob_and_grad
    )
    divergent = energy_error > DIVERGENCE_THRESHOLD
    accept_prob = np.where(divergent, 0.0, np.exp(-np.maximum(energy_error, 0.0)))
    if metropolis:
        accepted = (random_state.uniform(size=q.shape[0]) < accept_prob) & ~divergent
    else:
        accepted = finite & ~divergent
    keep = accepted[:, None]
    return HMCStep(
        q=np.where(keep, q_new, q),
        log_prob=np.where(accepted, log_prob_new, log_prob),
        grad=np.where(keep, grad_new, grad),
        momentum=np.where(keep, p_new, -p),
        accepted=accepted,
        accept_prob=accept_prob,
        energy_error=energy_error,
        divergent=divergent,
    )


class DualAveraging:
    """Dual-averaging adaptation of a log step-size multiplier, per chain.

    Drives the mean acceptance probability to ``target`` during warm-up
    (Hoffman and Gelman 2014, algorithm 5); :meth:`final` returns the averaged
    value to freeze for sampling so that the chain is exact afterwards.

    Parameters
    ----------
    initial : ndarray of shape (n_chains,)
        Initial log multiplier.
    target : float, default=0.8
        Target acceptance probability.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.hmc._sampler import DualAveraging
    >>> # Acceptance exp(-eps) for a step eps: the target 0.8 needs
    >>> # eps = -log(0.8) = 0.223.
    >>> adapter = DualAveraging(np.zeros(1), target=0.8)
    >>> log_eps = adapter.log_value
    >>> for _ in range(2000):
    ...     log_eps = adapter.update(np.exp(-np.exp(log_eps)))
    >>> bool(abs(np.exp(adapter.final())[0] + np.log(0.8)) < 0.01)
    True
    """

    def __init__(self, initial, target=0.8, gamma=0.05, t0=10.0, kappa=0.75):
        self.initial = np.asarray(initial, dtype=float)
        self.mu = self.initial + np.log(10.0)
        self.target = target
        self.gamma = gamma
        self.t0 = t0
        self.kappa = kappa
        self.t = 0
        self.h_bar = np.zeros_like(self.initial)
        self.log_value = self.initial.copy()
        self.log_value_bar = self.initial.copy()

    def update(self, accept_prob):
        """Record acceptance probabilities; return the next log multiplier."""
        self.t += 1
        t = self.t
        w = 1.0 / (t + self.t0)
        self.h_bar = (1.0 - w) * self.h_bar + w * (self.target - accept_prob)
        self.log_value = self.mu - np.sqrt(t) / self.gamma * self.h_bar
        eta = t ** (-self.kappa)
        self.log_value_bar = eta * self.log_value + (1.0 - eta) * self.log_value_bar
        return self.log_value

    def final(self):
        """The averaged log multiplier to use after warm-up."""
        return self.log_value_bar.copy()
