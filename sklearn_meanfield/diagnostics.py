"""Diagnostics for samplers, importance weights and restricted Boltzmann machines.

Three groups of tools, all thin validated wrappers around the code the
estimators themselves run:

* MCMC convergence: :func:`split_rhat` and :func:`effective_sample_size` for
  draws of any sampler, shaped ``(n_chains, n_draws, ...)`` (Vehtari et al.
  2021), as :class:`~sklearn_meanfield.HMCNetworkRegressor` reports them.
* Pareto-smoothed importance sampling: :func:`psis_log_weights` (smoothed
  weights and the Pareto shape ``k-hat``) and :func:`psis_loo` (leave-one-out
  predictive densities from posterior draws), as in Vehtari, Gelman and Gabry
  (2017).
* Binary restricted Boltzmann machines: the log partition function
  (:func:`rbm_log_partition`) and log-likelihood (:func:`rbm_log_likelihood`),
  exact by enumeration for small models, by the Bethe approximation
  (:func:`rbm_bethe_solve`, Huang and Toyoizumi 2015) or by annealed
  importance sampling (Salakhutdinov and Murray 2008); the free energy
  (:func:`rbm_free_energy`); the model's moments (:func:`rbm_exact_moments`,
  :func:`rbm_gibbs_moments`, and the Bethe ones).  They accept a fitted
  :class:`~sklearn_meanfield.BetheRBM`, a fitted
  :class:`sklearn.neural_network.BernoulliRBM` (same parametrisation:
  energy ``E(v, h) = -b.v - c.h - h.W.v`` with ``W = components_``,
  ``b = intercept_visible_``, ``c = intercept_hidden_``), or the tuple
  ``(components, intercept_visible, intercept_hidden)``.

References
----------
Vehtari, A., Gelman, A., Simpson, D., Carpenter, B. and Burkner, P.-C. (2021).
Rank-normalization, folding, and localization: an improved R-hat for assessing
convergence of MCMC. Bayesian Analysis, 16(2), 667-718.

Vehtari, A., Gelman, A. and Gabry, J. (2017). Practical Bayesian model
evaluation using leave-one-out cross-validation and WAIC. Statistics and
Computing, 27, 1413-1432.

Huang, H. and Toyoizumi, T. (2015). Advanced mean field theory of the
restricted Boltzmann machine. Physical Review E, 91, 050101(R).

Salakhutdinov, R. and Murray, I. (2008). On the quantitative analysis of deep
belief networks. Proceedings of the 25th International Conference on Machine
Learning, 872-879.
"""

import numpy as np

from ._loo import PSISLOOResult, psis_smooth
from ._loo import psis_loo as _psis_loo
from .bethe._exact import MAX_ENUMERATED_UNITS as _MAX_ENUMERATED_UNITS
from .bethe._log_partition import (
    rbm_free_energy,
    rbm_log_likelihood,
    rbm_log_partition,
)
from .bethe._moments import (
    BetheResult,
    RBMMoments,
    rbm_bethe_solve,
    rbm_exact_moments,
    rbm_gibbs_moments,
)
from .hmc._diagnostics import effective_sample_size as _effective_sample_size
from .hmc._diagnostics import split_rhat as _split_rhat

__all__ = [
    "MAX_ENUMERATED_UNITS",
    "BetheResult",
    "PSISLOOResult",
    "RBMMoments",
    "effective_sample_size",
    "psis_log_weights",
    "psis_loo",
    "rbm_bethe_solve",
    "rbm_exact_moments",
    "rbm_free_energy",
    "rbm_gibbs_moments",
    "rbm_log_likelihood",
    "rbm_log_partition",
    "split_rhat",
]

#: Largest smaller layer (hidden or visible) that exact enumeration accepts:
#: it sums over ``2**n`` states of that layer.
MAX_ENUMERATED_UNITS = _MAX_ENUMERATED_UNITS

# Fewest draws per chain: a split chain needs two draws in each half.
_MIN_DRAWS = 4


# ---------------------------------------------------------------------- MCMC


def _check_draws(draws, what):
    """``(n_chains, n_draws, n_quantities)`` float draws and the trailing shape."""
    draws = np.asarray(draws, dtype=float)
    if draws.ndim < 2:
        raise ValueError(
            f"{what} needs draws of shape (n_chains, n_draws, ...), got shape "
            f"{draws.shape}."
        )
    n_chains, n_draws = draws.shape[:2]
    if n_chains < 1 or n_draws < _MIN_DRAWS:
        raise ValueError(
            f"{what} needs at least 1 chain of at least {_MIN_DRAWS} draws, got "
            f"{n_chains} chains of {n_draws} draws."
        )
    if not np.all(np.isfinite(draws)):
        raise ValueError(f"{what} needs finite draws (found NaN or infinity).")
    trailing = draws.shape[2:]
    return draws.reshape(n_chains, n_draws, int(np.prod(trailing))), trailing


def _per_quantity(function, draws, trailing):
    """``function`` of (n_chains, n_draws, n_quantities) draws, shaped back."""
    if draws.shape[2] == 0:
        return np.empty(trailing)
    values = function(draws)
    if trailing == ():
        return float(values[0])
    return values.reshape(trailing)


def split_rhat(draws):
    """Rank-normalised split R-hat of MCMC draws, per quantity.

    The R-hat Vehtari et al. (2021) recommend: every chain is split into its
    first and second half (a middle draw of an odd-length chain is dropped);
    the draws of all half-chains are replaced by the normal scores of their
    pooled ranks, and the classic potential scale reduction factor (Gelman
    and Rubin) of these scores is the *bulk* R-hat; the same on the draws
    folded about their median (``|x - median|``) is the *tail* R-hat.  The
    larger of the two is returned.  Rank normalisation makes it defined and
    meaningful for heavy-tailed draws too.

    Parameters
    ----------
    draws : array-like of shape (n_chains, n_draws, ...)
        Draws of any number of quantities (the trailing axes), chain by chain,
        at least 4 draws per chain; one chain is allowed (its two halves are
        compared).  Must be finite.

    Returns
    -------
    rhat : float or ndarray of shape ``draws.shape[2:]``
        About 1 when the chains agree; values above 1.01 (Vehtari et al.'s
        threshold) say the chains have not mixed.  A quantity that every chain
        holds at one constant value gets 1; one held constant at different
        values by different chains gets ``inf``.  A float for 2-D ``draws``.

    See Also
    --------
    effective_sample_size : How many independent draws the chains are worth.

    References
    ----------
    Vehtari, A., Gelman, A., Simpson, D., Carpenter, B. and Burkner, P.-C.
    (2021). Rank-normalization, folding, and localization: an improved R-hat
    for assessing convergence of MCMC. Bayesian Analysis, 16(2), 667-718.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.diagnostics import split_rhat
    >>> rng = np.random.RandomState(0)
    >>> mixed = rng.normal(size=(4, 1000))
    >>> round(split_rhat(mixed), 2)
    1.0
    >>> stuck = mixed + np.arange(4)[:, None]  # chains at different places
    >>> bool(split_rhat(stuck) > 1.5)
    True
    """
    draws, trailing = _check_draws(draws, "split_rhat")
    return _per_quantity(_split_rhat, draws, trailing)


def effective_sample_size(draws, method="bulk"):
    """Effective sample size of MCMC draws, per quantity.

    The number of independent draws that would estimate the mean as precisely
    as the (autocorrelated) chains do: ``S / tau`` with ``S`` the number of
    draws and ``tau = 1 + 2 sum_t rho_t`` the integrated autocorrelation time.
    The autocorrelations of all chains are combined with the between-chain
    variance (Vehtari et al. 2021, eq. 10), so that chains that disagree
    lower the estimate, and the sum is truncated by Geyer's initial monotone
    sequence (pairs of autocorrelations summed until a pair is negative,
    forced non-increasing).  As in Stan, the result is capped at
    ``S log10(S)`` for antithetic chains.

    Parameters
    ----------
    draws : array-like of shape (n_chains, n_draws, ...)
        Draws of any number of quantities (the trailing axes), chain by chain,
        at least 4 draws per chain.  Must be finite.
    method : {"bulk", "basic"}, default="bulk"
        ``"bulk"``: the bulk-ESS of Vehtari et al. (2021), computed on the
        rank-normalised split chains (robust to heavy tails, sensitive to
        chains that disagree about location).  ``"basic"``: on the raw draws,
        chains not split (the ESS of the mean of the quantity itself, e.g. for
        the relative efficiency ``r_eff`` of :func:`psis_log_weights`).
        No tail-ESS is computed.

    Returns
    -------
    ess : float or ndarray of shape ``draws.shape[2:]``
        A float for 2-D ``draws``.

    See Also
    --------
    split_rhat : Whether the chains agree.

    References
    ----------
    Vehtari, A., Gelman, A., Simpson, D., Carpenter, B. and Burkner, P.-C.
    (2021). Rank-normalization, folding, and localization: an improved R-hat
    for assessing convergence of MCMC. Bayesian Analysis, 16(2), 667-718.

    Geyer, C. J. (1992). Practical Markov chain Monte Carlo. Statistical
    Science, 7(4), 473-483.

    Examples
    --------
    An AR(1) chain ``x_t = rho x_{t-1} + noise`` has ``tau = (1 + rho) /
    (1 - rho)``, 3 for ``rho = 0.5``: 4 chains of 2000 draws are worth about
    8000 / 3 = 2667 independent ones.

    >>> import numpy as np
    >>> from sklearn_meanfield.diagnostics import effective_sample_size
    >>> rng = np.random.RandomState(0)
    >>> noise = rng.normal(size=(4, 2000))
    >>> x = np.empty_like(noise)
    >>> x[:, 0] = noise[:, 0]
    >>> for t in range(1, 2000):
    ...     x[:, t] = 0.5 * x[:, t - 1] + np.sqrt(0.75) * noise[:, t]
    >>> bool(2300 < effective_sample_size(x) < 3000)
    True
    """
    if method not in ("bulk", "basic"):
        raise ValueError(f"method must be 'bulk' or 'basic', got {method!r}.")
    draws, trailing = _check_draws(draws, "effective_sample_size")
    return _per_quantity(
        lambda x: _effective_sample_size(x, method=method), draws, trailing
    )


# ---------------------------------------------------------------------- PSIS


def _check_r_eff(r_eff, n_points):
    r_eff = np.asarray(r_eff, dtype=float)
    if r_eff.ndim > 1 or (r_eff.ndim == 1 and r_eff.shape[0] != n_points):
        raise ValueError(
            f"r_eff must be a float or have shape ({n_points},), got shape "
            f"{r_eff.shape}."
        )
    if not np.all(np.isfinite(r_eff) & (r_eff > 0)):
        raise ValueError("r_eff must be positive and finite.")
    return r_eff


def psis_log_weights(log_ratios, r_eff=1.0):
    """Pareto-smoothed importance sampling: smoothed log weights and k-hat.

    For draws ``theta_s`` from a proposal ``g`` and a target ``p``, the raw
    importance ratios ``p(theta_s) / g(theta_s)`` give unbiased but possibly
    very noisy estimates.  PSIS fits a generalised Pareto distribution to the
    largest ``M`` ratios (Zhang and Stephens' estimate, with the weakly
    informative prior of Vehtari et al.), replaces them by the expected order
    statistics of the fit and truncates them at the largest raw ratio.  The
    fitted shape ``k`` says how far the weights can be trusted.

    Parameters
    ----------
    log_ratios : array-like of shape (n_draws,) or (n_draws, n_targets)
        Log importance ratios up to a constant per target, one column per
        target (for leave-one-out, ``-log p(y_i | theta_s)``).  At least 2
        draws, finite.
    r_eff : float or array-like of shape (n_targets,), default=1.0
        Relative efficiency of the draws (effective sample size over number
        of draws, e.g. :func:`effective_sample_size` with ``method="basic"``
        of the ratios divided by ``n_draws``); 1 for independent draws.  It
        sets the tail length ``M = ceil(min(S / 5, 3 sqrt(S / r_eff)))``.

    Returns
    -------
    log_weights : ndarray of the shape of ``log_ratios``
        Smoothed log weights, normalised so that ``exp`` sums to 1 over draws.
    pareto_k : float or ndarray of shape (n_targets,)
        Fitted tail shape per target (a float for 1-D ``log_ratios``):
        below 0.5 the weights have finite variance and the estimates are
        reliable; up to 0.7 they are still usable; above 0.7 they are not.
        ``inf`` when too few distinct ratios exceed the tail's cutoff to fit
        (the weights are then normalised, not smoothed).

    See Also
    --------
    psis_loo : Leave-one-out predictive densities with these weights.

    References
    ----------
    Vehtari, A., Gelman, A. and Gabry, J. (2017). Practical Bayesian model
    evaluation using leave-one-out cross-validation and WAIC. Statistics and
    Computing, 27, 1413-1432.

    Vehtari, A., Simpson, D., Gelman, A., Yao, Y. and Gabry, J. (2024).
    Pareto smoothed importance sampling. Journal of Machine Learning
    Research, 25(72).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.diagnostics import psis_log_weights
    >>> rng = np.random.RandomState(0)
    >>> light = rng.normal(scale=0.5, size=4000)  # log-normal ratios
    >>> heavy = -1.2 * np.log(rng.uniform(size=4000))  # Pareto ratios, k = 1.2
    >>> log_w, k = psis_log_weights(np.column_stack([light, heavy]))
    >>> np.allclose(np.exp(log_w).sum(axis=0), 1.0)
    True
    >>> bool(k[0] < 0.5), bool(k[1] > 0.7)
    (True, True)
    """
    log_ratios = np.asarray(log_ratios, dtype=float)
    if log_ratios.ndim not in (1, 2):
        raise ValueError(
            "log_ratios must have shape (n_draws,) or (n_draws, n_targets), got "
            f"{log_ratios.shape}."
        )
    n_targets = 1 if log_ratios.ndim == 1 else log_ratios.shape[1]
    r_eff = _check_r_eff(r_eff, n_targets)
    log_weights, pareto_k = psis_smooth(log_ratios, r_eff=r_eff)
    if log_ratios.ndim == 1:
        return log_weights, float(pareto_k[0])
    return log_weights, pareto_k


def psis_loo(log_likelihood, predictions=None, r_eff=1.0):
    """Leave-one-out predictive densities (and means) from posterior draws.

    The posterior without point ``i`` is reached from the full posterior by
    importance weights ``1 / p(y_i | theta_s)``, Pareto-smoothed
    (:func:`psis_log_weights`); no refit is needed.

    Parameters
    ----------
    log_likelihood : array-like of shape (n_draws, n_points)
        ``log p(y_i | theta_s)`` for every posterior draw ``s`` (of any
        sampler, chains concatenated) and training point ``i``.
    predictions : array-like of shape (n_draws, n_points, ...), default=None
        Any per-draw quantity at the training points (e.g. the model's
        output); its leave-one-out expectation is returned.
    r_eff : float or array-like of shape (n_points,), default=1.0
        Relative efficiency of the draws, see :func:`psis_log_weights`.

    Returns
    -------
    result : PSISLOOResult
        A named tuple: ``log_density`` (n_points,), the leave-one-out log
        predictive density ``log p(y_i | y_-i)``; ``pareto_k`` (n_points,);
        ``prediction``, the leave-one-out expectation of ``predictions`` (None
        if not given); ``log_weights`` (n_draws, n_points).

    See Also
    --------
    psis_log_weights : The weights alone.

    References
    ----------
    Vehtari, A., Gelman, A. and Gabry, J. (2017). Practical Bayesian model
    evaluation using leave-one-out cross-validation and WAIC. Statistics and
    Computing, 27, 1413-1432.

    Examples
    --------
    Posterior draws of a Gaussian mean (known unit noise, flat prior) given
    ten points; the exact leave-one-out predictive of point ``i`` is
    ``N(mean of the others, 1 + 1/9)``.

    >>> import numpy as np
    >>> from sklearn_meanfield.diagnostics import psis_loo
    >>> rng = np.random.RandomState(0)
    >>> y = rng.normal(size=10)
    >>> mu = rng.normal(y.mean(), np.sqrt(1 / 10), size=20000)
    >>> loglik = -0.5 * (y - mu[:, None]) ** 2 - 0.5 * np.log(2 * np.pi)
    >>> result = psis_loo(loglik)
    >>> others = (y.sum() - y) / 9
    >>> var = 1 + 1 / 9
    >>> exact = -0.5 * (y - others) ** 2 / var - 0.5 * np.log(2 * np.pi * var)
    >>> bool(np.max(np.abs(result.log_density - exact)) < 0.01)
    True
    """
    log_likelihood = np.asarray(log_likelihood, dtype=float)
    if log_likelihood.ndim != 2:
        raise ValueError(
            "log_likelihood must have shape (n_draws, n_points), got "
            f"{log_likelihood.shape}."
        )
    r_eff = _check_r_eff(r_eff, log_likelihood.shape[1])
    return _psis_loo(log_likelihood, predictions=predictions, r_eff=r_eff)
