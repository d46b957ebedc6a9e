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
"""

from typing import NamedTuple

import numpy as np

__all__ = [
    "ChEESAdaptation",
    "DualAveraging",
    "HMCStep",
    "SplitTarget",
    "chees_gradient",
    "halton",
    "hmc_step",
    "jittered_steps",
    "leapfrog",
    "metropolis_test",
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
    metropolis=True,
):
    """One Hybrid Monte Carlo transition of every chain.

    A fresh standard-normal momentum, ``n_leapfrog`` leapfrog steps to a
    proposal, and a Metropolis test on the change of total energy.  With
    ``metropolis=False`` every finite proposal is accepted (with one leapfrog
    step, Neal's stochastic dynamics, biased by O(eps^2)).

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
    metropolis : bool, default=True

    Returns
    -------
    step : HMCStep
        New state, and per chain: ``accepted`` (bool),
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
    p = random_state.standard_normal(q.shape)
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


def chees_gradient(start, proposal, proposal_momentum, centre, time):
    """Per-chain estimate of d ChEES / d log T (Hoffman, Radul and Sountsov 2021).

    ChEES, the expected squared change of the squared distance from the
    target's mean, ``E[(|q' - m|^2 - |q - m|^2)^2] / 4``, is largest near the
    trajectory length at which trajectories start to turn back.  Its
    derivative along a trajectory of duration ``t = h T`` (``h`` the jitter)
    is ``t (|q' - m|^2 - |q - m|^2) (q' - m) . v'`` per unit of ``log T``,
    with ``v'`` the velocity at the end point.  All arguments are in
    whitened coordinates (positions divided by their step scales, so the
    velocity is the standard-normal momentum).

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
    """
    new = proposal - centre
    old = start - centre
    change = np.sum(new**2, axis=1) - np.sum(old**2, axis=1)
    return time * change * np.sum(new * proposal_momentum, axis=1)


class ChEESAdaptation:
    """Per-chain adaptation of the trajectory length by the ChEES criterion.

    Each chain keeps its own mean trajectory length ``T`` (duration in units
    of the global step-size multiplier) and adapts ``log T`` by Adam without
    momentum (second-moment decay 0.95 and updates clipped to +-0.35 as in
    Hoffman, Radul and Sountsov 2021; learning rate 0.05 rather than 0.025,
    for warm-ups of a few hundred iterations) along :func:`chees_gradient`
    weighted by the acceptance probability and divided by its bound, so that
    every trajectory's vote lies in [-2, 2]: the raw estimate, a product of
    three distances, is heavy-tailed and shrinks by orders of magnitude while
    a chain leaves its start, and one early outlier would stall Adam for
    hundreds of iterations.  The centre of the criterion is each chain's own
    exponentially weighted mean of its past states (a window of about
    ``centre_window`` iterations), not the mean across chains as in the
    paper: a chain then needs nothing from the others (its draws depend
    neither on ``n_jobs`` nor on the number of chains), and within-mode
    distances drive it rather than the distances between the symmetric
    modes of a network's posterior that different chains sit in.
    :meth:`final` gives the iterate average (weights ``k^-0.75`` as in dual
    averaging) to freeze.

    Trajectories are jittered: at iteration ``k`` (from 1) every chain runs
    ``2 h_k T / step`` leapfrog steps rounded up, ``h_k`` the van der Corput
    number :func:`halton` ``(k)``, so the mean duration is ``T``.

    Divided by a bound that holds the trajectory's duration, the votes lose
    the ``t`` that weights ChEES's derivative in ``log T``, so the lengths
    drift above ChEES's optimum on a Gaussian; on a network's posterior the
    longer warm-up trajectories help the chains find the network's
    configurations.

    Parameters
    ----------
    trajectory_length : ndarray of shape (n_chains,)
        Initial mean duration.
    learning_rate : float, default=0.05
    centre_window : float, default=50.0

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.hmc._sampler import ChEESAdaptation
    >>> adaptation = ChEESAdaptation(np.ones(2))
    >>> adaptation.n_leapfrog(1, np.array([0.1, 0.25]), max_steps=1000)
    array([10,  4])
    """

    def __init__(self, trajectory_length, learning_rate=0.05, centre_window=50.0):
        self.log_length = np.log(np.asarray(trajectory_length, dtype=float))
        self.log_length_bar = self.log_length.copy()
        self.learning_rate = learning_rate
        self.centre_window = centre_window
        self.second_moment = np.zeros_like(self.log_length)
        self.n_updates = np.zeros(self.log_length.shape, dtype=int)
        self.t = 0
        self.centre = None
        self.n_seen = 0

    @property
    def trajectory_length(self):
        """The current mean durations, (n_chains,)."""
        return np.exp(self.log_length)

    def n_leapfrog(self, iteration, step_size, max_steps):
        """Steps per chain at ``iteration`` (from 1): ``ceil(2 h T / step)``."""
        return jittered_steps(iteration, self.trajectory_length, step_size, max_steps)

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
        self.t += 1
        centre = step.start if self.centre is None else self.centre
        start, proposal = step.start / scales, step.proposal / scales
        centre = centre / scales
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            gradient = chees_gradient(
                start, proposal, step.proposal_momentum, centre, time
            )
            # |change| <= sum of the squared distances and |(q' - m) . v'| <=
            # |q' - m| |v'|: divided by their product, a vote in [-2, 2].
            new_sq = np.sum((proposal - centre) ** 2, axis=1)
            summed_sq = new_sq + np.sum((start - centre) ** 2, axis=1)
            bound = (
                time
                * summed_sq
                * np.sqrt(new_sq * np.sum(step.proposal_momentum**2, axis=1))
            )
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

    def final(self):
        """The averaged log mean durations to use after warm-up."""
        return self.log_length_bar.copy()


def jittered_steps(iteration, trajectory_length, step_size, max_steps):
    """Leapfrog steps per chain at ``iteration`` (from 1): ``ceil(2 h T / step)``,
    ``h`` the van der Corput number of ``iteration``, between 1 and
    ``max_steps``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.hmc._sampler import jittered_steps
    >>> jittered_steps(1, np.ones(2), np.array([0.1, 0.25]), 1000)
    array([10,  4])
    """
    jitter = 2.0 * halton(iteration)
    steps = np.ceil(jitter * trajectory_length / step_size)
    return np.clip(steps, 1, max_steps).astype(int)
