"""Annealed importance sampling (AIS) of the partition function of a binary RBM.

The model is BernoulliRBM's: {0, 1} units, energy
``E(v, h) = -v . b - h . c - h . W v`` with ``W`` of shape
``(n_hidden, n_visible)`` (``components_``), ``b`` the visible biases
(``intercept_visible_``) and ``c`` the hidden biases (``intercept_hidden_``);
the hidden units sum out in closed form, ``p(v) = exp(-F(v)) / Z`` with the
free energy ``F(v) = -v . b - sum_j softplus(c_j + W_j . v)``.  The same
convention holds in :mod:`sklearn_meanfield.bethe._exact`, in
:class:`~sklearn_meanfield.BetheRBM` and in
:class:`sklearn.neural_network.BernoulliRBM`, so their fitted parameters can
be passed as they are.

Following Salakhutdinov and Murray [1]_, AIS [2]_ anneals from a base-rate
model ``A`` (no couplings, visible biases ``b_A``, e.g. the logits of the
data's visible means, see :func:`base_rate_visible_bias`; its ``log Z_A`` is a
closed form) to the target ``B`` along the geometric path

    ``p_beta(v) propto exp((1 - beta) v . b_A + beta v . b)
    prod_j (1 + exp(beta (c_j + W_j . v)))``,

``0 = beta_0 < beta_1 < ... < beta_K = 1``, equally spaced by default
(:func:`ais_schedule`).  The joint of ``v`` and ``h`` at ``beta`` is the RBM
with visible biases ``(1 - beta) b_A + beta b``, weights ``beta W`` and
hidden biases ``beta c``.  Each chain starts with an exact draw
from ``A``, moves by one Gibbs sweep ``h ~ p_beta(h | v)``, ``v ~ p_beta(v | h)``
at every intermediate ``beta`` and accumulates the log importance weight
``sum_k log p*_{beta_k}(v_k) - log p*_{beta_{k-1}}(v_k)``, the hidden units
summed out analytically (differences of free energies, softplus terms in a
stable form).  ``Z_B / Z_A`` is the mean of the weights, an unbiased estimate
for any schedule; ``log Z`` is their log-mean-exp, which is biased low by
about half its variance (a stochastic lower bound, Jensen's inequality).

All chains of a task run side by side as one ``(n_chains, n_units)`` array:
an annealing step costs two matrix products, like a persistent-contrastive-
divergence update.

References
----------
.. [1] R. Salakhutdinov and I. Murray, "On the quantitative analysis of deep
   belief networks", Proceedings of the 25th International Conference on
   Machine Learning (ICML), 872-879 (2008).
.. [2] R. M. Neal, "Annealed importance sampling", Statistics and Computing
   11, 125-139 (2001).
"""

from numbers import Integral
from typing import NamedTuple

import numpy as np
from scipy.special import expit, logsumexp
from sklearn.utils import check_array

from .._parallel import draw_seeds, run_parallel
from ._exact import free_energy

__all__ = [
    "AISLogLikelihood",
    "AISResult",
    "ais_log_likelihood",
    "ais_log_partition",
    "ais_schedule",
    "base_rate_visible_bias",
]

# Chains run in tasks of at most this many, each with its own seed drawn up
# front: the split depends on ``n_chains`` only, so the log weights are the
# same for every ``n_jobs``.  A compromise: on small models numpy's overhead
# per call (~30 calls a step) makes a task of 50 chains cost 1.6 times more
# per chain than one of 100, but the default 100 chains make two tasks that
# two workers share.
CHAINS_PER_TASK = 50

# Salakhutdinov and Murray's schedule: 500 betas uniform on [0, 0.5], 4000 on
# [0.5, 0.9] and 10000 on [0.9, 1] (14500 in all); ``ais_schedule(K,
# "salakhutdinov-murray")`` keeps these proportions for any number of steps.
_SCHEDULE_KNOTS = (0.0, 0.5, 0.9, 1.0)
_SCHEDULE_SHARES = (500, 4000, 10000)


class AISResult(NamedTuple):
    """Result of :func:`ais_log_partition`.

    Attributes
    ----------
    log_z : float
        The AIS estimate of ``log Z``: ``log_z_base`` plus the log-mean-exp of
        the log importance weights.
    std_error : float
        Standard error of ``log_z`` by the delta method: the standard
        deviation of the importance weights over their mean, divided by
        ``sqrt(n_chains)``.  It measures the Monte Carlo spread only; when
        the weights are heavy-tailed (too few temperatures) it is itself
        unreliable and ``log_z`` is biased low.
    log_weights : ndarray of shape (n_chains,)
        Log importance weights, ``log(Z_B / Z_A)`` estimates of each chain.
    log_z_base : float
        Exact ``log Z`` of the base-rate model.
    """

    log_z: float
    std_error: float
    log_weights: np.ndarray
    log_z_base: float


class AISLogLikelihood(NamedTuple):
    """Result of :func:`ais_log_likelihood`.

    Attributes
    ----------
    log_likelihood : ndarray of shape (n_samples,)
        ``log p(v) = -F(v) - log Z`` of each sample, ``log Z`` by AIS.
    std_error : float
        Standard error of every entry (and of their mean): the error of
        ``log Z``, common to all samples.
    partition : AISResult
        The AIS estimate of ``log Z``.
    """

    log_likelihood: np.ndarray
    std_error: float
    partition: AISResult


def base_rate_visible_bias(X, eps=1e-3):
    """Visible biases of the base-rate model: logits of the visible means.

    The independent-unit model whose marginals are the data's visible means is
    Salakhutdinov and Murray's base distribution for AIS.  The means are
    clipped to ``[eps, 1 - eps]`` so that units always (or never) on in the
    data get finite biases.

    Parameters
    ----------
    X : {array-like, sparse matrix} of shape (n_samples, n_visible)
        Data (or probabilities) in [0, 1], typically the training set.
    eps : float, default=1e-3
        Clipping of the means, in (0, 0.5).

    Returns
    -------
    ndarray of shape (n_visible,)

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.bethe._ais import base_rate_visible_bias
    >>> base_rate_visible_bias(np.array([[0, 1, 1], [1, 1, 0]])).round(2).tolist()
    [0.0, 6.91, 0.0]
    """
    if not 0 < eps < 0.5:
        raise ValueError(f"eps must be in (0, 0.5); got {eps!r}.")
    X = check_array(X, accept_sparse=("csr", "csc"), dtype=np.float64)
    mean = np.clip(np.asarray(X.mean(axis=0)).ravel(), eps, 1.0 - eps)
    return np.log(mean) - np.log1p(-mean)


def ais_schedule(n_temperatures, spacing="linear"):
    """Inverse temperatures ``0 = beta_0 < ... < beta_K = 1`` for AIS.

    Parameters
    ----------
    n_temperatures : int
        Number of annealing steps ``K``.
    spacing : {"linear", "salakhutdinov-murray"}, default="linear"
        ``"linear"``: equal steps.  ``"salakhutdinov-murray"``: the paper's
        spacing scaled to ``K`` steps, 500/14500 of them uniform on
        [0, 0.5], 4000/14500 on [0.5, 0.9] and 10000/14500 on [0.9, 1]
        (``K`` at least 3).  Equal steps are the default: the standard
        deviation of ``d log p*_beta / d beta``, which sets the best local
        step, varies little along the path of a trained RBM, so equal steps
        give a smaller standard error than the paper's spacing at equal
        cost.

    Returns
    -------
    ndarray of shape (n_temperatures + 1,)

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.bethe._ais import ais_schedule
    >>> ais_schedule(4).tolist()
    [0.0, 0.25, 0.5, 0.75, 1.0]
    >>> betas = ais_schedule(29, "salakhutdinov-murray")  # 1 + 8 + 20 steps
    >>> betas[[0, 1, 9, 29]].tolist()
    [0.0, 0.5, 0.9, 1.0]
    >>> np.diff(betas)[[0, 1, -1]].round(3).tolist()
    [0.5, 0.05, 0.005]
    """
    if isinstance(n_temperatures, bool) or not isinstance(n_temperatures, Integral):
        raise TypeError(
            f"n_temperatures must be an int; got {type(n_temperatures).__name__}."
        )
    n_steps = int(n_temperatures)
    if spacing == "linear":
        if n_steps < 1:
            raise ValueError(f"n_temperatures must be at least 1; got {n_steps}.")
        return np.linspace(0.0, 1.0, n_steps + 1)
    if spacing != "salakhutdinov-murray":
        raise ValueError(
            f"spacing must be 'linear' or 'salakhutdinov-murray'; got {spacing!r}."
        )
    if n_steps < len(_SCHEDULE_SHARES):
        raise ValueError(
            f"n_temperatures must be at least 3 for this spacing; got {n_steps}."
        )
    shares = np.asarray(_SCHEDULE_SHARES, dtype=float)
    # Steps per segment, at least one each, summing to n_steps.
    counts = np.maximum(1, np.floor(n_steps * shares / shares.sum())).astype(int)
    counts[-1] += n_steps - counts.sum()
    pieces = [np.zeros(1)]
    for lo, hi, count in zip(_SCHEDULE_KNOTS[:-1], _SCHEDULE_KNOTS[1:], counts):
        pieces.append(np.linspace(lo, hi, count + 1)[1:])
    return np.concatenate(pieces)


def _check_schedule(n_temperatures):
    if isinstance(n_temperatures, (Integral, np.integer)) and not isinstance(
        n_temperatures, bool
    ):
        return ais_schedule(int(n_temperatures))
    betas = np.asarray(n_temperatures, dtype=float)
    if (
        betas.ndim != 1
        or betas.size < 2
        or betas[0] != 0.0
        or betas[-1] != 1.0
        or not np.all(np.diff(betas) >= 0)
    ):
        raise ValueError(
            "n_temperatures must be an int or a non-decreasing 1-d array of "
            "inverse temperatures from 0 to 1 (first 0, last 1)."
        )
    return betas


def _check_model(weights, visible_bias, hidden_bias, base_visible_bias):
    weights = np.asarray(weights, dtype=float)
    if weights.ndim != 2:
        raise ValueError(
            f"weights must be 2-d (n_hidden, n_visible); got shape {weights.shape}."
        )
    n_hidden, n_visible = weights.shape
    visible_bias = np.asarray(visible_bias, dtype=float)
    hidden_bias = np.asarray(hidden_bias, dtype=float)
    if visible_bias.shape != (n_visible,) or hidden_bias.shape != (n_hidden,):
        raise ValueError(
            f"weights of shape {weights.shape} need visible_bias of shape "
            f"({n_visible},) and hidden_bias of shape ({n_hidden},); got "
            f"{visible_bias.shape} and {hidden_bias.shape}."
        )
    if base_visible_bias is None:
        base_visible_bias = np.zeros(n_visible)
    base_visible_bias = np.asarray(base_visible_bias, dtype=float)
    if base_visible_bias.shape != (n_visible,):
        raise ValueError(
            f"base_visible_bias must have shape ({n_visible},); got "
            f"{base_visible_bias.shape}."
        )
    arrays = (weights, visible_bias, hidden_bias, base_visible_bias)
    if not all(np.all(np.isfinite(a)) for a in arrays):
        raise ValueError("The RBM parameters must be finite.")
    return arrays


def _softplus(x):
    # log(1 + exp(x)) without overflow.
    return np.logaddexp(0.0, x)


def _ais_chains(weights, visible_bias, hidden_bias, base_visible_bias, betas, n, seed):
    """Log importance weights of ``n`` chains annealed along ``betas``."""
    rng = np.random.default_rng(seed)
    n_hidden, n_visible = weights.shape
    weights_t = np.ascontiguousarray(weights.T)
    bias_shift = visible_bias - base_visible_bias
    # Exact draws from the base model (no couplings).
    v = (rng.random((n, n_visible)) < expit(base_visible_bias)).astype(float)
    log_w = np.zeros(n)
    last = len(betas) - 1
    for k in range(1, last + 1):
        beta, beta_prev = betas[k], betas[k - 1]
        field = v @ weights_t
        field += hidden_bias  # c + W v, chains x hidden
        # log p*_beta(v) - log p*_beta_prev(v), the hidden units summed out:
        # softplus(beta x) = beta max(x, 0) + log(1 + exp(-beta |x|)), so the
        # softplus difference is a log of a ratio of numbers in (1, 2] (no
        # overflow, absolute error ~1e-16), and exp(-beta |x|) serves the
        # hidden units' conditional probabilities too.
        magnitude = np.abs(field)
        tail = np.exp(-beta * magnitude)
        tail_prev = np.exp(-beta_prev * magnitude)
        tail += 1.0
        tail_prev += 1.0
        log_w += (beta - beta_prev) * (
            v @ bias_shift + np.maximum(field, 0.0).sum(axis=1)
        )
        log_w += np.log(tail / tail_prev).sum(axis=1)
        if k == last:
            break
        # One Gibbs sweep leaving p_beta invariant.  p(h = 1 | v) =
        # expit(beta x) = 1 / tail for x >= 0 and (tail - 1) / tail otherwise.
        p_hidden = np.where(field >= 0.0, 1.0, tail - 1.0)
        p_hidden /= tail
        h = (rng.random((n, n_hidden)) < p_hidden).astype(float)
        v_field = h @ weights
        v_field += bias_shift
        v_field *= beta
        v_field += base_visible_bias  # (1 - beta) b_A + beta (b + h W)
        v = (rng.random((n, n_visible)) < expit(v_field)).astype(float)
    return log_w


def _log_mean_exp_and_error(log_weights):
    """``log mean exp(log_weights)`` and its delta-method standard error."""
    n = log_weights.size
    log_mean = logsumexp(log_weights) - np.log(n)
    if n < 2:
        return float(log_mean), float("nan")
    ratios = np.exp(log_weights - log_mean)  # w_i / mean(w), mean 1
    return float(log_mean), float(np.std(ratios, ddof=1) / np.sqrt(n))


def ais_log_partition(
    weights,
    visible_bias,
    hidden_bias,
    *,
    base_visible_bias=None,
    n_chains=100,
    n_temperatures=10000,
    random_state=None,
    n_jobs=None,
):
    """Estimate ``log Z`` of a binary RBM by annealed importance sampling.

    Salakhutdinov and Murray's estimator [1]_ (AIS, [2]_): chains start from a
    base-rate model with no couplings and are annealed along a geometric path
    of ``n_temperatures`` steps to the RBM, one Gibbs sweep per step, the
    hidden units summed out of the importance weights.  Parameters follow
    :class:`sklearn.neural_network.BernoulliRBM` ({0, 1} units, energy
    ``-v . b - h . c - h . W v``): pass a fitted model's ``components_``,
    ``intercept_visible_``, ``intercept_hidden_``.

    Parameters
    ----------
    weights : array-like of shape (n_hidden, n_visible)
        Couplings ``W`` (``components_``).
    visible_bias : array-like of shape (n_visible,)
        Visible biases ``b`` (``intercept_visible_``).
    hidden_bias : array-like of shape (n_hidden,)
        Hidden biases ``c`` (``intercept_hidden_``).
    base_visible_bias : array-like of shape (n_visible,) or None, default=None
        Visible biases of the base model.  Use
        :func:`base_rate_visible_bias` of the training data (the paper's
        choice): the closer the base model to the RBM, the smaller the
        variance.  None means zeros (uniform visible units).
    n_chains : int, default=100
        Number of independent annealing runs (importance weights).
    n_temperatures : int or array-like of shape (K + 1,), default=10000
        Number of annealing steps ``K``, equally spaced in ``beta``
        (:func:`ais_schedule`), or the inverse temperatures themselves
        (non-decreasing, from 0 to 1), e.g. ``ais_schedule(K,
        "salakhutdinov-murray")`` for the paper's spacing.
    random_state : None, int or RandomState, default=None
        Source of the seeds of the chains (one per task of at most
        ``CHAINS_PER_TASK`` chains, drawn before any work is dispatched).
    n_jobs : int or None, default=None
        Number of joblib workers running the tasks; the result is the same
        for every value.  None defers to :func:`joblib.parallel_config`.

    Returns
    -------
    result : AISResult
        ``log_z``, its ``std_error``, the chains' ``log_weights`` and the
        base model's exact ``log_z_base``.

    Notes
    -----
    ``exp(log_z)`` is an unbiased estimate of ``Z``; ``log_z`` itself is biased
    low by about ``std_error**2 / 2``.  One step costs two products of the
    ``(n_chains, n_visible)`` and ``(n_chains, n_hidden)`` states with the
    weights, two exponentials and a logarithm per hidden unit and a
    logistic function per visible unit, for every chain.  A base model close
    to the RBM (the training data's base rates rather than the uniform
    ``base_visible_bias=None``) lowers the variance;
    ``benchmarks/bench_rbm_log_likelihood.py`` measures the error against
    enumeration.

    References
    ----------
    .. [1] R. Salakhutdinov and I. Murray, "On the quantitative analysis of
       deep belief networks", Proceedings of the 25th International
       Conference on Machine Learning (ICML), 872-879 (2008).
    .. [2] R. M. Neal, "Annealed importance sampling", Statistics and
       Computing 11, 125-139 (2001).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.bethe._ais import ais_log_partition
    >>> from sklearn_meanfield.bethe._exact import exact_log_partition
    >>> rng = np.random.RandomState(0)
    >>> W, b, c = rng.normal(size=(4, 6)), rng.normal(size=6), rng.normal(size=4)
    >>> result = ais_log_partition(W, b, c, n_temperatures=1000, random_state=0)
    >>> bool(abs(result.log_z - exact_log_partition(W, b, c)) < 0.05)
    True
    """
    weights, visible_bias, hidden_bias, base_visible_bias = _check_model(
        weights, visible_bias, hidden_bias, base_visible_bias
    )
    if isinstance(n_chains, bool) or not isinstance(n_chains, (Integral, np.integer)):
        raise TypeError(f"n_chains must be an int; got {type(n_chains).__name__}.")
    if n_chains < 1:
        raise ValueError(f"n_chains must be at least 1; got {n_chains}.")
    betas = _check_schedule(n_temperatures)
    n_hidden = weights.shape[0]
    log_z_base = float(_softplus(base_visible_bias).sum() + n_hidden * np.log(2.0))

    n_tasks = -(-int(n_chains) // CHAINS_PER_TASK)
    sizes = np.full(n_tasks, int(n_chains) // n_tasks)
    sizes[: int(n_chains) % n_tasks] += 1
    seeds = draw_seeds(random_state, n_tasks)
    parts = run_parallel(
        _ais_chains,
        [
            (weights, visible_bias, hidden_bias, base_visible_bias, betas, int(n), s)
            for n, s in zip(sizes, seeds)
        ],
        n_jobs=n_jobs,
    )
    log_weights = np.concatenate(parts)
    log_ratio, std_error = _log_mean_exp_and_error(log_weights)
    return AISResult(log_z_base + log_ratio, std_error, log_weights, log_z_base)


def ais_log_likelihood(
    X,
    weights,
    visible_bias,
    hidden_bias,
    *,
    base_visible_bias="data",
    n_chains=100,
    n_temperatures=10000,
    random_state=None,
    n_jobs=None,
):
    """Log-likelihood ``log p(v) = -F(v) - log Z`` of each sample, ``log Z`` by AIS.

    The free energy ``F(v)`` is exact; ``log Z`` comes from
    :func:`ais_log_partition`, so every sample carries the same error, whose
    standard error is returned.

    Parameters
    ----------
    X : {array-like, sparse matrix} of shape (n_samples, n_visible)
        Samples in [0, 1].
    weights : array-like of shape (n_hidden, n_visible)
        Couplings ``W`` (``components_``).
    visible_bias : array-like of shape (n_visible,)
        Visible biases (``intercept_visible_``).
    hidden_bias : array-like of shape (n_hidden,)
        Hidden biases (``intercept_hidden_``).
    base_visible_bias : "data", array-like of shape (n_visible,) or None, \
            default="data"
        Visible biases of the base model; ``"data"`` takes
        :func:`base_rate_visible_bias` of ``X`` (any base gives a valid
        estimate; the training set's base rates are the paper's choice).
    n_chains : int, default=100
        Number of annealing runs.
    n_temperatures : int or array-like, default=10000
        Annealing steps, or the inverse temperatures (see
        :func:`ais_log_partition`).
    random_state : None, int or RandomState, default=None
        Source of the chains' seeds.
    n_jobs : int or None, default=None
        Number of joblib workers; the result is the same for every value.

    Returns
    -------
    result : AISLogLikelihood
        ``log_likelihood`` per sample, its ``std_error`` and the
        ``partition`` estimate.

    References
    ----------
    .. [1] R. Salakhutdinov and I. Murray, "On the quantitative analysis of
       deep belief networks", Proceedings of the 25th International
       Conference on Machine Learning (ICML), 872-879 (2008).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.bethe._ais import ais_log_likelihood
    >>> from sklearn_meanfield.bethe._exact import exact_log_likelihood
    >>> rng = np.random.RandomState(0)
    >>> W, b, c = rng.normal(size=(4, 6)), rng.normal(size=6), rng.normal(size=4)
    >>> X = (rng.uniform(size=(20, 6)) < 0.5).astype(float)
    >>> result = ais_log_likelihood(X, W, b, c, n_temperatures=1000, random_state=0)
    >>> error = result.log_likelihood - exact_log_likelihood(X, W, b, c)
    >>> bool(np.abs(error).max() < 0.05)
    True
    """
    X = check_array(X, accept_sparse="csr", dtype=np.float64)
    weights = np.asarray(weights, dtype=float)
    if X.shape[1] != weights.shape[-1]:
        raise ValueError(
            f"X must be 2-d with {weights.shape[-1]} columns; got shape {X.shape}."
        )
    if isinstance(base_visible_bias, str):
        if base_visible_bias != "data":
            raise ValueError(
                "base_visible_bias must be 'data', an array or None; got "
                f"{base_visible_bias!r}."
            )
        base_visible_bias = base_rate_visible_bias(X)
    partition = ais_log_partition(
        weights,
        visible_bias,
        hidden_bias,
        base_visible_bias=base_visible_bias,
        n_chains=n_chains,
        n_temperatures=n_temperatures,
        random_state=random_state,
        n_jobs=n_jobs,
    )
    weights, visible_bias, hidden_bias, _ = _check_model(
        weights, visible_bias, hidden_bias, None
    )
    log_likelihood = (
        -free_energy(X, weights, visible_bias, hidden_bias) - partition.log_z
    )
    return AISLogLikelihood(log_likelihood, partition.std_error, partition)
