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

Hoffman, M. D., Radul, A. and Sountsov, P. (2021). An adaptive MCMC scheme for
setting trajectory lengths in Hamiltonian Monte Carlo. Proceedings of AISTATS,
PMLR 130, 3907-3915 (ChEES, Halton jitter, Adam on the log trajectory length).

Neal, R. M. (2011). MCMC using Hamiltonian dynamics. In Handbook of Markov
Chain Monte Carlo, chapter 5 (section 5.5.5: an approximate gradient in the
trajectory, the exact energy in the acceptance test).

Rasmussen, C. E. (2003). Gaussian processes to speed up hybrid Monte Carlo for
expensive Bayesian integrals. Bayesian Statistics 7, 651-659.

Stan Development Team. Stan Reference Manual, section "HMC algorithm
parameters: automatic parameter tuning" (windowed adaptation of the step size
and a diagonal metric: a fast initial buffer, doubling slow windows, a
terminal buffer; the variance estimate regularised toward a constant).

Betancourt, M. (2017). A conceptual introduction to Hamiltonian Monte Carlo.
arXiv:1701.02434 (section 4.2: the metric as the inverse covariance of the
target, adapted in warm-up).

Seyboldt, A., Carlson, E. L. and Carpenter, B. (2026). Preconditioning
Hamiltonian Monte Carlo by minimizing Fisher divergence. arXiv:2603.18845
(the diagonal metric from the variances of the draws and of the gradients).
"""

from typing import NamedTuple

import numpy as np

__all__ = [
    "AdaptiveDraws",
    "ChEESAdaptation",
    "DualAveraging",
    "MassMatrixAdaptation",
    "RunningVariance",
    "SplitTarget",
    "adaptive_hmc",
    "chees_gradient",
    "halton",
    "HMCStep",
    "hmc_step",
    "leapfrog",
    "metric_windows",
    "metropolis_test",
    "regularized_variance",
]

# An energy error above this is a divergence: the trajectory left the region the
# step size can integrate, and is rejected whatever the uniform draw says.
DIVERGENCE_THRESHOLD = 1000.0


class SplitTarget(NamedTuple):
    """A log density whose leapfrog kicks follow a cheaper force field.

    Leapfrog with any force field that depends on the position alone is
    volume-preserving and reversible (each kick and drift is a shear, and the
    sequence is symmetric), so a Metropolis test on the exact energy keeps
    the chain exact whatever field moves it; a field close to the gradient
    only keeps the acceptance high (Neal 2011, section 5.5.5, "Using
    approximations to compute the trajectory"; Rasmussen 2003).
    :func:`leapfrog` calls ``gradient`` at every step and ``log_prob`` once,
    at the end point.  The kick at the start of a trajectory must use the
    same field (the ``grad`` of the chain's state), which calling the target
    provides.

    Parameters
    ----------
    log_prob : callable
        ``q -> log density (n_chains,)``, exact: the Metropolis test uses it.
    gradient : callable
        ``q -> (n_chains, n_params)``, the force of the kicks, such as the
        gradient in single precision.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.hmc._sampler import SplitTarget
    >>> target = SplitTarget(lambda q: -0.5 * np.sum(q**2, axis=1),
    ...                      lambda q: -q.astype(np.float32).astype(float))
    >>> log_prob, grad = target(np.ones((1, 2)))
    >>> log_prob, grad
    (array([-1.]), array([[-1., -1.]]))
    """

    log_prob: object
    gradient: object

    def __call__(self, q):
        """``(log_prob(q), gradient(q))``, the call of a plain target."""
        return self.log_prob(q), self.gradient(q)


def metropolis_test(log_ratio, log_uniform):
    """Metropolis acceptance of proposals with log ratios ``log_ratio``.

    A non-finite ratio (an overflowing proposal) rejects.

    Parameters
    ----------
    log_ratio : ndarray
        Log acceptance ratio of every proposal.
    log_uniform : ndarray
        Logs of uniform draws, shaped like ``log_ratio``.

    Returns
    -------
    accept_prob : ndarray
        ``min(1, exp(log_ratio))``, 0 where the ratio is not finite.
    accepted : ndarray of bool

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.hmc._sampler import metropolis_test
    >>> prob, accepted = metropolis_test(np.array([0.5, np.log(0.25), np.nan]),
    ...                                  np.log([0.9, 0.3, 0.1]))
    >>> prob, accepted
    (array([1.  , 0.25, 0.  ]), array([ True, False, False]))
    """
    log_ratio = np.where(np.isfinite(log_ratio), log_ratio, -np.inf)
    return np.exp(np.minimum(log_ratio, 0.0)), log_uniform < log_ratio


def _step_evaluation(target):
    """What every leapfrog step evaluates, and the end point's log density.

    A plain target gives both at every step (the last step's log density is
    the end point's); a :class:`SplitTarget` gives only its force field, and
    its log density is evaluated once at the end.
    """
    if isinstance(target, SplitTarget):
        gradient = target.gradient
        return (lambda q: (None, gradient(q))), target.log_prob
    return target, None


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
    n_steps : int or ndarray of int of shape (n_chains,)
        Number of leapfrog steps (at least 1), the same for every chain or one
        per chain; a chain with fewer steps than the longest stays at its end
        point while the others move on (masked, so that its result does not
        depend on the other chains of the batch).
    log_prob_and_grad : callable or SplitTarget
        Maps ``q`` to ``(log_prob of shape (n_chains,), grad)``; a
        :class:`SplitTarget` kicks with its force field and evaluates its
        log density only at the end point.

    Returns
    -------
    q, p : ndarray of shape (n_chains, n_params)
        The end point.
    log_prob, grad : ndarray
        Log density and gradient (force) at the end point.

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
    evaluate, end_log_prob = _step_evaluation(log_prob_and_grad)
    if np.ndim(n_steps) > 0:
        q, p, log_prob, grad = _masked_leapfrog(
            q, p, grad, step_sizes, n_steps, evaluate
        )
    else:
        p = p + 0.5 * step_sizes * grad
        for step in range(n_steps):
            q = q + step_sizes * p
            log_prob, grad = evaluate(q)
            if step < n_steps - 1:
                p = p + step_sizes * grad
        p = p + 0.5 * step_sizes * grad
    if end_log_prob is not None:
        log_prob = end_log_prob(q)
    return q, p, log_prob, grad


def _masked_leapfrog(q, p, grad, step_sizes, n_steps, evaluate):
    """:func:`leapfrog` with ``n_steps[c]`` steps for chain ``c``.

    The batch runs ``max(n_steps)`` steps; a chain past its own count keeps
    its position, momentum and gradient (the log density is evaluated there
    again and discarded), so each row equals a run of that chain alone.
    ``evaluate`` may return None for the log density (a :class:`SplitTarget`,
    whose caller evaluates it at the end points).
    """
    n_steps = np.asarray(n_steps)
    step_sizes = np.broadcast_to(step_sizes, q.shape)
    p = p + 0.5 * step_sizes * grad
    log_prob = None
    # While every chain moves and kicks on, the masks select the new values
    # everywhere: the same steps without them (the same numbers, a few array
    # operations fewer per step, which count at a few hundred rows).
    n_unmasked = max(int(np.min(n_steps)) - 1, 0)
    for _ in range(n_unmasked):
        q = q + step_sizes * p
        log_prob, grad = evaluate(q)
        p = p + step_sizes * grad
    for step in range(n_unmasked, int(np.max(n_steps))):
        moving = (step < n_steps)[:, None]
        q = np.where(moving, q + step_sizes * p, q)
        new_log_prob, new_grad = evaluate(q)
        if new_log_prob is not None:
            log_prob = (
                new_log_prob
                if log_prob is None
                else np.where(moving[:, 0], new_log_prob, log_prob)
            )
        grad = np.where(moving, new_grad, grad)
        p = np.where((step < n_steps - 1)[:, None], p + step_sizes * grad, p)
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
    start: np.ndarray = None
    """Position the trajectory started from, (n_chains, n_params)."""
    proposal: np.ndarray = None
    """Its end point (before the Metropolis test)."""
    proposal_momentum: np.ndarray = None
    """The momentum at the end point."""


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
    n_leapfrog : int or ndarray of int of shape (n_chains,)
        Leapfrog steps, the same for every chain or one per chain.
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
        ``divergent``; and the trajectory's ``start``, end point
        (``proposal``) and end momentum (``proposal_momentum``), which
        trajectory-length adaptation uses.

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
        start=q,
        proposal=q_new,
        proposal_momentum=p_new,
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


def halton(index, base=2):
    """Element ``index`` (from 1) of the van der Corput sequence in ``base``.

    Quasi-random numbers in (0, 1) that fill the interval evenly: the
    trajectory-length jitter of ChEES-HMC, the same for every chain at a given
    iteration, so that it does not depend on which chains share a batch.

    Examples
    --------
    >>> from sklearn_meanfield.hmc._sampler import halton
    >>> [halton(i) for i in range(1, 6)]
    [0.5, 0.25, 0.75, 0.125, 0.625]
    """
    value, fraction, index = 0.0, 1.0 / base, int(index)
    while index > 0:
        value += fraction * (index % base)
        index //= base
        fraction /= base
    return value


def chees_gradient(start, proposal, proposal_momentum, centre, time, rate=False):
    """Per-chain estimate of d ChEES / d log T (Hoffman, Radul and Sountsov 2021).

    ChEES, the expected squared change of the squared distance from the
    target's mean, ``E[(|q' - m|^2 - |q - m|^2)^2] / 4``, is largest near the
    trajectory length at which trajectories start to turn back.  Its
    derivative along a trajectory of duration ``t = h T`` (``h`` the jitter)
    is ``t (|q' - m|^2 - |q - m|^2) (q' - m) . v'`` per unit of ``log T``,
    with ``v'`` the velocity at the end point.  All arguments are in
    whitened coordinates (positions divided by their step scales, so the
    velocity is the standard-normal momentum).

    With ``rate``, the estimate of ``T d(ChEES / T) / d log T``, the
    derivative of the ChEES *rate* (ChEES per unit of trajectory length,
    hence per gradient evaluation; the normalisation of SNAPER-HMC,
    Sountsov and Hoffman 2022): the same term minus the trajectory's own
    ``(|q' - m|^2 - |q - m|^2)^2 / 4``.

    Parameters
    ----------
    start, proposal, proposal_momentum : ndarray of shape (n_chains, n_params)
    centre : ndarray of shape (n_chains, n_params) or (n_params,)
        Estimate of the target's mean.
    time : ndarray of shape (n_chains,)
        Duration of each trajectory.

    Returns
    -------
    gradient : ndarray of shape (n_chains,)

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.hmc._sampler import chees_gradient
    >>> # From distance 1 to distance 2: still moving outwards, a longer
    >>> # trajectory would change the squared distance more (positive); already
    >>> # turning back inwards, a shorter one would (negative).
    >>> start, end, centre, time = np.array([[1.0]]), np.array([[2.0]]), 0.0, 1.0
    >>> out = chees_gradient(start, end, np.array([[1.0]]), centre, time)
    >>> back = chees_gradient(start, end, np.array([[-1.0]]), centre, time)
    >>> float(out[0]), float(back[0])
    (6.0, -6.0)
    >>> # The rate subtracts the trajectory's own (4 - 1)^2 / 4.
    >>> float(chees_gradient(start, end, np.array([[1.0]]), centre, time, rate=True)[0])
    3.75
    """
    new = proposal - centre
    old = start - centre
    change = np.sum(new**2, axis=1) - np.sum(old**2, axis=1)
    gradient = time * change * np.sum(new * proposal_momentum, axis=1)
    if rate:
        gradient = gradient - change**2 / 4
    return gradient


class ChEESAdaptation:
    """Per-chain adaptation of the trajectory length by the ChEES criterion.

    Each chain keeps its own mean trajectory length ``T`` (duration in units
    of the global step-size multiplier) and adapts ``log T`` by Adam without
    momentum (second-moment decay 0.95 and updates clipped to +-0.35 as in
    Hoffman, Radul and Sountsov 2021, learning rate 0.05 rather than 0.025 for
    warm-ups of a few hundred iterations) along :func:`chees_gradient`
    weighted by the acceptance probability and divided by its bound, so that
    every trajectory's vote lies in [-2, 2] (the raw estimate, a product of
    three distances, is heavy-tailed and shrinks by orders of magnitude while
    a chain leaves its start: one early outlier would stall Adam, whose
    second moment forgets 5% per update, for hundreds of iterations).  The
    centre of the criterion is each chain's own exponentially weighted mean
    of its past states (a window of about ``centre_window`` iterations), not
    the mean across chains as in the paper: it then needs nothing from other
    chains (a chain's draws do not depend on ``n_jobs`` nor on the number
    of chains, one chain adapts too), and within-mode distances drive it
    rather than the distances between the symmetric modes of a network's
    posterior that different chains sit in.  :meth:`final` gives the
    iterate average (weights ``k^-0.75`` as in dual averaging) to freeze.

    Trajectories are jittered: at iteration ``k`` (from 1) every chain runs
    ``2 h_k T / step`` leapfrog steps rounded up, ``h_k`` the van der Corput
    number :func:`halton` ``(k)``, so the mean duration is ``T``.

    Divided by a bound that holds the trajectory's duration, the votes lose
    the ``t`` that weights ChEES's derivative in ``log T``: on a standard
    normal their mean, like ``sin^2 2T``, vanishes at multiples of pi/2
    and is positive in between, so that the lengths drift upwards (20
    dimensions, 64 chains, 400 iterations: median 4.4, 10th-90th
    percentiles 2.7-8.9, against the ChEES optimum 1.12).  On a network's
    posterior that drift keeps warm-up trajectories long while the chains
    find the network's configurations, which pays.  Divided by ``T``
    instead, the votes keep the jitter's weight and their mean has its root
    at ChEES's optimum (1.12-1.14 on that normal), but default fits were no
    better for it: faster on friedman1 with 2000 rows, but two of the
    two-output seeds that converge with ``t`` (0 and 7) no longer do (the
    user guide's measurements).

    From update ``rate_from`` (counted from 0) on, the votes follow the
    ChEES rate instead (``rate=True`` of :func:`chees_gradient`; the bound
    gains the trajectory's ``(|q' - m|^2 + |q - m|^2)^2 / 4``): ChEES grows
    with ``T`` until trajectories turn back, whatever they cost, while its
    rate, ChEES per gradient evaluation, is largest at a shorter length
    wherever a shorter trajectory already moves the squared distances
    nearly as far.
    Its votes have a root: on that normal the lengths settle at 0.85-0.89
    (medians over 64 chains, four runs), by the root of the votes' mean,
    0.83 (the rate's own maximum is pi/4).

    Parameters
    ----------
    trajectory_length : ndarray of shape (n_chains,)
        Initial mean duration.
    learning_rate : float, default=0.05
    centre_window : float, default=50.0
    rate_from : int or None, default=None
        Update (from 0) from which the votes follow the ChEES rate; the
        iterate average restarts there.  None: ChEES throughout.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.hmc._sampler import ChEESAdaptation
    >>> adaptation = ChEESAdaptation(np.ones(2))
    >>> adaptation.n_leapfrog(1, np.array([0.1, 0.25]), max_steps=1000)
    array([10,  4])
    """

    def __init__(
        self, trajectory_length, learning_rate=0.05, centre_window=50.0, rate_from=None
    ):
        self.log_length = np.log(np.asarray(trajectory_length, dtype=float))
        self.log_length_bar = self.log_length.copy()
        self.learning_rate = learning_rate
        self.centre_window = centre_window
        self.second_moment = np.zeros_like(self.log_length)
        self.n_updates = np.zeros(self.log_length.shape, dtype=int)
        self.t = 0
        self.centre = None
        self.n_seen = 0
        self.rate_from = rate_from
        self.n_calls = 0

    @property
    def rate(self):
        """Whether the votes follow the ChEES rate (from update ``rate_from`` on)."""
        return self.rate_from is not None and self.n_calls > self.rate_from

    @property
    def trajectory_length(self):
        """The current mean durations, (n_chains,)."""
        return np.exp(self.log_length)

    def n_leapfrog(self, iteration, step_size, max_steps):
        """Steps per chain at ``iteration`` (from 1): ``ceil(2 h T / step)``."""
        jitter = 2.0 * halton(iteration)
        steps = np.ceil(jitter * self.trajectory_length / step_size)
        return np.clip(steps, 1, max_steps).astype(int)

    def observe(self, position):
        """Move the centres towards the chains' current positions."""
        self.n_seen += 1
        weight = max(1.0 / self.n_seen, 1.0 / self.centre_window)
        if self.centre is None:
            self.centre = np.array(position, dtype=float)
        else:
            self.centre += weight * (position - self.centre)

    def update(self, step, scales, time, min_length, max_length):
        """Adam step of every chain's ``log T`` from one trajectory each.

        Parameters
        ----------
        step : HMCStep
            The transition (its ``start``, ``proposal``, ``proposal_momentum``,
            ``accept_prob`` and ``divergent``).
        scales : ndarray broadcastable to (n_chains, n_params)
            Step scales of the coordinates (the whitening).
        time : ndarray of shape (n_chains,)
            Duration of each trajectory.
        min_length, max_length : ndarray of shape (n_chains,) or float
            Bounds of ``T``: a step, and the longest trajectory allowed, at
            the current step sizes.
        """
        if self.n_calls == self.rate_from:
            # The ChEES rate from now on: the iterate average restarts.
            self.restart(0.0)
        self.n_calls += 1
        self.t += 1
        centre = step.start if self.centre is None else self.centre
        start, proposal = step.start / scales, step.proposal / scales
        centre = centre / scales
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            gradient = chees_gradient(
                start, proposal, step.proposal_momentum, centre, time, self.rate
            )
            # The estimate is a product of three distances, heavy-tailed and
            # shrinking by orders of magnitude as a chain leaves its start:
            # divided by its bound (|change| <= sum of the squared distances,
            # |(q' - m) . v'| <= |q' - m| |v'|), each trajectory has a vote in
            # [-2, 2] and Adam's second moment follows no transient outlier.
            new_sq = np.sum((proposal - centre) ** 2, axis=1)
            summed_sq = new_sq + np.sum((start - centre) ** 2, axis=1)
            bound = (
                time
                * summed_sq
                * np.sqrt(new_sq * np.sum(step.proposal_momentum**2, axis=1))
            )
            if self.rate:
                bound = bound + summed_sq**2 / 4
            gradient = step.accept_prob * gradient / bound
        # A divergent or non-finite trajectory says nothing about the length.
        usable = np.isfinite(gradient) & ~step.divergent
        gradient = np.where(usable, gradient, 0.0)
        decay = 0.95
        self.n_updates += usable
        self.second_moment = np.where(
            usable,
            decay * self.second_moment + (1 - decay) * gradient**2,
            self.second_moment,
        )
        corrected = self.second_moment / (1.0 - decay ** np.maximum(self.n_updates, 1))
        change = self.learning_rate * gradient / (np.sqrt(corrected) + 1e-12)
        change = np.where(usable, np.clip(change, -0.35, 0.35), 0.0)
        self.log_length = np.clip(
            self.log_length + change,
            np.log(min_length),
            np.log(max_length),
        )
        eta = self.t**-0.75
        self.log_length_bar = eta * self.log_length + (1 - eta) * self.log_length_bar

    def restart(self, log_ratio):
        """Rescale every ``T`` by ``exp(log_ratio)`` and restart its average.

        After the metric changes the step size is rescaled; ``T`` follows it
        (the same number of leapfrog steps), and the iterate average, whose
        earlier terms were in the old units, starts again.
        """
        self.log_length = self.log_length + log_ratio
        self.log_length_bar = self.log_length.copy()
        self.t = 0

    def final(self):
        """The averaged log mean durations to use after warm-up."""
        return self.log_length_bar.copy()


def metric_windows(n_iterations, init_buffer=75, term_buffer=50, base_window=25):
    """Stan's slow windows of metric adaptation within ``n_iterations`` of warm-up.

    After a fast initial buffer (the chain leaves its start and the step size
    adapts), the diagonal metric is estimated in windows of doubling length;
    the last window extends to a terminal buffer in which only the step size
    adapts to the final metric.  A window whose successor (twice as long)
    would not fit before the terminal buffer takes the rest.  Warm-ups shorter
    than ``init_buffer + base_window + term_buffer`` use 15% / 75% / 10% of
    the iterations, and none shorter than 20 adapts a metric, as in Stan.

    Parameters
    ----------
    n_iterations : int
        Warm-up iterations available.
    init_buffer, term_buffer, base_window : int, default=75, 50, 25
        Stan's defaults.

    Returns
    -------
    windows : list of (int, int)
        ``(start, end)`` of every window, ``end`` exclusive, counted from 0.

    Examples
    --------
    >>> from sklearn_meanfield.hmc._sampler import metric_windows
    >>> # Stan's 1000 warm-up iterations: windows of 25, 50, 100, 200 and 500.
    >>> metric_windows(1000)
    [(75, 100), (100, 150), (150, 250), (250, 450), (450, 950)]
    >>> metric_windows(100)
    [(15, 90)]
    """
    if n_iterations < 20:
        return []
    if init_buffer + base_window + term_buffer > n_iterations:
        init_buffer = int(0.15 * n_iterations)
        term_buffer = int(0.1 * n_iterations)
        base_window = n_iterations - init_buffer - term_buffer
    last = n_iterations - term_buffer
    windows, start, size = [], init_buffer, base_window
    end = start + size
    while True:
        windows.append((start, end))
        if end >= last:
            return windows
        size *= 2
        start, end = end, end + size
        if end + 2 * size > last:
            end = last


def regularized_variance(variance, n_draws, target=1.0):
    """Stan's shrinkage of a metric's variance estimate from ``n_draws`` draws.

    ``(n / (n + 5)) var + (5 / (n + 5)) target``: five pseudo-draws of
    variance ``target``.  Stan shrinks toward 1e-3 (in the model's units);
    here the coordinates are already scaled by Neal's step scales, so the
    prior guess is 1.

    Examples
    --------
    >>> from sklearn_meanfield.hmc._sampler import regularized_variance
    >>> float(regularized_variance(100.0, 45))
    90.1
    """
    n = float(n_draws)
    return (n / (n + 5.0)) * variance + (5.0 / (n + 5.0)) * target


class RunningVariance:
    """Welford's running mean and variance of batched vectors.

    Parameters
    ----------
    shape : tuple of int
        Shape of each observation, e.g. ``(n_chains, n_params)``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.hmc._sampler import RunningVariance
    >>> values = np.random.default_rng(0).normal(size=(50, 2, 3))
    >>> running = RunningVariance((2, 3))
    >>> for v in values:
    ...     running.add(v)
    >>> bool(np.allclose(running.variance(), values.var(axis=0, ddof=1)))
    True
    """

    def __init__(self, shape):
        self.n = 0
        self.mean = np.zeros(shape)
        self.m2 = np.zeros(shape)

    def add(self, value):
        """Add one observation."""
        self.n += 1
        delta = value - self.mean
        self.mean += delta / self.n
        self.m2 += delta * (value - self.mean)

    def variance(self):
        """Unbiased sample variance (``ddof=1``) of the observations so far."""
        return self.m2 / max(self.n - 1, 1)


def _resolve_estimator(adapt_mass_matrix):
    """``adapt_mass_matrix`` (bool or estimator name) as an estimator or None."""
    if adapt_mass_matrix is False or adapt_mass_matrix is None:
        return None
    return "fisher" if adapt_mass_matrix is True else str(adapt_mass_matrix)


class MassMatrixAdaptation:
    """Windowed adaptation of a diagonal metric, per chain (Stan's scheme).

    The metric is expressed as a factor ``f`` on the step scales the sampler
    already uses (Neal's, from the hyperparameters, for the network; ones for
    a plain target): coordinate ``i`` moves with step ``eps f_i s_i`` and its
    momentum is standard normal, i.e. a diagonal mass ``1 / (f_i s_i)^2``
    in the kinetic energy the Metropolis test uses (the same metric in the
    leapfrog and the energy, so the chain is exact with any frozen ``f``).
    Within each window of :func:`metric_windows` the variance of every scaled
    coordinate ``z_i = q_i / s_i`` is accumulated per chain, and with the
    ``"fisher"`` estimator that of its gradient ``g_i = s_i d log p / d q_i``
    too; at the window's end ``f_i`` becomes the square root of the
    :func:`regularized_variance` of ``z_i`` (``"variance"``, Stan's), or
    ``(var z_i / var g_i)^(1/4)`` with both variances regularised
    (``"fisher"``: the diagonal metric that minimises the sample Fisher
    divergence to a standard normal, Seyboldt, Carlson and Carpenter 2026;
    exact for a diagonal Gaussian, and for a correlated one the geometric
    mean of the marginal and the conditional sd, where Stan's takes the
    marginal, which the step size must then undo for the narrow
    directions).  :meth:`update` returns the factor by which the step size
    should change so that the coordinate moved farthest in units of its
    spread keeps its step (the step-size adaptation then restarts from
    there).  Estimating in
    the coordinates the step scales normalise, rather than in the raw
    weights, keeps what the hyperparameters already explain out of the
    estimate: the scales follow each Gibbs step, the factor only corrects
    them.

    Parameters
    ----------
    shape : tuple of int
        ``(n_chains, n_params)``.
    windows : list of (int, int)
        Windows (:func:`metric_windows`) in iterations counted from 0.
    estimator : {"variance", "fisher"}, default="variance"

    Attributes
    ----------
    factor : ndarray of shape (n_chains, n_params)
        The current metric, as factors on the step scales (ones before the
        first window ends).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.hmc._sampler import MassMatrixAdaptation
    >>> rng = np.random.default_rng(0)
    >>> adaptation = MassMatrixAdaptation((1, 2), [(0, 1000)])
    >>> for k in range(1000):
    ...     ratio = adaptation.update(k, rng.normal(size=(1, 2)) * [0.5, 10.0])
    >>> np.round(adaptation.factor, 1)
    array([[0.5, 9.8]])
    >>> # The step about doubles: coordinate 0 (sd 0.5, the narrowest) keeps
    >>> # its step per sd, the others take longer steps.
    >>> np.round(ratio, 1)
    array([1.9])
    """

    def __init__(self, shape, windows, estimator="variance"):
        self.windows = list(windows)
        self.estimator = estimator
        self.factor = np.ones(shape)
        self.running = RunningVariance(shape)
        self.running_grad = RunningVariance(shape)

    def _estimate(self):
        n = self.running.n
        variance = regularized_variance(self.running.variance(), n)
        if self.estimator == "variance":
            return np.sqrt(variance)
        grad_variance = regularized_variance(self.running_grad.variance(), n)
        return (variance / grad_variance) ** 0.25

    def update(self, iteration, scaled_position, scaled_gradient=None):
        """Record the chains' scaled positions ``q / s`` after ``iteration``
        (and, for ``"fisher"``, the gradients ``s d log p / d q`` there).

        Returns
        -------
        step_ratio : ndarray of shape (n_chains,) or None
            None unless a window ended with this iteration; then the factor
            ``max_i f_old_i / f_new_i`` by which to multiply the step size.
        """
        for start, end in self.windows:
            if start <= iteration < end:
                self.running.add(scaled_position)
                if self.estimator != "variance":
                    self.running_grad.add(scaled_gradient)
                if iteration == end - 1:
                    new = self._estimate()
                    ratio = np.max(self.factor / new, axis=1)
                    self.factor = new
                    self.running = RunningVariance(new.shape)
                    self.running_grad = RunningVariance(new.shape)
                    return ratio
                return None
        return None


class AdaptiveDraws(NamedTuple):
    """What :func:`adaptive_hmc` returns."""

    draws: np.ndarray
    """Positions after every sampling iteration, (n_samples, n_chains, n_params)."""
    accept_prob: np.ndarray
    """Acceptance probabilities, (n_samples, n_chains)."""
    n_leapfrog: np.ndarray
    """Leapfrog steps, (n_samples, n_chains)."""
    step_size: np.ndarray
    """Frozen step-size multiplier, (n_chains,)."""
    trajectory_length: np.ndarray
    """Frozen mean trajectory duration, (n_chains,)."""
    metric: np.ndarray = None
    """Frozen metric as factors on ``scales``, (n_chains, n_params)."""
    energy_error: np.ndarray = None
    """Energy errors of the sampling trajectories, (n_samples, n_chains)."""


def adaptive_hmc(
    log_prob_and_grad,
    q,
    random_state,
    *,
    n_warmup,
    n_samples,
    scales=1.0,
    step_size=0.1,
    trajectory_length=1.0,
    n_leapfrog=None,
    target_accept=0.8,
    max_leapfrog=1000,
    adapt_mass_matrix=False,
    rate_from=None,
):
    """Adaptive HMC on a fixed target: the kernel of the network sampler alone.

    Every iteration draws each chain's step-size jitter (uniform in [0.9,
    1.1]) and runs :func:`hmc_step` with ``ceil(2 h_k T / step)`` leapfrog
    steps per chain (:class:`ChEESAdaptation`), or ``n_leapfrog`` steps when
    given, with step sizes ``step * jitter * factor * scales``; in warm-up
    the step size follows dual averaging, ``T`` the ChEES criterion and,
    with ``adapt_mass_matrix``, the metric ``factor`` Stan's windowed
    scheme (:class:`MassMatrixAdaptation` over :func:`metric_windows` of the
    warm-up; after each window the step size is rescaled, ``T`` with it so
    that the number of steps stays, and dual averaging and the averages of
    ``T`` restart).  All are frozen for sampling.  The network sampler does
    the same between its Gibbs steps
    (:class:`~sklearn_meanfield.hmc._transition.WarmupAdaptation`).

    Parameters
    ----------
    log_prob_and_grad : callable
    q : ndarray of shape (n_chains, n_params)
        Initial positions.
    random_state : ChainRandom or numpy.random.Generator
    n_warmup, n_samples : int
    scales : ndarray broadcastable to (n_chains, n_params), default=1.0
        Step scale of every coordinate (a diagonal mass ``1 / scales^2``).
    step_size, trajectory_length : float
        Initial step-size multiplier and mean duration.
    n_leapfrog : int or None, default=None
        Fixed leapfrog steps per trajectory (Neal's HMC) instead of the
        adapted, jittered lengths.
    target_accept : float, default=0.8
    max_leapfrog : int, default=1000
    adapt_mass_matrix : bool or {"variance", "fisher"}, default=False
        Adapt a diagonal metric (factors on ``scales``) in warm-up, with the
        estimator of :class:`MassMatrixAdaptation` (True: ``"fisher"``).
    rate_from : int or None, default=None
        Warm-up iteration (from 0) from which ``T`` follows the ChEES rate
        (``rate_from`` of :class:`ChEESAdaptation`); None: ChEES throughout.

    Returns
    -------
    result : AdaptiveDraws

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.hmc._sampler import adaptive_hmc
    >>> def standard_normal(q):
    ...     return -0.5 * np.sum(q**2, axis=1), -q
    >>> out = adaptive_hmc(standard_normal, np.zeros((4, 3)),
    ...                    np.random.default_rng(0), n_warmup=200, n_samples=200)
    >>> out.draws.shape
    (200, 4, 3)
    >>> # 2400 draws of unit variance, from trajectories of several steps.
    >>> bool(abs(out.draws.var() - 1) < 0.15), bool(out.n_leapfrog.max() > 1)
    (True, True)
    """
    n_chains = q.shape[0]
    scales = np.broadcast_to(scales, q.shape)
    log_prob, grad = log_prob_and_grad(q)
    dual = DualAveraging(np.full(n_chains, np.log(step_size)), target=target_accept)
    log_step = dual.log_value
    chees = ChEESAdaptation(
        np.full(n_chains, float(trajectory_length)), rate_from=rate_from
    )
    estimator = _resolve_estimator(adapt_mass_matrix)
    metric = MassMatrixAdaptation(
        q.shape,
        [] if estimator is None else metric_windows(n_warmup),
        estimator or "variance",
    )
    draws = np.empty((n_samples, *q.shape))
    accept_prob = np.empty((n_samples, n_chains))
    energy_error = np.empty((n_samples, n_chains))
    n_steps = np.empty((n_samples, n_chains), dtype=int)
    for iteration in range(n_warmup + n_samples):
        step_size = np.exp(log_step)
        n_steps_now = (
            chees.n_leapfrog(iteration + 1, step_size, max_leapfrog)
            if n_leapfrog is None
            else n_leapfrog
        )
        jitter = random_state.uniform(0.9, 1.1, size=(n_chains, 1))
        multiplier = step_size[:, None] * jitter
        metric_scales = metric.factor * scales
        step = hmc_step(
            q,
            log_prob,
            grad,
            log_prob_and_grad,
            multiplier * metric_scales,
            n_steps_now,
            random_state,
        )
        q, log_prob, grad = step.q, step.log_prob, step.grad
        if iteration < n_warmup:
            if n_leapfrog is None:
                chees.update(
                    step,
                    metric_scales,
                    n_steps_now * multiplier[:, 0],
                    min_length=step_size,
                    max_length=max_leapfrog * step_size / 2,
                )
                chees.observe(q)
            log_step = dual.update(step.accept_prob)
            ratio = metric.update(iteration, q / scales, grad * scales)
            if ratio is not None:
                log_step = log_step + np.log(ratio)
                dual = DualAveraging(log_step, target=target_accept)
                chees.restart(np.log(ratio))
            if iteration == n_warmup - 1:
                log_step = dual.final()
                chees.log_length = chees.final()
        else:
            row = iteration - n_warmup
            draws[row], accept_prob[row] = q, step.accept_prob
            n_steps[row], energy_error[row] = n_steps_now, step.energy_error
    return AdaptiveDraws(
        draws,
        accept_prob,
        n_steps,
        np.exp(log_step),
        chees.trajectory_length,
        metric.factor,
        energy_error,
    )
