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
from functools import cached_property
from typing import NamedTuple

import numpy as np

from .._layout import ParameterLayout

__all__ = ["Activations", "HyperPrior", "NetworkLayout", "network_outputs"]


@dataclass(frozen=True)
class NetworkLayout:
    """Blocks of the flat parameter vector, and the weight groups.

    The vector is ``[W1 (d, H), b1 (H,), W2 (H, m), b2 (m,)]`` in C order
    (:attr:`blocks`).  The hidden biases follow W1, so ``[W1; b1]`` is also a
    ``(d + 1, H)`` block ``V1`` of it (:attr:`augmented`), the weights of the
    inputs with a column of ones appended (:func:`augment`).

    Parameters
    ----------
    n_features, n_hidden, n_outputs : int
    ard : bool
        One precision per input for the input-to-hidden weights (automatic
        relevance determination) rather than one for all of them.

    Examples
    --------
    >>> from sklearn_meanfield.hmc._network import NetworkLayout
    >>> layout = NetworkLayout(n_features=3, n_hidden=4, n_outputs=1)
    >>> layout.sizes, layout.n_params, layout.n_groups
    ((12, 4, 4, 1), 21, 6)
    >>> layout.augmented.offsets
    (0, 16, 20, 21)
    """

    n_features: int
    n_hidden: int
    n_outputs: int
    ard: bool = True

    @cached_property
    def blocks(self):
        """:class:`~sklearn_meanfield._layout.ParameterLayout` W1, b1, W2, b2."""
        d, h, m = self.n_features, self.n_hidden, self.n_outputs
        return ParameterLayout.of(W1=(d, h), b1=(h,), W2=(h, m), b2=(m,))

    @cached_property
    def augmented(self):
        """The same vector as blocks ``V1 = [W1; b1]`` (d + 1, H), W2, b2."""
        d, h, m = self.n_features, self.n_hidden, self.n_outputs
        return ParameterLayout.of(V1=(d + 1, h), W2=(h, m), b2=(m,))

    @property
    def sizes(self):
        return self.blocks.sizes

    @property
    def n_params(self):
        return self.blocks.n_params

    @property
    def n_groups(self):
        """Number of weight precisions: W1 groups, b1, W2, b2."""
        return (self.n_features if self.ard else 1) + 3

    def group_names(self):
        """Names of the weight groups, in the order of their precisions.

        Examples
        --------
        >>> from sklearn_meanfield.hmc._network import NetworkLayout
        >>> NetworkLayout(2, 3, 1).group_names()
        ['W1[0]', 'W1[1]', 'b1', 'W2', 'b2']
        >>> NetworkLayout(2, 3, 1, ard=False).group_names()
        ['W1', 'b1', 'W2', 'b2']
        """
        inputs = [f"W1[{j}]" for j in range(self.n_features)] if self.ard else ["W1"]
        return inputs + ["b1", "W2", "b2"]

    def unpack(self, theta):
        """Views ``W1 (C, d, H), b1 (C, H), W2 (C, H, m), b2 (C, m)`` of theta."""
        return self.blocks.unpack(theta)

    def input_group_rows(self):
        """Rows of ``V1 = [W1; b1]`` in each input-side group, then the biases'.

        Returns
        -------
        rows : list of list of int
            ``n_groups - 2`` lists: one row per input under ARD (else all
            input rows in one group), then the bias row ``d``.

        Examples
        --------
        >>> from sklearn_meanfield.hmc._network import NetworkLayout
        >>> NetworkLayout(3, 2, 1, ard=False).input_group_rows()
        [[0, 1, 2], [3]]
        """
        d = self.n_features
        rows = [[j] for j in range(d)] if self.ard else [list(range(d))]
        return rows + [[d]]

    def group_index(self):
        """Group of every parameter, shape (n_params,), values in [0, n_groups).

        A read-only array, built once per layout (every iteration of the
        sampler needs it several times).
        """
        return self._group_index

    @cached_property
    def _group_index(self):
        n_w1 = self.n_features if self.ard else 1
        w1 = np.arange(self.n_features)[:, None] if self.ard else 0
        index = self.blocks.pack(W1=w1, b1=n_w1, W2=n_w1 + 1, b2=n_w1 + 2)
        index = index.astype(int)
        index.setflags(write=False)
        return index

    def group_sizes(self):
        return np.bincount(self.group_index(), minlength=self.n_groups)


@dataclass(frozen=True)
class HyperPrior:
    """Gamma priors of the precisions, each with shape ``a/2`` and mean ``w``.

    Means are for standardised inputs and targets.  The noise prior has a
    mean precision of 400 (a noise sd of 0.05 of the target's, Neal's
    ``0.05:0.5`` style of prior) with shape 1/2: its rate ``a / 2w = 1/800``
    counts as a pseudo-residual of sd 0.035, so that it never outweighs the
    residuals of a nearly noise-free fit (a mean of 4, sd 0.5, held the
    predictive sd of data with noise sd 0.01 at 0.05, five times the noise,
    and that of a constant target at ``0.5 / sqrt(n)`` of its scale).  The
    input-to-hidden
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

    Examples
    --------
    >>> from sklearn_meanfield.hmc._network import HyperPrior, NetworkLayout
    >>> HyperPrior().group_means(NetworkLayout(2, 5, 1)).tolist()
    [2.0, 2.0, 1.0, 5.0, 1.0]
    """

    a_weights: float = 1.0
    a_noise: float = 1.0
    w_input_per_feature: float = 1.0
    w_hidden_bias: float = 1.0
    w_output_per_hidden: float = 1.0
    w_output_bias: float = 1.0
    w_noise: float = 400.0

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


def _input_product(weights, inputs_T):
    """``(inputs weights)^T`` of every chain, (n_chains, n_hidden, n_samples).

    One matrix product per chain (a chain's result never depends on the
    others in its batch, as one product over the stacked weights of all
    chains would through the BLAS kernel's blocking), written in the layout
    the tanh and the backward pass want.
    """
    return np.matmul(weights.transpose(0, 2, 1), inputs_T)


class Activations(NamedTuple):
    """The network evaluated on a set of inputs, per chain (or draw).

    The samples are the last axis, so that every array operation of the
    sampler's inner loop runs along the long contiguous axis: the bias,
    outgoing-weight and noise-precision broadcasts as well as the tanh.
    """

    outputs: np.ndarray
    """Network outputs, (n_chains, n_outputs, n_samples)."""
    hidden: np.ndarray
    """Hidden activations ``tanh(pre)``, (n_chains, n_hidden, n_samples)."""
    pre: np.ndarray
    """Hidden pre-activations ``(x W1 + b1)^T``, (n_chains, n_hidden, n_samples)."""

    def outputs_by_sample(self):
        """The outputs as (n_chains, n_samples, n_outputs), a transposed view."""
        return self.outputs.transpose(0, 2, 1)


def _output_layer(pre, w2, b2):
    """The network from the hidden pre-activations on: the tanh layer and the
    output layer, keeping the pre-activations."""
    hidden = np.tanh(pre)
    return Activations(_outputs_of_hidden(hidden, w2, b2), hidden, pre)


def _outputs_of_hidden(hidden, w2, b2):
    """The output layer ``W2^T Z + b2``, samples last: the one every
    evaluation of the network goes through."""
    outputs = np.matmul(w2.transpose(0, 2, 1), hidden)
    outputs += b2[:, :, None]
    return outputs


def _augmented_forward(views, X_augmented_T):
    """The network on ``[X, 1] [W1; b1]``, given the views ``V1, W2, b2``."""
    v1, w2, b2 = views
    return _output_layer(_input_product(v1, X_augmented_T), w2, b2)


def forward(theta, X, layout, X_augmented_T=None):
    """Network outputs, hidden activations and pre-activations of every chain.

    The pre-activations are ``X W1 + b1``, or, given ``augment(X)``,
    ``[X, 1] [W1; b1]`` in one matrix product, as the sampler computes them
    (the two agree up to rounding).  All three arrays have the samples on
    their last axis (:class:`Activations`).

    Parameters
    ----------
    theta : ndarray of shape (n_chains, n_params)
    X : ndarray of shape (n_samples, n_features) or None
        Inputs; ignored when ``X_augmented_T`` is given.
    layout : NetworkLayout
    X_augmented_T : ndarray of shape (n_features + 1, n_samples), default=None
        ``augment(X)``, precomputed by the sampler for its training inputs.

    Returns
    -------
    activations : Activations
        ``outputs`` (n_chains, n_outputs, n_samples), ``hidden`` and ``pre``
        (n_chains, n_hidden, n_samples).

    See Also
    --------
    network_outputs : the outputs alone, one row per sample.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.hmc._network import NetworkLayout, augment, forward
    >>> layout = NetworkLayout(2, 3, 1)
    >>> theta = np.random.default_rng(0).normal(size=(4, layout.n_params))
    >>> outputs, hidden, _ = forward(theta, np.ones((5, 2)), layout)
    >>> outputs.shape, hidden.shape, bool(np.all(np.abs(hidden) < 1))
    ((4, 1, 5), (4, 3, 5), True)
    >>> same = forward(theta, None, layout, X_augmented_T=augment(np.ones((5, 2))))
    >>> bool(np.allclose(same.outputs, outputs, rtol=1e-14))
    True
    """
    if X_augmented_T is not None:
        return _augmented_forward(layout.augmented.unpack(theta), X_augmented_T)
    w1, b1, w2, b2 = layout.blocks.unpack(theta)
    pre = _input_product(w1, X.T)
    pre += b1[:, :, None]
    return _output_layer(pre, w2, b2)


def network_outputs(theta, X, layout):
    """Network outputs of every chain (or draw), (n_chains, n_samples, n_outputs).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.hmc._network import NetworkLayout, network_outputs
    >>> layout = NetworkLayout(2, 3, 2)
    >>> theta = np.zeros((4, layout.n_params))
    >>> network_outputs(theta, np.ones((5, 2)), layout).shape
    (4, 5, 2)
    """
    return forward(theta, X, layout).outputs_by_sample()


def augment(X):
    """``[X, 1]``, transposed and contiguous: the input side of the gradient.

    With a column of ones the hidden biases are one more row of W1 (they follow
    W1 in the flat vector, so ``[W1; b1]`` is a (d + 1, H) view of it), which
    saves the bias additions and sums of every gradient.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.hmc._network import augment
    >>> augment(np.array([[1.0, 2.0], [3.0, 4.0]]))
    array([[1., 3.],
           [2., 4.],
           [1., 1.]])
    """
    return np.ascontiguousarray(np.hstack([X, np.ones((X.shape[0], 1))]).T)


def _weighted_residual(views, X_augmented_T, Y, noise_precision, sample_weight):
    """Forward pass: hidden activations, residuals ``Y - f(X)`` and the residuals
    times the noise precision and the sample weights (the likelihood's
    ``-d log p / d f``), in the dtype of ``X_augmented_T``; samples last,
    (n_chains, n_outputs, n_samples)."""
    v1, w2, b2 = views
    # The pre-activations themselves are not needed here: tanh in place
    # (numpy's vectorised tanh, faster than the one-exp form with AVX-512).
    hidden = _input_product(v1, X_augmented_T)
    np.tanh(hidden, out=hidden)
    outputs = _outputs_of_hidden(hidden, w2, b2)
    residual = np.subtract(Y.T, outputs, out=outputs)
    weighted = residual * noise_precision[:, :, None]
    if sample_weight is not None:
        weighted *= sample_weight
    return hidden, residual, weighted


def _likelihood_gradient(views, hidden, weighted, X_augmented_T, layout):
    """Backward pass: the gradient of the log likelihood, (n_chains, n_params).

    It takes the matrix products ``W2 R`` (with one output, a factor of the
    small result instead), ``[X, 1]^T dA^T`` and ``Z R^T``, samples on the
    last axis throughout.  The result is float64 whatever the dtype of the
    pass (single-precision blocks are written into it, not cast after).
    """
    blocks = layout.augmented
    n_chains = hidden.shape[0]
    grad = np.empty((n_chains, layout.n_params))
    # Back through tanh: d tanh(a) / da = 1 - tanh(a)^2, here its negative
    # (with one output, three passes over the (n_hidden, n_samples) arrays
    # instead of four).
    delta = np.multiply(hidden, hidden)
    delta -= 1.0
    if layout.n_outputs == 1:
        # dA = (1 - Z^2) * W2 R: W2 scales each hidden unit's column of the
        # (d + 1, H) product instead of the (H, n) array.
        delta *= weighted
        input_side = np.matmul(X_augmented_T, delta.transpose(0, 2, 1))
        input_side *= views.W2.transpose(0, 2, 1)
    else:
        delta *= np.matmul(views.W2, weighted)
        input_side = np.matmul(X_augmented_T, delta.transpose(0, 2, 1))
    # Flat slices rather than views of grad: this is the sampler's inner loop.
    np.negative(input_side.reshape(n_chains, -1), out=grad[:, blocks.slice("V1")])
    grad[:, blocks.slice("W2")] = np.matmul(
        hidden, weighted.transpose(0, 2, 1)
    ).reshape(n_chains, -1)
    grad[:, blocks.slice("b2")] = weighted.sum(axis=2)
    return grad


def _log_posterior_value(residual, weighted, prior_term, theta):
    return -0.5 * (
        np.einsum("cmn,cmn->c", residual, weighted)
        + np.einsum("cp,cp->c", prior_term, theta)
    )


def log_posterior_and_grad(
    theta,
    X,
    Y,
    noise_precision,
    prior_precision,
    layout,
    X_augmented_T=None,
    sample_weight=None,
):
    """Log posterior of the weights given the precisions, and its gradient.

    ``log p = -1/2 sum_k tau_k sum_i w_i (y_ik - f_k(x_i))^2
    - 1/2 sum_j lambda_j theta_j^2`` up to a constant in theta, with sample
    weights ``w_i`` (1 without them): an integer weight counts the row that
    many times, as scikit-learn's ``sample_weight`` does.  The gradient
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
    sample_weight : ndarray of shape (n_samples,) or None, default=None
        Weight of every row's log likelihood.

    Returns
    -------
    log_prob : ndarray of shape (n_chains,)
    grad : ndarray of shape (n_chains, n_params)

    See Also
    --------
    log_posterior : the log posterior alone (a forward pass).
    log_posterior_gradient : the gradient alone, optionally in single precision.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.hmc._network import (
    ...     NetworkLayout, log_posterior_and_grad)
    >>> rng = np.random.default_rng(0)
    >>> layout = NetworkLayout(2, 3, 1)
    >>> X, Y = rng.normal(size=(10, 2)), rng.normal(size=(10, 1))
    >>> theta = rng.normal(size=(1, layout.n_params))
    >>> args = (X, Y, np.ones((1, 1)), np.ones((1, layout.n_params)), layout)
    >>> log_prob, grad = log_posterior_and_grad(theta, *args)
    >>> step = 1e-6 * grad / np.linalg.norm(grad)  # along the gradient
    >>> up = log_posterior_and_grad(theta + step, *args)[0]
    >>> bool(np.isclose((up - log_prob)[0], np.sum(grad * step), rtol=1e-4))
    True
    """
    xa_t = augment(X) if X_augmented_T is None else X_augmented_T
    views = layout.augmented.unpack(theta)
    hidden, residual, weighted = _weighted_residual(
        views, xa_t, Y, noise_precision, sample_weight
    )
    prior_term = prior_precision * theta
    log_prob = _log_posterior_value(residual, weighted, prior_term, theta)
    grad = _likelihood_gradient(views, hidden, weighted, xa_t, layout)
    grad -= prior_term
    return log_prob, grad


def log_posterior(
    theta,
    X,
    Y,
    noise_precision,
    prior_precision,
    layout,
    X_augmented_T=None,
    sample_weight=None,
):
    """The log posterior of :func:`log_posterior_and_grad` without its gradient.

    A forward pass only, about half the cost: what the Metropolis test at the
    end of a trajectory needs when the leapfrog kicks use
    :func:`log_posterior_gradient`.  Parameters as there.

    Returns
    -------
    log_prob : ndarray of shape (n_chains,)

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.hmc._network import (
    ...     NetworkLayout, log_posterior, log_posterior_and_grad)
    >>> rng = np.random.default_rng(0)
    >>> layout = NetworkLayout(2, 3, 1)
    >>> X, Y = rng.normal(size=(10, 2)), rng.normal(size=(10, 1))
    >>> theta = rng.normal(size=(2, layout.n_params))
    >>> args = (X, Y, np.ones((2, 1)), np.ones((2, layout.n_params)), layout)
    >>> bool(np.all(log_posterior(theta, *args)
    ...             == log_posterior_and_grad(theta, *args)[0]))
    True
    """
    xa_t = augment(X) if X_augmented_T is None else X_augmented_T
    _, residual, weighted = _weighted_residual(
        layout.augmented.unpack(theta), xa_t, Y, noise_precision, sample_weight
    )
    return _log_posterior_value(residual, weighted, prior_precision * theta, theta)


def log_posterior_gradient(
    theta,
    Y,
    noise_precision,
    prior_precision,
    layout,
    X_augmented_T,
    sample_weight=None,
):
    """The gradient of :func:`log_posterior_and_grad` alone, in the data's dtype.

    The likelihood's part (the forward and backward pass over the data) is
    computed in the dtype of ``X_augmented_T`` and ``Y``: given them in
    single precision, about twice as fast as in double precision (half the
    memory traffic, twice the SIMD width, and a vectorised exp where numpy's
    double-precision exp is scalar), to a relative accuracy of about 1e-6.
    The prior's part is added in double precision.  The result is float64.

    Parameters
    ----------
    theta : ndarray of shape (n_chains, n_params)
    Y : ndarray of shape (n_samples, n_outputs)
        Targets, in the dtype of the computation.
    noise_precision : ndarray of shape (n_chains, n_outputs)
    prior_precision : ndarray of shape (n_chains, n_params)
    layout : NetworkLayout
    X_augmented_T : ndarray of shape (n_features + 1, n_samples)
        ``augment(X)``, in the dtype of the computation.
    sample_weight : ndarray of shape (n_samples,) or None, default=None
        In the dtype of the computation.

    Returns
    -------
    grad : ndarray of shape (n_chains, n_params), float64

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.hmc._network import (
    ...     NetworkLayout, augment, log_posterior_and_grad, log_posterior_gradient)
    >>> rng = np.random.default_rng(0)
    >>> layout = NetworkLayout(2, 3, 1)
    >>> X, Y = rng.normal(size=(50, 2)), rng.normal(size=(50, 1))
    >>> theta = rng.normal(size=(2, layout.n_params))
    >>> noise, precision = np.ones((2, 1)), np.ones((2, layout.n_params))
    >>> exact = log_posterior_and_grad(theta, X, Y, noise, precision, layout)[1]
    >>> single = log_posterior_gradient(
    ...     theta, Y.astype(np.float32), noise, precision, layout,
    ...     augment(X).astype(np.float32))
    >>> error = np.max(np.abs(single - exact)) / np.max(np.abs(exact))
    >>> single.dtype, bool(error < 1e-5)
    (dtype('float64'), True)
    """
    dtype = X_augmented_T.dtype
    views = layout.augmented.unpack(theta.astype(dtype, copy=False))
    hidden, _, weighted = _weighted_residual(
        views,
        X_augmented_T,
        Y,
        noise_precision.astype(dtype, copy=False),
        sample_weight,
    )
    grad = _likelihood_gradient(views, hidden, weighted, X_augmented_T, layout)
    grad -= prior_precision * theta
    return grad


def gibbs_precisions(
    theta,
    residual,
    layout,
    prior,
    random_state,
    sample_weight=None,
    *,
    inverse_temperature=None,
):
    """Draw the weight-group and noise precisions from their conditionals.

    A group of ``n`` weights ``z`` with a Gamma(shape a/2, mean w) prior on its
    precision has the conditional Gamma(shape (a + n)/2, rate (a/w + sum z^2)/2);
    the noise precision of output ``k`` likewise with the ``n_samples``
    residuals of that output (Neal 1996, section 3.2).  With sample weights
    ``w_i`` the noise conditional counts ``sum_i w_i`` points and the
    weighted sum of squares ``sum_i w_i r_i^2``, as for repeated rows; with
    the likelihood to a power ``beta`` (the annealed warm-up), ``beta`` times
    both.

    Parameters
    ----------
    theta : ndarray of shape (n_chains, n_params)
    residual : ndarray of shape (n_chains, n_samples, n_outputs)
    layout : NetworkLayout
    prior : HyperPrior
    random_state : numpy.random.Generator or RandomState
    sample_weight : ndarray of shape (n_samples,) or None, default=None
    inverse_temperature : float, ndarray of shape (n_chains,) or None, default=None
        The power of the likelihood, of all chains or of each (None: 1).

    Returns
    -------
    group_precision : ndarray of shape (n_chains, n_groups)
    noise_precision : ndarray of shape (n_chains, n_outputs)

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.hmc._network import (
    ...     HyperPrior, NetworkLayout, gibbs_precisions)
    >>> layout = NetworkLayout(2, 3, 1)
    >>> theta = np.full((2000, layout.n_params), 0.5)
    >>> residual = np.full((2000, 50, 1), 0.1)
    >>> groups, noise = gibbs_precisions(theta, residual, layout, HyperPrior(),
    ...                                  np.random.default_rng(0))
    >>> # Noise: Gamma(shape 25.5, rate (1/400 + 50 * 0.01) / 2), mean 101.5.
    >>> bool(abs(noise.mean() / 101.5 - 1) < 0.02)
    True
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
    if sample_weight is None:
        n_samples, squares = residual.shape[1], np.sum(residual**2, axis=1)
    else:
        n_samples = np.sum(sample_weight)
        squares = np.einsum("cnm,n->cm", residual**2, sample_weight)
    if inverse_temperature is not None:
        power = np.reshape(inverse_temperature, (-1, 1))
        n_samples, squares = power * n_samples, power * squares
    noise_precision = random_state.gamma(
        0.5 * (a + n_samples), size=(n_chains, layout.n_outputs)
    ) / (0.5 * (a / w + squares))
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

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.hmc._network import NetworkLayout, step_scales
    >>> layout = NetworkLayout(1, 2, 1)
    >>> scales = step_scales(np.ones((1, 4)), np.full((1, 1), 3.0),
    ...                      np.array([10.0]), 10, layout)
    >>> # Output bias: prior precision 1 plus noise precision 3 times 10 cases.
    >>> bool(np.isclose(scales[0, -1], 31 ** -0.5))
    True
    """
    d = layout.n_features
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
    # Each value broadcast over its block: W1 by row (input), b1 by unit, W2
    # by column (output).
    curvature = layout.blocks.pack(
        W1=w1_curv[:, :, None],
        b1=b1_curv[:, None],
        W2=w2_curv[:, None, :],
        b2=b2_curv,
    )
    return 1.0 / np.sqrt(curvature)


def prior_precision_vector(group_precision, layout):
    """Expand group precisions to one precision per parameter.

    Parameters
    ----------
    group_precision : ndarray of shape (n_chains, n_groups)
    layout : NetworkLayout

    Returns
    -------
    precision : ndarray of shape (n_chains, n_params)

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.hmc._network import (
    ...     NetworkLayout, prior_precision_vector)
    >>> layout = NetworkLayout(1, 2, 1)
    >>> prior_precision_vector(np.array([[1.0, 2.0, 3.0, 4.0]]), layout)
    array([[1., 1., 2., 2., 3., 3., 4.]])
    """
    return group_precision[:, layout.group_index()]
