"""One-hidden-layer tanh network: log posterior, gradient, hyperparameter Gibbs.

The parameters of several chains are rows of a ``(n_chains, n_params)`` array,
each row the concatenation ``[W1 (d, H), b1 (H,), W2 (H, m), b2 (m,)]`` in C
order, for the network ``f(x) = tanh(x W1 + b1) W2 + b2`` with ``d`` inputs,
``H`` hidden units and ``m`` outputs.  The likelihood is Gaussian with a noise
precision per output; each group of weights has a Gaussian prior whose
precision is a hyperparameter with a Gamma prior (Neal 1996, chapter 3):
input-to-hidden weights (one precision per input under automatic relevance
determination, else one), hidden biases, hidden-to-output weights, output
biases.

References
----------
Neal, R. M. (1993). Bayesian learning via stochastic dynamics. Advances in
Neural Information Processing Systems 5, 475-482.

Neal, R. M. (1996). Bayesian Learning for Neural Networks. Lecture Notes in
Statistics 118, Springer.
"""

from dataclasses import dataclass

import numpy as np

__all__ = ["HyperPrior", "NetworkLayout"]


@dataclass(frozen=True)
class NetworkLayout:
    """Shapes and offsets of the flat parameter vector.

    Parameters
    ----------
    n_features, n_hidden, n_outputs : int
    ard : bool
        One precision per input for the input-to-hidden weights (automatic
        relevance determination) rather than one for all of them.
    """

    n_features: int
    n_hidden: int
    n_outputs: int
    ard: bool = True

    @property
    def sizes(self):
        d, h, m = self.n_features, self.n_hidden, self.n_outputs
        return (d * h, h, h * m, m)

    @property
    def n_params(self):
        return sum(self.sizes)

    @property
    def n_groups(self):
        """Number of weight precisions: W1 groups, b1, W2, b2."""
        return (self.n_features if self.ard else 1) + 3

    def unpack(self, theta):
        """Views ``W1 (C, d, H), b1 (C, H), W2 (C, H, m), b2 (C, m)`` of theta."""
        d, h, m = self.n_features, self.n_hidden, self.n_outputs
        c = theta.shape[0]
        s0, s1, s2, _ = np.cumsum(self.sizes)
        return (
            theta[:, :s0].reshape(c, d, h),
            theta[:, s0:s1],
            theta[:, s1:s2].reshape(c, h, m),
            theta[:, s2:],
        )

    def group_index(self):
        """Group of every parameter, shape (n_params,), values in [0, n_groups)."""
        d, h, m = self.n_features, self.n_hidden, self.n_outputs
        n_w1 = d if self.ard else 1
        w1 = np.repeat(np.arange(d) if self.ard else np.zeros(d, dtype=int), h)
        return np.concatenate(
            [
                w1,
                np.full(h, n_w1),
                np.full(h * m, n_w1 + 1),
                np.full(m, n_w1 + 2),
            ]
        ).astype(int)

    def group_sizes(self):
        return np.bincount(self.group_index(), minlength=self.n_groups)


@dataclass(frozen=True)
class HyperPrior:
    """Gamma priors of the precisions, each with shape ``a/2`` and mean ``w``.

    Means are for standardised inputs and targets.  The input-to-hidden
    precision scales with the number of inputs, so that the prior variance of a
    hidden unit's summed input does not grow with them, and the hidden-to-output
    precision with the number of hidden units, so that the prior of the network
    function does not grow with them (Neal 1996, section 2.2).

    Parameters
    ----------
    a_weights, a_noise : float
        Shape parameters (times 2); small values are vague.
    w_input_per_feature, w_hidden_bias, w_output_bias, w_noise : float
        Prior mean precisions of the input-to-hidden weights (times
        ``n_features``), hidden biases, output biases and noise.
    w_output_per_hidden : float
        The hidden-to-output mean precision is this times ``n_hidden``.
    """

    a_weights: float = 1.0
    a_noise: float = 1.0
    w_input_per_feature: float = 1.0
    w_hidden_bias: float = 1.0
    w_output_per_hidden: float = 1.0
    w_output_bias: float = 1.0
    w_noise: float = 4.0

    def group_means(self, layout):
        """Prior mean precision of every weight group."""
        n_w1 = layout.n_features if layout.ard else 1
        return np.concatenate(
            [
                np.full(n_w1, self.w_input_per_feature * layout.n_features),
                [
                    self.w_hidden_bias,
                    self.w_output_per_hidden * layout.n_hidden,
                    self.w_output_bias,
                ],
            ]
        )


def _tanh(a):
    """tanh through one exp of a non-positive argument (no overflow).

    numpy's tanh costs several times an exp on common CPUs and it dominates the
    gradient of a small network; this form is accurate to a few ulp in absolute
    terms, which is all the sampler needs (the same function enters the energy
    and its gradient).
    """
    e = np.exp(-2.0 * np.abs(a))
    return np.copysign((1.0 - e) / (1.0 + e), a)


def forward(theta, X, layout):
    """Network outputs and hidden activations of every chain.

    Parameters
    ----------
    theta : ndarray of shape (n_chains, n_params)
    X : ndarray of shape (n_samples, n_features)
    layout : NetworkLayout

    Returns
    -------
    outputs : ndarray of shape (n_chains, n_samples, n_outputs)
    hidden : ndarray of shape (n_chains, n_samples, n_hidden)
    """
    w1, b1, w2, b2 = layout.unpack(theta)
    hidden = _tanh(np.matmul(X, w1) + b1[:, None, :])
    return np.matmul(hidden, w2) + b2[:, None, :], hidden


def augment(X):
    """``[X, 1]``, transposed and contiguous: the input side of the gradient.

    With a column of ones the hidden biases are one more row of W1 (they follow
    W1 in the flat vector, so ``[W1; b1]`` is a (d + 1, H) view of it), which
    saves the bias additions and sums of every gradient.
    """
    return np.ascontiguousarray(np.hstack([X, np.ones((X.shape[0], 1))]).T)


def log_posterior_and_grad(
    theta, X, Y, noise_precision, prior_precision, layout, X_augmented_T=None
):
    """Log posterior of the weights given the precisions, and its gradient.

    ``log p = -1/2 sum_k tau_k sum_i (y_ik - f_k(x_i))^2
    - 1/2 sum_j lambda_j theta_j^2`` up to a constant in theta.  The gradient
    takes two matrix products each way: forward ``[X, 1] [W1; b1]`` and
    ``Z W2``, backward ``R W2^T`` and ``[X, 1]^T dA`` (plus ``Z^T R`` for W2).

    Parameters
    ----------
    theta : ndarray of shape (n_chains, n_params)
    X : ndarray of shape (n_samples, n_features)
    Y : ndarray of shape (n_samples, n_outputs)
    noise_precision : ndarray of shape (n_chains, n_outputs)
    prior_precision : ndarray of shape (n_chains, n_params)
        Precision of every weight (its group's hyperparameter).
    layout : NetworkLayout
    X_augmented_T : ndarray of shape (n_features + 1, n_samples), default=None
        ``augment(X)``, precomputed by callers that evaluate many gradients.

    Returns
    -------
    log_prob : ndarray of shape (n_chains,)
    grad : ndarray of shape (n_chains, n_params)
    """
    xa_t = augment(X) if X_augmented_T is None else X_augmented_T
    n_chains = theta.shape[0]
    d1, h, m = layout.n_features + 1, layout.n_hidden, layout.n_outputs
    k1, k2 = d1 * h, d1 * h + h * m
    v1 = theta[:, :k1].reshape(n_chains, d1, h)  # [W1; b1]
    w2 = theta[:, k1:k2].reshape(n_chains, h, m)
    b2 = theta[:, k2:]
    hidden = _tanh(np.matmul(xa_t.T, v1))
    residual = Y - (np.matmul(hidden, w2) + b2[:, None, :])
    weighted = residual * noise_precision[:, None, :]
    prior_term = prior_precision * theta
    log_prob = -0.5 * (
        np.einsum("cnm,cnm->c", residual, weighted)
        + np.einsum("cp,cp->c", prior_term, theta)
    )
    grad = np.empty_like(theta)
    # Back through tanh: d tanh(a) / da = 1 - tanh(a)^2.
    delta = np.matmul(weighted, w2.transpose(0, 2, 1))
    delta *= 1.0 - hidden * hidden
    grad[:, :k1] = np.matmul(xa_t, delta).reshape(n_chains, -1)
    grad[:, k1:k2] = np.matmul(hidden.transpose(0, 2, 1), weighted).reshape(
        n_chains, -1
    )
    grad[:, k2:] = weighted.sum(axis=1)
    grad -= prior_term
    return log_prob, grad


def gibbs_precisions(theta, residual, layout, prior, random_state):
    """Draw the weight-group and noise precisions from their conditionals.

    A group of ``n`` weights ``z`` with a Gamma(shape a/2, mean w) prior on its
    precision has the conditional Gamma(shape (a + n)/2, rate (a/w + sum z^2)/2);
    the noise precision of output ``k`` likewise with the ``n_samples``
    residuals of that output (Neal 1996, section 3.2).

    Parameters
    ----------
    theta : ndarray of shape (n_chains, n_params)
    residual : ndarray of shape (n_chains, n_samples, n_outputs)
    layout : NetworkLayout
    prior : HyperPrior
    random_state : numpy.random.Generator or RandomState

    Returns
    -------
    group_precision : ndarray of shape (n_chains, n_groups)
    noise_precision : ndarray of shape (n_chains, n_outputs)
    """
    n_chains = theta.shape[0]
    index = layout.group_index()
    sizes = layout.group_sizes()
    squares = np.zeros((n_chains, layout.n_groups))
    np.add.at(squares, (slice(None), index), theta**2)
    a, w = prior.a_weights, prior.group_means(layout)
    group_precision = random_state.gamma(
        0.5 * (a + sizes), size=(n_chains, layout.n_groups)
    ) / (0.5 * (a / w + squares))
    a, w = prior.a_noise, prior.w_noise
    n_samples = residual.shape[1]
    noise_precision = random_state.gamma(
        0.5 * (a + n_samples), size=(n_chains, layout.n_outputs)
    ) / (0.5 * (a / w + np.sum(residual**2, axis=1)))
    return group_precision, noise_precision


def step_scales(group_precision, noise_precision, X_sq_sum, n_samples, layout):
    """Neal's per-parameter step-size scales ``curvature^-1/2``.

    The curvature estimate of a weight is its prior precision plus the data
    term: the noise precision times the summed square of what feeds the weight
    (tanh slopes and hidden values bounded by 1; for input-to-hidden weights
    the outgoing weights enter at their prior variance).  It depends on the
    hyperparameters only, so the chain stays exact when it is recomputed after
    each Gibbs step (Neal 1996, section 3.5).

    Parameters
    ----------
    group_precision : ndarray of shape (n_chains, n_groups)
    noise_precision : ndarray of shape (n_chains, n_outputs)
    X_sq_sum : ndarray of shape (n_features,)
        ``sum_i x_ij^2`` of the training inputs.
    n_samples : int
        Number of training samples (the summed square of a bias's input).
    layout : NetworkLayout

    Returns
    -------
    scales : ndarray of shape (n_chains, n_params)
    """
    d, h = layout.n_features, layout.n_hidden
    n_chains = group_precision.shape[0]
    n_w1 = d if layout.ard else 1
    total_noise = noise_precision.sum(axis=1)  # (C,)
    out_var = 1.0 / group_precision[:, n_w1 + 1]  # prior variance of W2
    w1_prec = group_precision[:, :n_w1] if layout.ard else group_precision[:, :1]
    w1_curv = (
        np.broadcast_to(w1_prec, (n_chains, d))
        + (total_noise * out_var)[:, None] * X_sq_sum[None, :]
    )
    n = float(n_samples)
    b1_curv = group_precision[:, n_w1] + n * total_noise * out_var
    w2_curv = group_precision[:, n_w1 + 1][:, None] + n * noise_precision  # (C, m)
    b2_curv = group_precision[:, n_w1 + 2][:, None] + n * noise_precision
    curvature = np.concatenate(
        [
            np.repeat(w1_curv, h, axis=1),
            np.repeat(b1_curv[:, None], h, axis=1),
            np.tile(w2_curv, (1, h)),
            b2_curv,
        ],
        axis=1,
    )
    return 1.0 / np.sqrt(curvature)


def prior_precision_vector(group_precision, layout):
    """Expand group precisions to one precision per parameter."""
    return group_precision[:, layout.group_index()]
