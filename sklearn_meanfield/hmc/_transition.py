"""One iteration of the network sampler for a batch of chains, and its adaptation.

The sampler is split the way BlackJAX splits its kernels from its drivers:

* :class:`NetworkPosterior` is the target: the data, the network layout, the
  priors, and the arrays every iteration reuses.
* :class:`ChainState` is everything a chain carries from one iteration to the
  next; :func:`transition` maps a state to the next one (Gibbs steps of the
  precisions, the two rescaling moves, the unit redraws, one HMC trajectory)
  and reports what
  happened in a :class:`ChainInfo`.
* :class:`WarmupAdaptation` is the adaptation, initialised, updated after
  every warm-up iteration and finalised: it tunes the step-size multiplier by
  dual averaging, the rescaling moves' proposal sds and, for the adaptive
  sampler, each chain's trajectory length by the ChEES criterion, and hands
  them to :func:`transition` as a :class:`Tuning`.  :meth:`WarmupAdaptation.final`
  returns a :class:`FrozenTuning`, the fixed settings of sampling, so that the
  chains are exact while they sample.

The driver that schedules warm-up and sampling, records draws and reports
progress is :func:`~sklearn_meanfield.hmc._chains.run_chains`.

References
----------
Neal, R. M. (1996). Bayesian Learning for Neural Networks. Lecture Notes in
Statistics 118, Springer (sections 3.2 and 3.5: Gibbs steps of the
hyperparameters between trajectories, step sizes from the hyperparameters).

Hoffman, M. D. and Gelman, A. (2014). The No-U-Turn sampler. Journal of Machine
Learning Research, 15, 1593-1623 (dual averaging, section 3.2).

Hoffman, M. D., Radul, A. and Sountsov, P. (2021). An adaptive MCMC scheme for
setting trajectory lengths in Hamiltonian Monte Carlo. AISTATS, PMLR 130.
"""

import copy
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ._network import (
    augment,
    forward,
    gibbs_precisions,
    log_posterior,
    log_posterior_and_grad,
    log_posterior_gradient,
    network_outputs,
    prior_precision_vector,
    step_scales,
)
from ._redraws import redraw_units
from ._rescaling import rescale_groups, rescale_units
from ._sampler import (
    ChEESAdaptation,
    DualAveraging,
    SplitTarget,
    hmc_step,
    jittered_steps,
)

__all__ = [
    "ChainInfo",
    "ChainState",
    "FrozenTuning",
    "NetworkPosterior",
    "Tuning",
    "WarmupAdaptation",
    "transition",
]

# Acceptance the rescaling moves' proposal sds are adapted to: the optimum of
# a one-dimensional random-walk Metropolis.
RESCALE_TARGET_ACCEPT = 0.44


@dataclass(frozen=True, eq=False)
class NetworkPosterior:
    """The posterior the chains sample: data, layout, priors.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
    Y : ndarray of shape (n_samples, n_outputs)
        Standardised training data.
    layout : NetworkLayout
    prior : HyperPrior
    sample_weight : ndarray of shape (n_samples,) or None, default=None
        Weight of every row's log likelihood (an integer weight counts the row
        that many times): in the potential energy and its gradient, the Gibbs
        step of the noise precisions, the rescaling moves and the step sizes.
    gradient_dtype : {numpy.float64, numpy.float32}, default=numpy.float64
        Precision of the gradient that drives the leapfrog kicks.  With
        float32 the forward and backward passes of the kicks run in single
        precision (about twice as fast) and the log posterior of every end
        point, which the Metropolis test uses, in double precision: the
        chain stays exact for the double-precision posterior
        (:class:`~sklearn_meanfield.hmc._sampler.SplitTarget`).
    inverse_temperature : float or None, default=None
        Power of the likelihood (None: 1), set by :meth:`tempered`.

    Attributes
    ----------
    X_augmented_T : ndarray of shape (n_features + 1, n_samples)
        ``augment(X)``, for the energy's gradient and the rescaling moves.
    X_sq_sum : ndarray of shape (n_features,)
        Weighted summed squares of the inputs, for the step sizes.
    n_weighted : float
        Number of samples (sum of the weights).
    """

    X: np.ndarray
    Y: np.ndarray
    layout: object
    prior: object
    sample_weight: np.ndarray = None
    gradient_dtype: type = np.float64
    inverse_temperature: object = None
    X_augmented_T: np.ndarray = field(init=False)
    X_sq_sum: np.ndarray = field(init=False)
    n_weighted: float = field(init=False)
    _kick_data: tuple = field(init=False, repr=False)

    def __post_init__(self):
        X, w = self.X, self.sample_weight
        if w is None:
            X_sq_sum, n_weighted = np.sum(X**2, axis=0), X.shape[0]
        else:
            X_sq_sum, n_weighted = w @ X**2, float(np.sum(w))
        object.__setattr__(self, "X_sq_sum", X_sq_sum)
        object.__setattr__(self, "n_weighted", n_weighted)
        object.__setattr__(self, "X_augmented_T", augment(X))
        dtype = np.dtype(self.gradient_dtype)
        kick_data = None
        if dtype != np.float64:
            # The kicks' copies of the data, converted once.
            kick_data = (
                self.X_augmented_T.astype(dtype),
                self.Y.astype(dtype),
                None if w is None else w.astype(dtype),
            )
        object.__setattr__(self, "_kick_data", kick_data)

    def tempered(self, inverse_temperature):
        """The posterior with the likelihood raised to a power.

        The power multiplies the noise precisions the weights see
        (:meth:`effective_noise_precision`: the likelihood to that power up to
        a constant in the weights; in the potential, its gradient, the step
        scales and the rescaling moves) and every row's count in the Gibbs
        step of the noise precisions.  The data are shared, not copied.

        Parameters
        ----------
        inverse_temperature : float in (0, 1]

        Returns
        -------
        posterior : NetworkPosterior
            ``self`` for the power 1.
        """
        if inverse_temperature == 1.0:
            return self
        tempered = copy.copy(self)
        object.__setattr__(tempered, "inverse_temperature", inverse_temperature)
        return tempered

    def effective_noise_precision(self, noise_precision):
        """The noise precisions, (n_chains, n_outputs), times the power of
        the likelihood: what the weights see."""
        if self.inverse_temperature is None:
            return noise_precision
        return np.reshape(self.inverse_temperature, (-1, 1)) * noise_precision

    def target(self, noise_precision, group_precision):
        """The log posterior of the weights given the precisions, and its gradient.

        Returns
        -------
        log_prob_and_grad : callable or SplitTarget
            ``theta -> (log_prob, grad)`` for :func:`hmc_step`; with a
            single-precision ``gradient_dtype`` a
            :class:`~sklearn_meanfield.hmc._sampler.SplitTarget` whose
            log density is exact and whose kicks use the fast gradient.
        """
        precision = prior_precision_vector(group_precision, self.layout)
        noise_precision = self.effective_noise_precision(noise_precision)
        args = (self.X, self.Y, noise_precision, precision, self.layout)
        kwargs = dict(
            X_augmented_T=self.X_augmented_T, sample_weight=self.sample_weight
        )
        if self._kick_data is None:
            return lambda theta: log_posterior_and_grad(theta, *args, **kwargs)
        X_augmented_T, Y, sample_weight = self._kick_data
        return SplitTarget(
            log_prob=lambda theta: log_posterior(theta, *args, **kwargs),
            gradient=lambda theta: log_posterior_gradient(
                theta,
                Y,
                noise_precision,
                precision,
                self.layout,
                X_augmented_T,
                sample_weight,
            ),
        )

    def step_scales(self, noise_precision, group_precision):
        """Per-weight step-size scales (:func:`step_scales`)."""
        return step_scales(
            group_precision,
            self.effective_noise_precision(noise_precision),
            self.X_sq_sum,
            self.n_weighted,
            self.layout,
        )

    def train_outputs(self, theta):
        """Network outputs at the training inputs, (n_chains, n_samples, n_outputs)."""
        return network_outputs(theta, self.X, self.layout)

    def initial_state(self, random_state, n_chains):
        """Precisions at their prior means, little noise, weights from the prior.

        The low noise level (precision 100) pulls the weights towards the
        data first, while the precisions are held fixed early in warm-up.
        """
        group_precision = np.tile(self.prior.group_means(self.layout), (n_chains, 1))
        noise_precision = np.full((n_chains, self.layout.n_outputs), 100.0)
        theta = random_state.standard_normal(
            (n_chains, self.layout.n_params)
        ) / np.sqrt(prior_precision_vector(group_precision, self.layout))
        log_prob, grad = self.target(noise_precision, group_precision)(theta)
        return ChainState(
            theta=theta,
            log_prob=log_prob,
            grad=grad,
            noise_precision=noise_precision,
            group_precision=group_precision,
            scales=self.step_scales(noise_precision, group_precision),
        )


class ChainState(NamedTuple):
    """What every chain of a batch carries between iterations (rows: chains)."""

    theta: np.ndarray
    """Network weights, (n_chains, n_params)."""
    log_prob: np.ndarray
    """Log posterior of ``theta`` given the precisions, (n_chains,)."""
    grad: np.ndarray
    """Its gradient, (n_chains, n_params)."""
    noise_precision: np.ndarray
    """(n_chains, n_outputs)."""
    group_precision: np.ndarray
    """(n_chains, n_groups)."""
    scales: np.ndarray
    """Per-weight step-size scales for these precisions, (n_chains, n_params)."""


class ChainInfo(NamedTuple):
    """What one iteration did, per chain."""

    accepted: np.ndarray
    """Whether the HMC trajectory was accepted, (n_chains,) bool."""
    accept_prob: np.ndarray
    """Its Metropolis acceptance probability."""
    divergent: np.ndarray
    """Whether it diverged (energy error above 1000)."""
    energy_error: np.ndarray
    """Its change of total energy."""
    group_accept: np.ndarray
    """Acceptance probabilities of the group rescalings, (n_chains, n_groups),
    or None when the precisions were held fixed."""
    unit_accept: np.ndarray
    """Those of the unit rescalings, (n_chains, n_hidden), or None."""
    n_leapfrog: np.ndarray = None
    """Leapfrog steps of the trajectory, (n_chains,) int."""
    integration_time: np.ndarray = None
    """Its duration in units of the step scales (steps times the step-size
    multiplier times its jitter), (n_chains,)."""
    trajectory: object = None
    """The :class:`~sklearn_meanfield.hmc._sampler.HMCStep` (start, proposal
    and its momentum, for trajectory-length adaptation)."""
    scales: np.ndarray = None
    """The step scales the trajectory used, (n_chains, n_params)."""


class Tuning(NamedTuple):
    """The adapted settings an iteration uses, per chain."""

    step_size: np.ndarray
    """Global step-size multiplier, (n_chains,)."""
    group_sd: np.ndarray
    """Proposal sd of the group rescalings' ``log c``, (n_chains, n_groups)."""
    unit_sd: np.ndarray
    """Proposal sd of the unit rescalings' ``log c``, (n_chains, n_hidden)."""
    trajectory_length: np.ndarray = None
    """Mean trajectory duration of the adaptive sampler, (n_chains,), or None
    (fixed ``n_leapfrog``)."""


class FrozenTuning(NamedTuple):
    """What warm-up adapted, per chain (:meth:`WarmupAdaptation.final`): the
    fixed settings of sampling, enough to continue it bit for bit."""

    log_step_size: np.ndarray
    """(n_chains,)."""
    log_group_sd: np.ndarray
    """(n_chains, n_groups)."""
    log_unit_sd: np.ndarray
    """(n_chains, n_hidden)."""
    log_trajectory_length: np.ndarray = None
    """(n_chains,) with ``"chees"``, else None."""

    def tuning(self):
        """The settings of every sampling iteration, as a :class:`Tuning`."""
        return Tuning(
            step_size=np.exp(self.log_step_size),
            group_sd=np.exp(self.log_group_sd),
            unit_sd=np.exp(self.log_unit_sd),
            trajectory_length=(
                None
                if self.log_trajectory_length is None
                else np.exp(self.log_trajectory_length)
            ),
        )

    def n_leapfrog(self, iteration, default, max_leapfrog):
        """Leapfrog steps at ``iteration`` (from 0), as
        :meth:`WarmupAdaptation.n_leapfrog` with the frozen lengths."""
        if self.log_trajectory_length is None:
            return default
        return jittered_steps(
            iteration + 1,
            np.exp(self.log_trajectory_length),
            np.exp(self.log_step_size),
            max_leapfrog,
        )


def _update_precisions(state, posterior, tuning, random_state):
    """Gibbs steps of the precisions, both rescaling moves, the unit redraws.

    Each Gibbs step is followed by a joint rescaling of every weight group and
    its precision (Gibbs alone moves the log precision of a group in steps of
    about ``sqrt(2 / group size)``, a slow random walk whenever the prior
    rather than the data holds the group), by a rescaling of every hidden
    unit along its scale ridge and by a redraw of every hidden unit from its
    prior (:func:`~sklearn_meanfield.hmc._redraws.redraw_units`: the jumps
    between organisations of the hidden units that small steps do not make);
    the log posterior, its gradient and the step sizes then follow the new
    precisions.
    """
    layout, X_aug_t, Y = posterior.layout, posterior.X_augmented_T, posterior.Y
    weights, theta = posterior.sample_weight, state.theta
    # One forward pass serves the Gibbs step and all the moves.
    network = forward(theta, None, layout, X_augmented_T=X_aug_t)
    groups, noise = gibbs_precisions(
        theta,
        Y - network.outputs_by_sample(),
        layout,
        posterior.prior,
        random_state,
        weights,
        inverse_temperature=posterior.inverse_temperature,
    )
    # The moves see the likelihood to its power (annealing).
    effective_noise = posterior.effective_noise_precision(noise)
    theta, groups, group_accept, network = rescale_groups(
        theta,
        groups,
        effective_noise,
        X_aug_t,
        Y,
        layout,
        posterior.prior,
        tuning.group_sd,
        random_state,
        weights,
        activations=network,
    )
    precision = prior_precision_vector(groups, layout)
    theta, unit_accept, network = rescale_units(
        theta,
        precision,
        effective_noise,
        X_aug_t,
        Y,
        layout,
        tuning.unit_sd,
        random_state,
        weights,
        activations=network,
    )
    theta, _, _ = redraw_units(
        theta,
        precision,
        effective_noise,
        X_aug_t,
        Y,
        layout,
        random_state,
        weights,
        activations=network,
    )
    log_prob, grad = posterior.target(noise, groups)(theta)
    state = state._replace(
        theta=theta,
        log_prob=log_prob,
        grad=grad,
        noise_precision=noise,
        group_precision=groups,
        scales=posterior.step_scales(noise, groups),
    )
    return state, group_accept, unit_accept


def transition(
    state,
    posterior,
    tuning,
    random_state,
    *,
    n_leapfrog,
    update_precisions=True,
):
    """One iteration of every chain: precisions, rescalings, an HMC trajectory.

    The kernel of the sampler, ``state -> (state, info)``.  With
    ``update_precisions`` the precisions get a Gibbs step followed by the
    rescaling moves and the unit redraws; then one HMC trajectory moves the
    weights, with the per-weight step sizes ``step_size * jitter * scales``
    (the jitter, a uniform factor in [0.9, 1.1] per chain, avoids periodic
    orbits).  Random numbers are drawn in this order, from one generator per
    chain.

    Parameters
    ----------
    state : ChainState
    posterior : NetworkPosterior
    tuning : Tuning
    random_state : ChainRandom or numpy.random.Generator
    n_leapfrog : int or ndarray of int of shape (n_chains,)
        Leapfrog steps, shared or per chain.
    update_precisions : bool, default=True
        False holds the precisions fixed (early warm-up).

    Returns
    -------
    state : ChainState
    info : ChainInfo

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.hmc._chains import ChainRandom
    >>> from sklearn_meanfield.hmc._network import HyperPrior, NetworkLayout
    >>> from sklearn_meanfield.hmc._transition import (
    ...     NetworkPosterior, WarmupAdaptation, transition)
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(20, 1))
    >>> posterior = NetworkPosterior(X, np.tanh(X), NetworkLayout(1, 3, 1),
    ...                              HyperPrior())
    >>> random = ChainRandom([0, 1])
    >>> state = posterior.initial_state(random, 2)
    >>> adaptation = WarmupAdaptation(posterior.layout, 2, step_size=0.1)
    >>> state, info = transition(state, posterior, adaptation.tuning(), random,
    ...                          n_leapfrog=10)
    >>> state.theta.shape, info.group_accept.shape, info.accepted.dtype
    ((2, 10), (2, 4), dtype('bool'))
    """
    if update_precisions:
        state, group_accept, unit_accept = _update_precisions(
            state, posterior, tuning, random_state
        )
    else:
        group_accept = unit_accept = None
    n_chains = state.theta.shape[0]
    jitter = random_state.uniform(0.9, 1.1, size=(n_chains, 1))
    multiplier = tuning.step_size[:, None] * jitter
    step = hmc_step(
        state.theta,
        state.log_prob,
        state.grad,
        posterior.target(state.noise_precision, state.group_precision),
        multiplier * state.scales,
        n_leapfrog,
        random_state,
    )
    state = state._replace(theta=step.q, log_prob=step.log_prob, grad=step.grad)
    info = ChainInfo(
        accepted=step.accepted,
        accept_prob=step.accept_prob,
        divergent=step.divergent,
        energy_error=step.energy_error,
        group_accept=group_accept,
        unit_accept=unit_accept,
        n_leapfrog=np.broadcast_to(n_leapfrog, (n_chains,)),
        integration_time=np.asarray(n_leapfrog) * multiplier[:, 0],
        trajectory=step,
        scales=state.scales,
    )
    return state, info


class WarmupAdaptation:
    """What warm-up tunes, per chain: the step size, the rescaling moves and
    the trajectory lengths.

    The adaptation of the sampler: initialised here, :meth:`update` after
    every warm-up iteration, :meth:`final` at the end of warm-up.  The global
    step-size multiplier follows dual averaging towards ``target_accept``
    (:class:`~sklearn_meanfield.hmc._sampler.DualAveraging`); the log
    proposal sds of the rescaling moves follow a Robbins-Monro recursion
    with rate ``k^-0.6`` towards an acceptance of 0.44 (the optimum of a
    one-dimensional random-walk Metropolis), ``k`` counting the iterations
    that made the moves.  With ``trajectory_length`` the mean trajectory
    duration of every chain adapts too, by the ChEES criterion
    (:class:`~sklearn_meanfield.hmc._sampler.ChEESAdaptation`), and
    :meth:`n_leapfrog` gives each iteration's jittered number of steps.

    Parameters
    ----------
    layout : NetworkLayout
    n_chains : int
    step_size : float
        Initial step-size multiplier.
    target_accept : float, default=0.8
    trajectory_length : float or None, default=None
        Initial mean duration of the adaptive sampler's trajectories (steps
        times the step-size multiplier); None for a fixed number of steps.
    max_leapfrog : int, default=1000
        Most leapfrog steps of one trajectory of the adaptive sampler.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.hmc._network import NetworkLayout
    >>> from sklearn_meanfield.hmc._transition import ChainInfo, WarmupAdaptation
    >>> adaptation = WarmupAdaptation(NetworkLayout(1, 2, 1), 1, step_size=0.1)
    >>> # Moves accepted above 0.44 widen their proposals.
    >>> accept = np.full((1, 4), 0.9)
    >>> adaptation.update(ChainInfo(None, np.ones(1), None, None, accept,
    ...                             np.full((1, 2), 0.9)))
    >>> bool(np.all(adaptation.tuning().group_sd > 0.5))
    True
    """

    def __init__(
        self,
        layout,
        n_chains,
        *,
        step_size,
        target_accept=0.8,
        trajectory_length=None,
        max_leapfrog=1000,
    ):
        self.target_accept = target_accept
        self.log_step_size = np.full(n_chains, np.log(step_size))
        self.dual_averaging = DualAveraging(self.log_step_size, target=target_accept)
        self.log_group_sd = np.full((n_chains, layout.n_groups), np.log(0.5))
        self.log_unit_sd = np.full((n_chains, layout.n_hidden), np.log(0.3))
        self.n_moves = 0
        self.max_leapfrog = max_leapfrog
        self.chees = (
            None
            if trajectory_length is None
            else ChEESAdaptation(np.full(n_chains, float(trajectory_length)))
        )

    def tuning(self):
        """The settings for the next iteration."""
        return Tuning(
            step_size=np.exp(self.log_step_size),
            group_sd=np.exp(self.log_group_sd),
            unit_sd=np.exp(self.log_unit_sd),
            trajectory_length=(
                None if self.chees is None else self.chees.trajectory_length
            ),
        )

    def n_leapfrog(self, iteration, default):
        """Leapfrog steps of every chain at ``iteration`` (from 0).

        ``default`` (an int) without trajectory-length adaptation; otherwise
        ``ceil(2 h T / step)`` per chain, ``h`` the van der Corput number of
        ``iteration + 1``, at most ``max_leapfrog``.
        """
        if self.chees is None:
            return default
        return self.chees.n_leapfrog(
            iteration + 1, np.exp(self.log_step_size), self.max_leapfrog
        )

    def update(self, info, state=None):
        """Adapt to one iteration; ``state``, the chains' state after it,
        moves the centres of the ChEES criterion."""
        if info.group_accept is not None:
            self.n_moves += 1
            rate = self.n_moves**-0.6
            self.log_group_sd += rate * (info.group_accept - RESCALE_TARGET_ACCEPT)
            self.log_unit_sd += rate * (info.unit_accept - RESCALE_TARGET_ACCEPT)
        if self.chees is not None:
            step_size = np.exp(self.log_step_size)
            self.chees.update(
                info.trajectory,
                info.scales,
                info.integration_time,
                min_length=step_size,
                max_length=self.max_leapfrog * step_size / 2,
            )
            if state is not None:
                self.chees.observe(state.theta)
        self.log_step_size = self.dual_averaging.update(info.accept_prob)

    def restart_step_size(self):
        """Restart dual averaging from the present step size: after the
        annealing of warm-up, whose tempered targets needed other steps."""
        self.dual_averaging = DualAveraging(
            self.log_step_size, target=self.target_accept
        )

    def final(self):
        """End of warm-up: the averaged step size (and trajectory lengths)
        and the rescaling sds, frozen for sampling, as a :class:`FrozenTuning`."""
        return FrozenTuning(
            log_step_size=self.dual_averaging.final(),
            log_group_sd=self.log_group_sd.copy(),
            log_unit_sd=self.log_unit_sd.copy(),
            log_trajectory_length=(None if self.chees is None else self.chees.final()),
        )
