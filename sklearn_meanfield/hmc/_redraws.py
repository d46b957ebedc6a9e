"""Redraws of whole hidden units: independence proposals from the prior.

HMC trajectories, the Gibbs steps of the precisions and the rescaling moves
(:mod:`~sklearn_meanfield.hmc._rescaling`) all move the network by small
steps.  Chains then stay for thousands of iterations with the hidden units
organised in one way: a unit saturated into a constant in one chain and
modelling an input in another, one unit or three sharing a term of the
function.  Between such organisations the posterior is low: a unit cannot
change its role by small steps without spoiling the fit on the way.  The
chains' automatic relevance determination precisions and predictions then
disagree, and split R-hat stays high however long the chains run.

:func:`redraw_units` proposes, for each hidden unit in turn, new incoming
weights drawn from their prior given the current precisions, independently
of the current ones, and draws the unit's outgoing weights from their exact
conditional posterior given the new unit and the rest of the network (the
output layer is linear, so that conditional is Gaussian).  Drawn that way
the outgoing weights cancel from the Metropolis-Hastings ratio, which is the
ratio of the marginal likelihoods of the new and the current unit with their
outgoing weights integrated out: the proposal jumps to a new organisation in
one step, and is accepted when the new unit explains the rest of the
network's residual about as well as the current one.  A unit that does
little (its outgoing weights near zero, or saturated) is thus redrawn often,
and taken up where a new role pays.  A redraw costs about one forward pass of
the network, against the 2 x ``n_leapfrog`` passes of a trajectory.

References
----------
Tierney, L. (1994). Markov chains for exploring posterior distributions.
Annals of Statistics, 22(4), 1701-1728 (independence proposals within
Metropolis-Hastings).

Neal, R. M. (1993). Bayesian learning via stochastic dynamics.  Advances in
Neural Information Processing Systems 5, 475-482.
"""

import numpy as np

from ._network import Activations, forward
from ._sampler import metropolis_test

__all__ = ["redraw_units", "unit_evidence"]


def unit_evidence(
    feature, residual, outgoing_precision, noise_precision, sample_weight=None
):
    """Marginal likelihood of one hidden unit with its outgoing weights
    integrated out, and their Gaussian conditional.

    For output ``k`` the residual ``r_k`` (the targets minus the network
    without the unit) is modelled as ``v_k z + noise``, with the unit's
    activations ``z``, ``v_k ~ N(0, 1 / lambda_k)`` and noise precision
    ``tau_k / s_i`` on row ``i`` (``s`` the sample weights).  With ``A_k =
    lambda_k + tau_k sum_i s_i z_i^2`` and ``B_k = tau_k sum_i s_i z_i r_ik``,
    ``log p(r | z) = sum_k [-log(A_k / lambda_k) / 2 + B_k^2 / (2 A_k)]`` plus
    terms free of ``z``, and ``v_k | z, r ~ N(B_k / A_k, 1 / A_k)``.

    Parameters
    ----------
    feature : ndarray of shape (n_chains, n_samples)
        The unit's activations ``z``.
    residual : ndarray of shape (n_chains, n_outputs, n_samples)
    outgoing_precision : ndarray of shape (n_chains, n_outputs)
        Prior precisions ``lambda`` of the unit's outgoing weights.
    noise_precision : ndarray of shape (n_chains, n_outputs)
    sample_weight : ndarray of shape (n_samples,) or None, default=None

    Returns
    -------
    log_evidence : ndarray of shape (n_chains,)
        ``log p(r | z)`` up to the terms free of ``z``.
    mean, precision : ndarray of shape (n_chains, n_outputs)
        The conditional of the outgoing weights.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy.stats import multivariate_normal
    >>> from sklearn_meanfield.hmc._redraws import unit_evidence
    >>> rng = np.random.default_rng(0)
    >>> z, r = rng.normal(size=(2, 5)), rng.normal(size=(2, 1, 5))
    >>> lam, tau = np.array([[2.0]]), np.array([[3.0]])
    >>> log_ev, _, _ = unit_evidence(z, r, lam, tau)
    >>> # Against the Gaussian marginal of r, up to the same constant.
    >>> exact = [multivariate_normal(np.zeros(5), np.outer(zc, zc) / 2.0
    ...          + np.eye(5) / 3.0).logpdf(rc[0]) for zc, rc in zip(z, r)]
    >>> free = multivariate_normal(np.zeros(5), np.eye(5) / 3.0)
    >>> offsets = [e - l for e, l in zip(exact, log_ev)]
    >>> bool(np.allclose(offsets, [free.logpdf(rc[0]) for rc in r]))
    True
    """
    weighted = feature if sample_weight is None else feature * sample_weight
    sum_squares = np.einsum("cn,cn->c", weighted, feature)
    cross = np.einsum("cn,cmn->cm", weighted, residual)
    precision = outgoing_precision + noise_precision * sum_squares[:, None]
    projection = noise_precision * cross
    log_evidence = np.sum(
        -0.5 * np.log1p(noise_precision * sum_squares[:, None] / outgoing_precision)
        + 0.5 * projection**2 / precision,
        axis=1,
    )
    return log_evidence, projection / precision, precision


def redraw_units(
    theta,
    prior_precision,
    noise_precision,
    X_augmented_T,
    Y,
    layout,
    random_state,
    sample_weight=None,
    activations=None,
):
    """Independence Metropolis-Hastings redraws of every hidden unit.

    For hidden unit ``h`` in turn: new incoming weights and bias ``w' ~
    N(0, diag(1 / lambda))`` from their prior, new outgoing weights ``v'``
    from their conditional given ``w'`` and the rest of the network
    (:func:`unit_evidence`), accepted with probability ``min(1, p(r | w') /
    p(r | w))``, the ratio of the unit's marginal likelihoods with its
    outgoing weights integrated out (see the module docstring).  A rejected
    proposal keeps the unit, outgoing weights included.

    Parameters
    ----------
    theta : ndarray of shape (n_chains, n_params)
    prior_precision : ndarray of shape (n_chains, n_params)
        Precision of every weight (:func:`prior_precision_vector`).
    noise_precision : ndarray of shape (n_chains, n_outputs)
        Noise precisions the likelihood sees (times the inverse temperature
        for tempered chains).
    X_augmented_T : ndarray of shape (n_features + 1, n_samples)
        ``augment(X)``.
    Y : ndarray of shape (n_samples, n_outputs)
    layout : NetworkLayout
    random_state : numpy.random.Generator or ChainRandom
    sample_weight : ndarray of shape (n_samples,) or None, default=None
        Weight of every row's log likelihood.
    activations : Activations or None, default=None
        The network at ``theta`` on the training inputs, if the caller has
        it; not modified.

    Returns
    -------
    theta : ndarray of shape (n_chains, n_params)
    accept_prob : ndarray of shape (n_chains, n_hidden)
        Acceptance probability of every proposal.
    activations : Activations
        The network at the returned ``theta``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.hmc._network import NetworkLayout, augment
    >>> from sklearn_meanfield.hmc._redraws import redraw_units
    >>> rng = np.random.default_rng(0)
    >>> layout = NetworkLayout(2, 3, 1)
    >>> X, Y = rng.normal(size=(20, 2)), rng.normal(size=(20, 1))
    >>> theta = rng.normal(size=(2, layout.n_params))
    >>> new, accept, _ = redraw_units(theta, np.ones_like(theta),
    ...                               np.ones((2, 1)), augment(X), Y, layout, rng)
    >>> # The output biases are not redrawn.
    >>> bool(np.array_equal(new[:, -1], theta[:, -1]))
    True
    """
    theta = theta.copy()
    n_chains, n_hidden = theta.shape[0], layout.n_hidden
    v1, w2, _ = layout.augmented.unpack(theta)  # views into theta
    lam_in, lam_out, _ = layout.augmented.unpack(prior_precision)
    if activations is None:
        activations = forward(theta, None, layout, X_augmented_T=X_augmented_T)
    outputs = activations.outputs.copy()
    hidden, pre = activations.hidden.copy(), activations.pre.copy()
    incoming = random_state.standard_normal((n_chains, n_hidden, layout.n_features + 1))
    outgoing = random_state.standard_normal((n_chains, n_hidden, layout.n_outputs))
    log_u = np.log(random_state.uniform(size=(n_chains, n_hidden)))
    accept_prob = np.empty((n_chains, n_hidden))
    targets = Y.T[None]
    for unit in range(n_hidden):
        # The residual of the network without this unit.
        without = outputs - w2[:, unit, :, None] * hidden[:, unit, None, :]
        residual = targets - without
        current, _, _ = unit_evidence(
            hidden[:, unit], residual, lam_out[:, unit], noise_precision, sample_weight
        )
        weights = incoming[:, unit] / np.sqrt(lam_in[:, :, unit])
        # One product per chain: a chain's result must not depend on the
        # others in its batch, as a product over their stacked weights would
        # through the BLAS kernel's blocking.
        pre_new = np.matmul(weights[:, None, :], X_augmented_T)[:, 0]
        feature = np.tanh(pre_new)
        proposed, mean, precision = unit_evidence(
            feature, residual, lam_out[:, unit], noise_precision, sample_weight
        )
        accept_prob[:, unit], accepted = metropolis_test(
            proposed - current, log_u[:, unit]
        )
        if not np.any(accepted):
            continue
        out_weights = mean + outgoing[:, unit] / np.sqrt(precision)
        v1[accepted, :, unit] = weights[accepted]
        w2[accepted, unit, :] = out_weights[accepted]
        pre[accepted, unit] = pre_new[accepted]
        hidden[accepted, unit] = feature[accepted]
        outputs[accepted] = (
            without[accepted]
            + out_weights[accepted, :, None] * feature[accepted, None, :]
        )
    return theta, accept_prob, Activations(outputs, hidden, pre)
