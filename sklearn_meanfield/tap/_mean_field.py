"""Mean-field equations with a prescribed cavity variance.

The naive theory takes the prior variance ``K_ii`` as the cavity variance,
the 1996 perceptron paper's isotropic closure ``1 - |<w>|^2 / N``; the cavity
means and the posterior mean ``<h> = K alpha`` are iterated to their fixed
point with one product with ``K`` a sweep (Opper and Winther 1996, 1998).
"""

from typing import NamedTuple

import numpy as np

from ._acceleration import next_step
from ._ep import EPOptions
from ._posterior import proper_solution
from ._solution import TAPSolution
from ._sweep import Sweep, tilted_variance_ratio
from ._weights import check_site_weights

__all__ = ["PriorVariance", "mean_field_iteration"]


class PriorVariance:
    """Naive mean field's closure: the cavity variance is the prior variance.

    A picklable callable ``(alpha, mean) -> prior_var`` for
    :func:`mean_field_iteration`.

    Parameters
    ----------
    prior_var : ndarray of shape (n,)
        The prior variances ``K_ii``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.tap._mean_field import PriorVariance
    >>> closure = PriorVariance(np.array([1.0, 2.0]))
    >>> closure(np.zeros(2), np.zeros(2))
    array([1., 2.])
    """

    def __init__(self, prior_var):
        self.prior_var = prior_var

    def __call__(self, alpha, mean):
        return self.prior_var


def mean_field_iteration(
    posterior,
    t,
    likelihood,
    cavity_variance,
    *,
    alpha=None,
    max_iter=500,
    tol=1e-6,
    damping=0.2,
    site_weights=None,
    on_iteration=None,
):
    """Mean-field equations with a prescribed cavity variance.

    Iterates Opper and Winther's equations ``alpha_i = d log Z_i / dm`` with
    cavity mean ``<h_i> - lambda_i alpha_i`` and ``<h> = K alpha``, where the
    cavity variances ``lambda = cavity_variance(alpha, <h>)`` are given by a
    closure rather than solved for: ``K_ii`` for the naive theory,
    ``1 - |<w>|^2 / N`` for the 1996 isotropic perceptron.  Each sweep is one
    product with ``K`` (``O(n^2)``).

    Parameters
    ----------
    posterior : KernelPosterior or compatible
        Provides ``n``, ``matvec(alpha)`` and ``solve(tau, nu)``.
    t : ndarray of shape (n,)
    likelihood : object
    cavity_variance : callable
        ``cavity_variance(alpha, mean) -> ndarray of shape (n,)``, positive.
    alpha : ndarray or None
        Warm start.
    max_iter, tol, damping
        As in :class:`EPOptions`; ``tol`` bounds the change of ``alpha``
        relative to its scale.
    site_weights : ndarray of shape (n,) or None, default=None
        Positive weights (point ``i`` repeated ``w_i`` times, as in
        :func:`expectation_propagation`): each copy's ``alpha`` is
        ``d log Z_i / dm`` at the cavity mean ``<h_i> - lambda_i alpha_i /
        w_i``, and ``<h> = K alpha`` sums the copies, so ``alpha`` (the
        returned coefficients) is ``w_i`` times a copy's.  The returned
        cavities remove the whole point, ``<h_i> - lambda_i alpha_i`` (the
        closure's variance is the same with or without the point), and the
        sites are ``w_i`` times a copy's.  None or all ones: unweighted, bit
        for bit.
    on_iteration : callable or None, default=None
        As in :func:`expectation_propagation` (a :class:`Sweep` of solver
        ``"mean-field"``; a true return value stops the iteration).

    Returns
    -------
    TAPSolution
        With the Gaussian sites ``tau = b / (1 - lambda b)`` implied by the
        fixed point (used for the predictive variance) and ``log_evidence``
        NaN.

    Examples
    --------
    The naive theory (cavity variance = prior variance) on a probit problem:

    >>> import numpy as np
    >>> from sklearn_meanfield.tap._mean_field import (
    ...     PriorVariance, mean_field_iteration)
    >>> from sklearn_meanfield.tap._posterior import KernelPosterior
    >>> from sklearn_meanfield.tap._likelihoods import make_likelihood
    >>> x = np.linspace(-2, 2, 6)
    >>> K = np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2)
    >>> solution = mean_field_iteration(
    ...     KernelPosterior(K), np.sign(x), make_likelihood("probit", 0.0),
    ...     PriorVariance(np.diag(K).copy()))
    >>> solution.converged, bool(np.allclose(solution.cavity_var, 1.0))
    (True, True)
    """
    w = check_site_weights(site_weights, posterior.n)
    alpha = np.zeros(posterior.n) if alpha is None else np.array(alpha, dtype=float)
    run = _mean_field_sweeps(
        posterior,
        t,
        likelihood,
        cavity_variance,
        alpha,
        w,
        EPOptions(max_iter=max_iter, tol=tol, damping=damping),
        on_iteration,
    )
    return _mean_field_solution(posterior, t, likelihood, w, run)


class _MeanFieldIterate(NamedTuple):
    residual: float
    alpha: np.ndarray
    mean: np.ndarray
    lam: np.ndarray  # the closure's cavity variances
    cavity_mean: np.ndarray  # one copy removed
    log_z: np.ndarray
    second: np.ndarray


class _MeanFieldRun(NamedTuple):
    best: _MeanFieldIterate
    n_iter: int
    converged: bool
    stopped: bool


def _mean_field_sweeps(
    posterior, t, likelihood, cavity_variance, alpha, w, options, on_iteration
):
    """The damped iteration of :func:`mean_field_iteration`: its best
    iterate, sweeps, and whether it converged or was stopped."""
    best = None
    previous_residual = np.inf
    step = float(options.damping)
    converged = stopped = False
    for n_iter in range(1, options.max_iter + 1):
        # A closure can drive the iteration to overflow (e.g. the isotropic
        # cavity variance at its floor); stop there and keep the best iterate.
        with np.errstate(over="ignore", invalid="ignore"):
            mean = posterior.matvec(alpha)
            lam = cavity_variance(alpha, mean)
            # One copy's alpha: the whole point's over its weight.
            copy_alpha = alpha if w is None else alpha / w
            cavity_mean = mean - lam * copy_alpha
            log_z, first, second = likelihood.moments(t, cavity_mean, lam)
            scale = max(np.max(np.abs(first)), 1e-12)
            residual = float(np.max(np.abs(first - copy_alpha)) / scale)
        if not (np.isfinite(residual) and np.all(np.isfinite(log_z))):
            break
        if best is None or residual < best.residual:
            best = _MeanFieldIterate(
                residual, alpha, mean, lam, cavity_mean, log_z, second
            )
        stop = on_iteration is not None and on_iteration(
            Sweep("mean-field", n_iter, residual)
        )
        if residual < options.tol:
            converged = True
            break
        if stop:
            stopped = True
            break
        step = next_step(step, residual, previous_residual, options.damping)
        previous_residual = residual
        target = first if w is None else w * first
        alpha = alpha + step * (target - alpha)
    return _MeanFieldRun(best, n_iter, converged, stopped)


def _mean_field_solution(posterior, t, likelihood, w, run):
    """The :class:`TAPSolution` of a mean-field run's best iterate."""
    _, alpha, mean, lam, cavity_mean, log_z, second = run.best
    tau = second / tilted_variance_ratio(lam, second)
    copy_mean = copy_var = None
    if w is not None:
        tau = w * tau
        copy_mean, copy_var = cavity_mean, lam
        # Leave-one-out: the whole point removed.
        with np.errstate(over="ignore", invalid="ignore"):
            cavity_mean = mean - lam * alpha
            log_z, _, _ = likelihood.moments(t, cavity_mean, lam)
    nu = alpha + tau * mean
    solution = _predictive_posterior(posterior, tau, nu)
    return TAPSolution(
        tau=tau,
        nu=nu,
        alpha=alpha,
        mean=mean,
        var=solution.var,
        cavity_mean=cavity_mean,
        cavity_var=lam,
        log_z=log_z,
        log_evidence=np.nan,
        n_iter=run.n_iter,
        converged=run.converged,
        posterior=solution,
        site_weights=w,
        stopped=run.stopped,
        fixed_cavity_variance=True,
        copy_cavity_mean=copy_mean,
        copy_cavity_var=copy_var,
    )


def _predictive_posterior(posterior, tau, nu):
    """The Gaussian posterior behind a fixed cavity-variance solution.

    Its sites need not define a proper posterior: with label noise some site
    precisions are negative, and nothing in the naive or isotropic
    iteration keeps ``K^-1 + S`` positive definite.  Predictions still need
    a variance, so the negative precisions are then dropped (a proper
    posterior for any non-negative sites); the mean ``K alpha`` does not
    depend on it.

    >>> import numpy as np
    >>> from sklearn_meanfield.tap._posterior import KernelPosterior
    >>> improper = np.array([-2.0, 1.0])  # K^-1 + S = diag(-1, 2) for K = I
    >>> solved = _predictive_posterior(KernelPosterior(np.eye(2)), improper, np.ones(2))
    >>> solved.var.round(12).tolist()  # the second site alone: 1 and 1/2
    [1.0, 0.5]
    """
    solution = proper_solution(posterior, tau, nu)
    if solution is None:
        solution = posterior.solve(np.maximum(tau, 0.0), nu)
    return solution
