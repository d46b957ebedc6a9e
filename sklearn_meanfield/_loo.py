"""Leave-one-out helpers shared by the estimators.

Pareto-smoothed importance sampling (PSIS) turns posterior draws of a model fitted
on all the data into leave-one-out predictive quantities without refitting
(Vehtari, Gelman and Gabry 2017).  For draw ``s`` and training point ``i`` the raw
importance ratio of the leave-one-out posterior against the full posterior is
``1 / p(y_i | theta_s)``; its largest values are replaced by the expected order
statistics of a generalised Pareto distribution fitted to them (Zhang and
Stephens 2009), which stabilises the estimate, and the fitted shape ``k-hat``
says whether it can be trusted (above about 0.7 it cannot).

References
----------
Vehtari, A., Gelman, A. and Gabry, J. (2017). Practical Bayesian model
evaluation using leave-one-out cross-validation and WAIC. Statistics and
Computing, 27, 1413-1432.

Vehtari, A., Simpson, D., Gelman, A., Yao, Y. and Gabry, J. (2024). Pareto
smoothed importance sampling. Journal of Machine Learning Research, 25(72).

Zhang, J. and Stephens, M. A. (2009). A new and efficient estimation method for
the generalized Pareto distribution. Technometrics, 51(3), 316-325.
"""

from typing import NamedTuple

import numpy as np

__all__ = [
    "PSISLOOResult",
    "gpd_fit",
    "gpd_quantile",
    "log_sum_exp",
    "psis_loo",
    "psis_smooth",
]

# Weakly informative prior on the shape: ``_PRIOR_K_N`` pseudo-observations at
# ``_PRIOR_K_MEAN`` (Vehtari et al. 2017, appendix), which stabilises k-hat for
# short tails.
_PRIOR_K_N = 10.0
_PRIOR_K_MEAN = 0.5
# Fewer tail draws than this and the Pareto fit is meaningless.
_MIN_TAIL = 5


def log_sum_exp(values, axis):
    """``log(sum(exp(values)))`` along ``axis`` of an array of finite values.

    ``scipy.special.logsumexp`` without its handling of infinities and signs,
    which costs several extra passes over the (draws, points) arrays of
    PSIS.

    Parameters
    ----------
    values : ndarray
        Finite values.
    axis : int
        The axis summed over.

    Returns
    -------
    log_sum : ndarray
        ``values`` without ``axis``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield._loo import log_sum_exp
    >>> round(float(log_sum_exp(np.array([1000.0, 1000.0]), axis=0)), 9)
    1000.693147181
    """
    largest = values.max(axis=axis, keepdims=True)
    summed = np.sum(np.exp(values - largest), axis=axis, keepdims=True)
    return np.squeeze(largest + np.log(summed), axis=axis)


def gpd_fit(x):
    """Fit a generalised Pareto distribution to exceedances (Zhang-Stephens).

    The estimate is the posterior mean of ``theta = k / sigma`` under the
    profile likelihood on a grid of ``30 + sqrt(n)`` values (Zhang and Stephens
    2009), followed by the weakly informative shrinkage of the shape towards 0.5
    used by PSIS.  The distribution is ``F(x) = 1 - (1 + k x / sigma)^(-1/k)``.

    Parameters
    ----------
    x : array-like of shape (n,)
        Non-negative exceedances over a threshold (any order), with a positive
        maximum.

    Returns
    -------
    k : float
        Shape (heavier tails for larger ``k``; the variance is infinite for
        ``k >= 0.5`` and the mean for ``k >= 1``).
    sigma : float
        Scale.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield._loo import gpd_fit
    >>> x = np.random.RandomState(0).exponential(2.0, size=5000)
    >>> k, sigma = gpd_fit(x)
    >>> abs(k) < 0.05, abs(sigma - 2.0) < 0.1
    (True, True)
    """
    x = np.sort(np.asarray(x, dtype=float))
    n = x.size
    m = 30 + int(np.sqrt(n))
    # Grid of theta (Zhang and Stephens 2009, section 4): centred on 1 / x_max
    # with a spread set by the first quartile.
    quartile = x[max(int(n / 4 + 0.5) - 1, 0)]
    if quartile <= 0:
        # A tied lower quartile: any positive scale for the spread will do.
        quartile = x[x > 0].min()
    theta = 1.0 / x[-1] + (1.0 - np.sqrt(m / (np.arange(1, m + 1) - 0.5))) / (
        3.0 * quartile
    )
    # Profile log likelihood: k(theta) = mean log(1 - theta x) (a negative of the
    # paper's k, i.e. already the shape of the parametrisation above).
    k_theta = np.log1p(-theta[:, None] * x[None, :]).mean(axis=1)
    log_lik = n * (np.log(-theta / k_theta) - k_theta - 1.0)
    weights = np.exp(log_lik - log_sum_exp(log_lik, axis=0))
    theta_hat = np.sum(theta * weights)
    k = np.log1p(-theta_hat * x).mean()
    sigma = -k / theta_hat
    k = (n * k + _PRIOR_K_N * _PRIOR_K_MEAN) / (n + _PRIOR_K_N)
    return float(k), float(sigma)


def gpd_quantile(p, k, sigma):
    """Quantile function of the generalised Pareto distribution.

    Parameters
    ----------
    p : array-like
        Probabilities in [0, 1).
    k, sigma : float
        Shape and scale, as returned by :func:`gpd_fit`.

    Returns
    -------
    x : ndarray
        ``sigma * ((1 - p)^(-k) - 1) / k`` (``-sigma log(1 - p)`` at ``k = 0``).

    Examples
    --------
    >>> from sklearn_meanfield._loo import gpd_quantile
    >>> # k = 0 is the exponential distribution: its median is sigma log 2.
    >>> round(float(gpd_quantile(0.5, 0.0, 2.0)), 4)
    1.3863
    >>> round(float(gpd_quantile(0.5, 0.5, 1.0)), 4)  # 2 (sqrt(2) - 1)
    0.8284
    """
    log_survival = np.log1p(-np.asarray(p, dtype=float))
    if abs(k) < 1e-12:
        return -sigma * log_survival
    return sigma * np.expm1(-k * log_survival) / k


def _smooth_one(log_weights, tail_length):
    """PSIS of one column; returns (unnormalised smoothed log weights, k-hat)."""
    lw = log_weights - np.max(log_weights)
    n = lw.size
    # The tail is the largest ``tail_length`` draws strictly above the cutoff
    # (ties with the cutoff, e.g. from rejected MCMC proposals, stay in the
    # body), the cutoff the next largest.  A partition finds them; only the
    # tail is sorted, by weight and then by draw (as a stable sort of all).
    kth = n - tail_length - 1
    largest = np.argpartition(lw, kth)
    cutoff = lw[largest[kth]]
    tail_index = np.sort(largest[kth + 1 :])
    tail_index = tail_index[lw[tail_index] > cutoff]
    tail_index = tail_index[np.argsort(lw[tail_index], kind="stable")]
    if tail_index.size < _MIN_TAIL:
        return lw, np.inf
    exp_cutoff = np.exp(cutoff)
    # Exceedances over the cutoff in ratio (not log) scale; max(lw) = 0.
    exceed = np.exp(lw[tail_index]) - exp_cutoff
    if not np.max(exceed) > 0:
        return lw, np.inf
    k, sigma = gpd_fit(exceed)
    if not (np.isfinite(k) and np.isfinite(sigma) and sigma > 0):
        return lw, np.inf
    m = tail_index.size
    # Expected order statistics of the fitted tail, placed in the same order.
    smoothed = np.log(gpd_quantile((np.arange(m) + 0.5) / m, k, sigma) + exp_cutoff)
    out = lw.copy()
    out[tail_index] = smoothed  # tail_index is sorted ascending by lw
    # Truncate at the largest raw weight (Vehtari et al. 2024, section 3).
    np.minimum(out, 0.0, out=out)
    return out, k


def psis_smooth(log_weights, r_eff=1.0):
    """Pareto-smoothed importance sampling of each column of log weights.

    Parameters
    ----------
    log_weights : array-like of shape (n_draws, n_points)
        Raw log importance ratios, one column per target (for leave-one-out,
        ``-log p(y_i | theta_s)``).  A 1-D array is treated as one column.
    r_eff : float or array-like of shape (n_points,), default=1.0
        Relative efficiency of the draws (effective sample size over number of
        draws), 1 for independent draws; it sets the tail length
        ``M = ceil(min(S / 5, 3 sqrt(S / r_eff)))``.

    Returns
    -------
    smoothed_log_weights : ndarray of shape (n_draws, n_points)
        Smoothed log weights, normalised so that ``exp`` sums to one over draws.
    pareto_k : ndarray of shape (n_points,)
        Estimated shape of the tail per column; ``inf`` when the tail is too
        short to fit (the weights are then normalised but not smoothed).

    References
    ----------
    Vehtari, A., Gelman, A. and Gabry, J. (2017). Practical Bayesian model
    evaluation using leave-one-out cross-validation and WAIC. Statistics and
    Computing, 27, 1413-1432.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield._loo import psis_smooth
    >>> lw = np.random.RandomState(0).normal(size=(1000, 2))
    >>> smoothed, k = psis_smooth(lw)
    >>> np.allclose(np.exp(smoothed).sum(axis=0), 1.0), bool(np.all(k < 0.5))
    (True, True)
    """
    log_weights = np.asarray(log_weights, dtype=float)
    squeeze = log_weights.ndim == 1
    if squeeze:
        log_weights = log_weights[:, None]
    if log_weights.ndim != 2:
        raise ValueError(
            f"log_weights must be 1-D or 2-D, got shape {log_weights.shape}."
        )
    n_draws, n_points = log_weights.shape
    if n_draws < 2:
        raise ValueError(f"psis_smooth needs at least 2 draws, got {n_draws}.")
    if not np.all(np.isfinite(log_weights)):
        raise ValueError("log_weights must be finite.")
    r_eff = np.broadcast_to(np.asarray(r_eff, dtype=float), (n_points,))
    if np.any(~(r_eff > 0)):
        raise ValueError("r_eff must be positive.")
    tail_lengths = np.ceil(
        np.minimum(0.2 * n_draws, 3.0 * np.sqrt(n_draws / r_eff))
    ).astype(int)
    tail_lengths = np.minimum(tail_lengths, n_draws - 1)
    # One point's weights per contiguous row: a column of a large (draws,
    # points) array is a cache miss per draw, and sorting it costs 5x more.
    columns = np.ascontiguousarray(log_weights.T)
    smoothed = np.empty_like(columns)
    pareto_k = np.empty(n_points)
    for i in range(n_points):
        smoothed[i], pareto_k[i] = _smooth_one(columns[i], tail_lengths[i])
    smoothed -= log_sum_exp(smoothed, axis=1)[:, None]
    smoothed = smoothed.T
    if squeeze:
        return smoothed[:, 0], pareto_k
    return smoothed, pareto_k


class PSISLOOResult(NamedTuple):
    """Leave-one-out quantities estimated by PSIS.

    A named tuple: the parameters below are also its fields.

    Parameters
    ----------
    log_density : ndarray of shape (n_points,)
        Leave-one-out log predictive density ``log p(y_i | y_-i)`` per point.
    pareto_k : ndarray of shape (n_points,)
        PSIS shape estimate per point.
    prediction : ndarray or None
        Leave-one-out expectations of ``predictions`` (``None`` if not given),
        shaped like one draw of ``predictions``.
    log_weights : ndarray of shape (n_draws, n_points)
        The smoothed, normalised log weights.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield._loo import PSISLOOResult
    >>> result = PSISLOOResult(np.zeros(2), np.zeros(2), None, np.zeros((3, 2)))
    >>> result.pareto_k.shape, result.prediction is None
    ((2,), True)
    """

    log_density: np.ndarray
    pareto_k: np.ndarray
    prediction: np.ndarray | None
    log_weights: np.ndarray


def psis_loo(log_likelihood, predictions=None, r_eff=1.0):
    """Leave-one-out predictive densities and means from posterior draws.

    Parameters
    ----------
    log_likelihood : array-like of shape (n_draws, n_points)
        ``log p(y_i | theta_s)`` for every posterior draw ``s`` and training
        point ``i``.
    predictions : array-like of shape (n_draws, n_points, ...), default=None
        Any per-draw quantity at the training points (e.g. the network output);
        its leave-one-out expectation is returned as ``prediction``.
    r_eff : float or array-like of shape (n_points,), default=1.0
        Relative efficiency of the draws, see :func:`psis_smooth`.

    Returns
    -------
    result : PSISLOOResult
        ``log_density``, ``pareto_k``, ``prediction`` and ``log_weights``.

    References
    ----------
    Vehtari, A., Gelman, A. and Gabry, J. (2017). Practical Bayesian model
    evaluation using leave-one-out cross-validation and WAIC. Statistics and
    Computing, 27, 1413-1432.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield._loo import psis_loo
    >>> rng = np.random.RandomState(0)
    >>> mu = rng.normal(0.0, 0.1, size=4000)  # posterior draws of a mean
    >>> y = np.array([-0.5, 0.0, 0.5])
    >>> loglik = -0.5 * (y[None, :] - mu[:, None]) ** 2 - 0.5 * np.log(2 * np.pi)
    >>> result = psis_loo(loglik, predictions=np.repeat(mu[:, None], 3, axis=1))
    >>> result.log_density.shape, result.prediction.shape
    ((3,), (3,))
    """
    log_likelihood = np.asarray(log_likelihood, dtype=float)
    if log_likelihood.ndim != 2:
        raise ValueError(
            "log_likelihood must have shape (n_draws, n_points), got "
            f"{log_likelihood.shape}."
        )
    log_weights, pareto_k = psis_smooth(-log_likelihood, r_eff=r_eff)
    log_density = log_sum_exp(log_weights + log_likelihood, axis=0)
    prediction = None
    if predictions is not None:
        predictions = np.asarray(predictions, dtype=float)
        if predictions.shape[:2] != log_likelihood.shape:
            raise ValueError(
                "predictions must start with the shape of log_likelihood "
                f"{log_likelihood.shape}, got {predictions.shape}."
            )
        weights = np.exp(log_weights).reshape(
            log_weights.shape + (1,) * (predictions.ndim - 2)
        )
        prediction = np.sum(weights * predictions, axis=0)
    return PSISLOOResult(log_density, pareto_k, prediction, log_weights)
