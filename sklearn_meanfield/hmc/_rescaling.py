"""Rescaling moves of the network posterior: weight groups and hidden units.

Between the Gibbs steps of the precisions and the HMC trajectories of the
weights, two kinds of Metropolis moves scale parts of the network along
directions that Gibbs and HMC alone cross slowly.

* :func:`rescale_groups` scales a weight group and its precision together,
  keeping the standardised weights ``z sqrt(tau)`` fixed: an update of the
  precision in the non-centred parameterisation.  The Gibbs step
  (:func:`~sklearn_meanfield.hmc._network.gibbs_precisions`) works in the
  centred one (``tau`` given ``z``); alternating the two (Yu and Meng's
  interweaving) removes the random walk of ``log tau`` in steps of
  ``sqrt(2 / n_g)`` that makes the Gibbs sampler alone mix slowly when the
  group is determined by its prior rather than by the data
  (Papaspiliopoulos, Roberts and Skold 2007).
* :func:`rescale_units` scales a hidden unit's incoming weights by ``c`` and
  its outgoing ones by ``1 / c``, along the ridge of the posterior where the
  unit works in the linear part of tanh.

Both are generalised Gibbs steps on the multiplicative group (Liu and Sabatti
2000): a symmetric random walk in ``log c`` for each group or unit in turn,
accepted by a Metropolis test on the prior, likelihood and Jacobian ratios.
They need the network outputs only, updated from the hidden pre-activations
of the one forward pass (:func:`~sklearn_meanfield.hmc._network.forward`).

References
----------
Liu, J. S. and Sabatti, C. (2000). Generalised Gibbs sampler and multigrid
Monte Carlo for Bayesian computation. Biometrika, 87(2), 353-369.

Papaspiliopoulos, O., Roberts, G. O. and Skold, M. (2007). A general
framework for the parametrization of hierarchical models. Statistical
Science, 22(1), 59-73.

Yu, Y. and Meng, X.-L. (2011). To center or not to center: that is not the
question. Journal of Computational and Graphical Statistics, 20(3), 531-570.
"""

import numpy as np

from ._network import Activations, _output_layer, forward
from ._sampler import metropolis_test

__all__ = ["rescale_groups", "rescale_units"]


def _log_likelihood(Y, noise_precision, sample_weight=None):
    """``out -> -1/2 sum_k tau_k sum_i w_i (y_ik - out_cki)^2`` per chain ``c``,
    for outputs with the samples last (:class:`Activations`)."""
    Y_t = Y.T

    def log_lik(out):
        residual = Y_t - out
        residual *= residual
        if sample_weight is None:
            return -0.5 * np.einsum("cmn,cm->c", residual, noise_precision)
        return -0.5 * np.einsum("cmn,cm,n->c", residual, noise_precision, sample_weight)

    return log_lik


class _Sweep:
    """What a sweep of scale moves shares: the network's log likelihood, the
    random draws and the Metropolis tests.

    :meth:`draw` draws the log factors ``u ~ N(0, s^2)`` of all moves, then
    the uniforms of their tests, up front and in this order.
    """

    def __init__(self, outputs, Y, noise_precision, sample_weight):
        self.log_lik = _log_likelihood(Y, noise_precision, sample_weight)
        self.current = self.log_lik(outputs)

    def draw(self, random_state, proposal_sd, shape):
        """Draw the log factors and the uniforms of a sweep of moves."""
        self.log_c = random_state.standard_normal(shape) * proposal_sd
        self.log_u = np.log(random_state.uniform(size=shape))
        self.accept_prob = np.empty(shape)

    def test(self, k, log_prior_ratio, outputs):
        """Metropolis test of move ``k`` per chain, to network ``outputs``.

        ``log_prior_ratio`` holds the prior and Jacobian terms; a non-finite
        ratio rejects.  Returns the chains that accept.
        """
        proposed = self.log_lik(outputs)
        with np.errstate(over="ignore", invalid="ignore"):
            log_ratio = log_prior_ratio + proposed - self.current
        self.accept_prob[:, k], accepted = metropolis_test(log_ratio, self.log_u[:, k])
        self.current = np.where(accepted, proposed, self.current)
        return accepted


def _group_scaled(state, g, factor, X_augmented_T, layout, theta):
    """The network after weight group ``g`` is scaled by ``1 + factor``.

    Input-side groups change the pre-activations by ``factor`` times their
    share of them; the output weights and biases change the outputs only.
    """
    v1, w2, b2 = layout.augmented.unpack(theta)
    rows = layout.input_group_rows()
    factor = factor[:, None, None]
    if g < len(rows):
        weights = v1[:, rows[g], :].transpose(0, 2, 1)
        if len(rows[g]) == 1:  # an outer product: faster as a broadcast
            part = weights * X_augmented_T[rows[g][0]]
        else:
            part = np.matmul(weights, X_augmented_T[rows[g]])
        part *= factor
        part += state.pre
        return _output_layer(part, w2, b2)
    if g == len(rows):  # hidden-to-output weights
        outputs = state.outputs + factor * (state.outputs - b2[:, :, None])
    else:  # output biases
        outputs = state.outputs + factor * b2[:, :, None]
    return Activations(outputs, state.hidden, state.pre)


def _select(accepted, proposal, state):
    """Per chain, the proposal where accepted, else the current state.

    The rejecting chains' rows are copied into the proposal's own arrays
    (those it shares with the state already hold them).
    """
    for new, old in zip(proposal, state):
        if new is not old:
            for chain in np.flatnonzero(~accepted):
                new[chain] = old[chain]
    return proposal


def rescale_groups(
    theta,
    group_precision,
    noise_precision,
    X_augmented_T,
    Y,
    layout,
    prior,
    proposal_sd,
    random_state,
    sample_weight=None,
    activations=None,
):
    """Joint Metropolis moves of each weight group and its precision.

    For group ``g`` with weights ``z`` and precision ``tau`` the move proposes
    ``z' = c z``, ``tau' = tau / c^2`` with ``log c ~ N(0, s_g^2)``: it keeps
    the standardised weights ``v = z sqrt(tau)`` fixed and updates ``tau`` in
    the non-centred parameterisation, where the joint density of ``log tau``
    and ``v`` is ``tau Gamma(tau) N(v; 0, I) L(v / sqrt(tau))`` (see the
    module docstring for why).  Groups are moved one after the other; each
    move needs the network outputs only, updated from the hidden
    pre-activations.  The log acceptance ratio for ``u = log c`` is ``-a u -
    (a / 2w) tau (exp(-2u) - 1) + log L(c z) - log L(z)`` for the
    Gamma(shape a/2, mean w) prior of the group precision.

    Parameters
    ----------
    theta : ndarray of shape (n_chains, n_params)
    group_precision : ndarray of shape (n_chains, n_groups)
    noise_precision : ndarray of shape (n_chains, n_outputs)
    X_augmented_T : ndarray of shape (n_features + 1, n_samples)
        ``augment(X)``.
    Y : ndarray of shape (n_samples, n_outputs)
    layout : NetworkLayout
    prior : HyperPrior
    proposal_sd : ndarray of shape (n_chains, n_groups)
        Standard deviation of ``log c`` per chain and group.
    random_state : numpy.random.Generator or ChainRandom
    sample_weight : ndarray of shape (n_samples,) or None, default=None
        Weight of every row's log likelihood.
    activations : Activations or None, default=None
        The network at ``theta`` on the training inputs, if the caller has
        it (``forward(theta, None, layout, X_augmented_T)``); not modified.

    Returns
    -------
    theta : ndarray of shape (n_chains, n_params)
    group_precision : ndarray of shape (n_chains, n_groups)
    accept_prob : ndarray of shape (n_chains, n_groups)
        Metropolis acceptance probability of every proposal.
    activations : Activations
        The network at the returned ``theta``, for the next move.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.hmc._network import (
    ...     HyperPrior, NetworkLayout, augment)
    >>> from sklearn_meanfield.hmc._rescaling import rescale_groups
    >>> rng = np.random.default_rng(0)
    >>> layout = NetworkLayout(2, 3, 1)
    >>> X, Y = rng.normal(size=(20, 2)), rng.normal(size=(20, 1))
    >>> theta = rng.normal(size=(2, layout.n_params))
    >>> groups = np.ones((2, layout.n_groups))
    >>> new_theta, new_groups, accept, _ = rescale_groups(
    ...     theta, groups, np.ones((2, 1)), augment(X), Y, layout, HyperPrior(),
    ...     np.full((2, layout.n_groups), 0.3), rng)
    >>> # The standardised weights z sqrt(tau) never change.
    >>> index = layout.group_index()
    >>> bool(np.allclose(new_theta * np.sqrt(new_groups[:, index]),
    ...                  theta * np.sqrt(groups[:, index])))
    True
    """
    theta = theta.copy()
    group_precision = group_precision.copy()
    a, means = prior.a_weights, prior.group_means(layout)
    index = layout.group_index()
    state = activations
    if state is None:
        state = forward(theta, None, layout, X_augmented_T=X_augmented_T)
    sweep = _Sweep(state.outputs, Y, noise_precision, sample_weight)
    sweep.draw(random_state, proposal_sd, (theta.shape[0], layout.n_groups))
    for g in range(layout.n_groups):
        u, tau = sweep.log_c[:, g], group_precision[:, g]
        proposal = _group_scaled(
            state, g, np.exp(u) - 1.0, X_augmented_T, layout, theta
        )
        with np.errstate(over="ignore", invalid="ignore"):
            log_prior_ratio = -a * u - 0.5 * a / means[g] * tau * np.expm1(-2.0 * u)
        accepted = sweep.test(g, log_prior_ratio, proposal.outputs)
        if not np.any(accepted):
            continue
        scale = np.where(accepted, np.exp(u), 1.0)
        theta[:, index == g] *= scale[:, None]
        state = _select(accepted, proposal, state)
        group_precision[:, g] /= scale**2
    return theta, group_precision, sweep.accept_prob, state


def rescale_units(
    theta,
    prior_precision,
    noise_precision,
    X_augmented_T,
    Y,
    layout,
    proposal_sd,
    random_state,
    sample_weight=None,
    activations=None,
):
    """Metropolis moves along the scale ridge of every hidden unit.

    For hidden unit ``h`` the move proposes ``c`` times its incoming weights
    and bias and ``1 / c`` times its outgoing weights, ``log c ~ N(0, s_h^2)``.
    Where the unit works in the linear part of tanh this leaves the network
    function almost unchanged: the posterior has a long curved ridge along
    it, which HMC with per-weight step sizes follows slowly, and which drags
    the sums of squares, hence the precisions, of the weight groups.  The
    random walk in ``log c`` is symmetric under the Haar measure of the
    multiplicative group, and the Jacobian ``c^(d + 1 - m)`` (``d`` inputs,
    ``m`` outputs) enters the acceptance ratio with the prior and likelihood
    ratios.
    Units are moved one after the other; each move updates one row of the
    hidden activations (samples last).

    Parameters
    ----------
    theta : ndarray of shape (n_chains, n_params)
    prior_precision : ndarray of shape (n_chains, n_params)
        Precision of every weight (:func:`prior_precision_vector`).
    noise_precision : ndarray of shape (n_chains, n_outputs)
    X_augmented_T : ndarray of shape (n_features + 1, n_samples)
        ``augment(X)``.
    Y : ndarray of shape (n_samples, n_outputs)
    layout : NetworkLayout
    proposal_sd : ndarray of shape (n_chains, n_hidden)
        Standard deviation of ``log c`` per chain and unit.
    random_state : numpy.random.Generator or ChainRandom
    sample_weight : ndarray of shape (n_samples,) or None, default=None
        Weight of every row's log likelihood.
    activations : Activations or None, default=None
        The network at ``theta`` on the training inputs, if the caller has
        it (:func:`rescale_groups` returns it); not modified.

    Returns
    -------
    theta : ndarray of shape (n_chains, n_params)
    accept_prob : ndarray of shape (n_chains, n_hidden)
    activations : Activations
        The network at the returned ``theta``, for the next move.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.hmc._network import NetworkLayout, augment
    >>> from sklearn_meanfield.hmc._rescaling import rescale_units
    >>> rng = np.random.default_rng(0)
    >>> layout = NetworkLayout(2, 3, 1)
    >>> X, Y = rng.normal(size=(20, 2)), rng.normal(size=(20, 1))
    >>> theta = rng.normal(size=(2, layout.n_params))
    >>> new, accept, _ = rescale_units(
    ...     theta, np.ones_like(theta), np.ones((2, 1)), augment(X), Y, layout,
    ...     np.full((2, 3), 0.3), rng)
    >>> # Incoming times outgoing weights of every unit never change.
    >>> w1, _, w2, _ = layout.unpack(theta)
    >>> w1_new, _, w2_new, _ = layout.unpack(new)
    >>> bool(np.allclose(w1_new[:, 0] * w2_new[:, :, 0], w1[:, 0] * w2[:, :, 0]))
    True
    """
    theta = theta.copy()
    d1, h, m = layout.n_features + 1, layout.n_hidden, layout.n_outputs
    v1, w2, _ = layout.augmented.unpack(theta)  # views into theta
    lam_in, lam_out, _ = layout.augmented.unpack(prior_precision)
    if activations is None:
        outputs, hidden, pre = forward(theta, None, layout, X_augmented_T=X_augmented_T)
    else:  # hidden and pre are updated in place, row by row, below
        outputs, hidden, pre = activations
        hidden, pre = hidden.copy(), pre.copy()
    sweep = _Sweep(outputs, Y, noise_precision, sample_weight)
    sweep.draw(random_state, proposal_sd, (theta.shape[0], h))
    for unit in range(h):
        u = sweep.log_c[:, unit]
        c = np.exp(u)
        # Only this unit's row of the hidden activations changes.
        hidden_new = np.tanh(c[:, None] * pre[:, unit])  # (C, n)
        change = hidden_new / c[:, None] - hidden[:, unit]
        out_new = outputs + w2[:, unit, :, None] * change[:, None, :]
        incoming = np.sum(lam_in[:, :, unit] * v1[:, :, unit] ** 2, axis=1)
        outgoing = np.sum(lam_out[:, unit] * w2[:, unit] ** 2, axis=1)
        with np.errstate(over="ignore", invalid="ignore"):
            log_prior_ratio = (
                (d1 - m) * u  # the Jacobian
                - 0.5 * np.expm1(2.0 * u) * incoming
                - 0.5 * np.expm1(-2.0 * u) * outgoing
            )
        accepted = sweep.test(unit, log_prior_ratio, out_new)
        if not np.any(accepted):
            continue
        scale = np.where(accepted, c, 1.0)
        v1[:, :, unit] *= scale[:, None]
        w2[:, unit, :] /= scale[:, None]
        pre[:, unit] *= scale[:, None]
        hidden[:, unit] = np.where(accepted[:, None], hidden_new, hidden[:, unit])
        outputs = np.where(accepted[:, None, None], out_new, outputs)
    return theta, sweep.accept_prob, Activations(outputs, hidden, pre)
