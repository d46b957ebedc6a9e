"""Fitting the variational posterior: one restart, as a pure function.

Full and diagonal covariances are fitted by natural-gradient steps on the
Gaussian ``Q = N(wbar, P^-1)`` (Khan & Rue 2023; the fixed point is that of
Opper & Archambeau 2009): the precision moves towards ``2 dL/dC`` -- the prior
precision plus the expected Hessian of the data term -- and the mean takes the
matching Newton-like step,

    P <- (1 - rho) P + rho 2 dL/dC,    wbar <- wbar - rho P^-1 dL/dwbar,

with ``rho`` halved until the bound rises.  At ``rho = 1`` this is a
Newton step on a problem that is nearly quadratic near the optimum, so tens
of steps replace the thousands of L-BFGS iterations the Cholesky
parametrisation needs.  The low-rank family has no such closed step and is
fitted by L-BFGS on ``(wbar, log d, F)``.

After a warm-up at the initial hyperparameters, every iteration ends with the
exact re-estimation of the noise and prior precisions; neither the step nor
the re-estimation can lower the bound.

References
----------
Barber, D. and Bishop, C. M. (1998). Ensemble learning for multi-layer
networks. Advances in Neural Information Processing Systems 10, 395-401.

Opper, M. and Archambeau, C. (2009). The variational Gaussian approximation
revisited. Neural Computation 21(3), 786-792.

Khan, M. E. and Rue, H. (2023). The Bayesian learning rule. Journal of
Machine Learning Research 24(281), 1-46.
"""

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from scipy.linalg import LinAlgError, cho_solve, cholesky, solve_triangular
from scipy.optimize import minimize

from ._erf_network import (
    BoundStats,
    bound_at_hyperparameters,
    init_params,
    joint_negative_bound,
    natural_gradient_terms,
    negative_bound,
    reestimate_from_stats,
    unpack,
    weight_groups,
)

__all__ = [
    "RestartOptions",
    "RestartResult",
    "fit_restart",
    "fit_memory_bytes",
    "precision_matrix",
    "params_from_precision",
]

# Conjugate-gradient solves of the diagonal family's mean step.
_CG_RTOL = 1e-13
_CG_ACCEPT = 1e-8
_CG_MAX_ITER = 1000
# The smallest step tried before a natural-gradient iteration gives up.
_MIN_STEP = 2.0**-12
# L-BFGS iterations per phase of the low-rank family: the Cholesky-free
# parametrisation is badly conditioned, and short phases (which restart the
# L-BFGS memory) stall far from the optimum (test RMSE 2.4 vs 1.2 on
# friedman1, n = 200, with 10 iterations per phase).
_LBFGS_ITER_PER_PHASE = 100


def fit_memory_bytes(n_samples, shape):
    """Peak bytes of one restart of :func:`fit_restart` (an upper estimate).

    ``"full"`` holds about ten ``k x k`` matrices at once (the Cholesky
    factor, the precision, the target ``2 dL/dC`` and their mixes and
    temporaries; twelve are counted, a margin above the peak) and
    the ``(n, H^2 P)`` product of the local moments; ``"diag"`` and
    ``"lowrank"`` never form a ``k x k`` matrix and hold ``O(k r)`` plus the
    per-point moments.  Every family holds the order-4 jets and their
    coefficients, about 50 ``(n, M, H, H)`` arrays.

    Examples
    --------
    >>> from sklearn_meanfield.variational._erf_network import NetworkShape
    >>> from sklearn_meanfield.variational._optimise import fit_memory_bytes
    >>> full = fit_memory_bytes(20, NetworkShape(5000, 8, 1, "full"))
    >>> diag = fit_memory_bytes(20, NetworkShape(5000, 8, 1, "diag"))
    >>> full > 1e11 > 1e8 > diag
    True
    """
    n, H, P, M = n_samples, shape.n_hidden, shape.n_aug, shape.n_outputs
    k = shape.n_weights
    # The jets and their coefficients, and copies of the data (validation,
    # standardisation, the inputs with their column of ones).
    per_point = 8.0 * n * H * H * (50 * M + 25) + 8.0 * n * (P + M) * 12
    per_point += 2**20  # small temporaries of validation and bookkeeping
    if shape.covariance == "full":
        return 12 * 8.0 * k * k + 8.0 * n * H * H * P + per_point
    r = shape.rank
    # L-BFGS-B's history and workspace (about 25 vectors) and the Python-side
    # copies of the parameters and gradients: 100 vectors, a margin over the
    # ~70 that tracemalloc finds.
    lbfgs = 100 * 8.0 * shape.n_params if shape.covariance == "lowrank" else 0.0
    return 8.0 * (n * H * (r + 2) + k * (r + 12)) + per_point + lbfgs


def precision_matrix(theta, shape):
    """``P = C^-1`` of ``Q`` (dense for ``"full"``, the diagonal for ``"diag"``).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.variational._erf_network import (
    ...     NetworkShape, covariance_matrix, init_params)
    >>> from sklearn_meanfield.variational._optimise import precision_matrix
    >>> shape = NetworkShape(2, 2, 1, "full")
    >>> theta = init_params(shape, np.random.RandomState(0))
    >>> P = precision_matrix(theta, shape)
    >>> bool(np.allclose(P @ covariance_matrix(theta, shape), np.eye(8)))
    True
    """
    _, log_diag, F = unpack(theta, shape)
    if shape.covariance == "diag":
        return np.exp(-2.0 * log_diag)
    if shape.covariance != "full":
        raise ValueError("precision_matrix is for full or diag covariances")
    L_inv = solve_triangular(F, np.eye(len(F)), lower=True)
    return L_inv.T @ L_inv


def params_from_precision(wbar, precision, shape):
    """Flat parameters of ``Q = N(wbar, precision^-1)``.

    For ``"full"`` the lower Cholesky factor of ``C = P^-1`` comes from the
    Cholesky factor of ``P`` with rows and columns reversed, without forming
    ``C``.  Raises ``numpy.linalg.LinAlgError`` if ``P`` is not positive
    definite.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.variational._erf_network import (
    ...     NetworkShape, init_params)
    >>> from sklearn_meanfield.variational._optimise import (
    ...     params_from_precision, precision_matrix)
    >>> shape = NetworkShape(2, 2, 1, "full")
    >>> theta = init_params(shape, np.random.RandomState(0))
    >>> theta[2 * 8:] = 0.01
    >>> again = params_from_precision(theta[:8], precision_matrix(theta, shape), shape)
    >>> bool(np.allclose(again, theta))
    True
    """
    if shape.covariance == "diag":
        if np.any(precision <= 0.0):
            raise LinAlgError("precision not positive")
        return shape.params.pack(mean=wbar, log_diag=-0.5 * np.log(precision))
    # J P J = K K^T (J reverses the order)  =>  C = (J K^-T J) (J K^-T J)^T with
    # J K^-T J lower triangular.
    K = cholesky(precision[::-1, ::-1], lower=True)
    L = solve_triangular(K, np.eye(shape.n_weights), lower=True).T[::-1, ::-1]
    return shape.params.pack(
        mean=wbar, log_diag=np.log(np.diagonal(L)), lower=L[shape._tril]
    )


@dataclass(frozen=True)
class RestartOptions:
    """Settings of one restart of :func:`fit_restart` (the estimator's).

    Parameters
    ----------
    alpha_init : float
        Initial noise precision of the standardised targets.
    init_std : float
        Initial posterior standard deviation of every weight.
    max_iter : int
        Iterations (each a natural-gradient step, or a phase of 100 L-BFGS
        iterations for ``"lowrank"``, then a re-estimation).
    inner_max_iter : int
        Warm-up natural-gradient steps at the initial hyperparameters (for
        ``"lowrank"`` the first L-BFGS phase plays that part).
    tol : float
        Convergence tolerance on the bound (:func:`_converged`).
    max_precision : float
        Cap of every precision.
    """

    alpha_init: float
    init_std: float
    max_iter: int
    inner_max_iter: int
    tol: float
    max_precision: float


@dataclass(frozen=True)
class RestartResult:
    """What one restart of :func:`fit_restart` ends with.

    Attributes
    ----------
    theta : ndarray of shape (shape.n_params,)
        Flat parameters of ``Q``.
    alpha : ndarray of shape (n_outputs,)
        Noise precisions (standardised targets).
    lam_groups : ndarray of shape (n_groups,)
        Prior precision per weight group.
    scores : ndarray of shape (n_iter,)
        The bound after every iteration (never decreasing).
    n_iter : int
    converged : bool
    stopped : bool
        Whether ``on_iteration`` asked to stop before convergence.
    """

    theta: np.ndarray
    alpha: np.ndarray
    lam_groups: np.ndarray
    scores: np.ndarray
    n_iter: int
    converged: bool
    stopped: bool

    @property
    def bound(self):
        """The bound at the end of the restart (``scores[-1]``)."""
        return self.scores[-1]


@dataclass(frozen=True)
class _Problem:
    """The data of one restart and what every step derives from them."""

    X1: np.ndarray
    T: np.ndarray
    shape: object
    groups: np.ndarray
    sample_weight: np.ndarray = None

    @property
    def n_eff(self):
        """Number of samples: the sum of the weights when there are any."""
        if self.sample_weight is None:
            return self.X1.shape[0]
        return float(np.sum(self.sample_weight))

    def args(self, alpha, lam):
        """The data arguments of the bound at hyperparameters ``alpha, lam``."""
        return (self.X1, self.T, alpha, lam[self.groups], self.shape)


class NaturalStep(NamedTuple):
    """An accepted natural-gradient update (:func:`_natural_step`)."""

    theta: np.ndarray
    precision: np.ndarray
    value: float
    stats: BoundStats
    step: float


def _natural_step(
    theta, precision, value, g_wbar, target, step, args, shape, sample_weight=None
):
    """Halve ``step`` until the natural-gradient update lowers minus the bound.

    Returns the accepted :class:`NaturalStep` (``theta, precision, value,
    stats, step``), or None when even ``_MIN_STEP`` does not help (converged,
    or stuck).
    """
    wbar = shape.params.unpack(theta).mean
    while step >= _MIN_STEP:
        try:
            if shape.covariance == "diag":
                new_precision = (1.0 - step) * precision + step * target.diagonal
                direction = _diag_direction(precision, target, step, g_wbar)
            else:
                new_precision = (1.0 - step) * precision + step * target
                factor = cholesky(new_precision, lower=True)
                direction = cho_solve((factor, True), g_wbar)
            new_theta = params_from_precision(
                wbar - step * direction, new_precision, shape
            )
        except LinAlgError:
            step /= 2.0
            continue
        new_value, stats = negative_bound(
            new_theta,
            *args,
            return_grad=False,
            return_stats=True,
            sample_weight=sample_weight,
        )
        if np.isfinite(new_value) and new_value <= value:
            return NaturalStep(new_theta, new_precision, new_value, stats, step)
        step /= 2.0
    return None


def _diag_direction(precision, target, step, g_wbar):
    """Solve ``((1 - step) diag(precision) + step target) x = g_wbar`` by CG.

    A diagonal ``Q`` keeps only the diagonal of the precision, but its mean
    moves along the full-matrix direction (a diagonal Newton step on coupled
    weights would crawl).  The matrix is applied through ``target.dot``
    (never formed: ``k x k`` would not fit for many inputs), Jacobi
    preconditioned.  A matrix that is not positive definite along the way,
    or no convergence, raises ``LinAlgError`` (the caller halves the step).
    """
    diagonal = (1.0 - step) * precision + step * target.diagonal
    if not np.all(diagonal > 0.0):
        raise LinAlgError("not positive definite")
    k = diagonal.size
    x = np.zeros(k)
    r = g_wbar.astype(float, copy=True)
    z = r / diagonal
    p = z.copy()
    rz = r @ z
    norm = np.sqrt(g_wbar @ g_wbar)
    for _ in range(min(2 * k + 10, _CG_MAX_ITER)):
        Ap = (1.0 - step) * precision * p + step * target.dot(p)
        curvature = p @ Ap
        if not curvature > 0.0:
            raise LinAlgError("not positive definite")
        a = rz / curvature
        x += a * p
        r -= a * Ap
        if np.sqrt(r @ r) <= _CG_RTOL * norm:
            return x
        z = r / diagonal
        rz, rz_old = r @ z, rz
        p = z + (rz / rz_old) * p
    # Rounding can keep the residual above _CG_RTOL: accept a solve that is
    # accurate to a few digits more than the step needs.
    if np.sqrt(r @ r) <= _CG_ACCEPT * norm:
        return x
    raise LinAlgError("conjugate gradients did not converge")


def _converged(scores, tol, n_samples):
    """The bound rose by less than ``tol`` times ``max(|bound|, n_samples)``.

    A relative criterion, with ``n_samples`` as the floor of the scale so that
    a bound that passes near zero does not stall it.
    """
    if len(scores) < 2:
        return False
    return scores[-1] - scores[-2] <= tol * max(abs(scores[-1]), n_samples)


def _end_iteration(on_iteration, scores, tol, n_samples, iteration, **details):
    """Hand a finished iteration to ``on_iteration``; ``(converged, stopped)``.

    A stop request counts only when the bound has not converged.
    """
    stopped = on_iteration is not None and on_iteration(
        iteration, scores[-1], **details
    )
    if _converged(scores, tol, n_samples):
        return True, False
    return False, bool(stopped)


def fit_restart(X1, T, shape, options, seed, *, on_iteration=None, sample_weight=None):
    """One variational fit from one random start.

    A pure computation: the caller chooses the BLAS threads and turns
    ``on_iteration`` into progress lines and callback steps.

    Parameters
    ----------
    X1 : ndarray of shape (n_samples, n_inputs + 1)
    T : ndarray of shape (n_samples, n_outputs)
    shape : NetworkShape
    options : RestartOptions
    seed : int
        Seed of the random start.
    on_iteration : callable or None, default=None
        ``on_iteration(iteration, bound, **details)`` after every iteration
        (numbered from 1; ``bound`` after it); returning True asks to stop,
        and the restart then ends with the state after that iteration (a
        request is ignored when the bound has converged).  The natural-
        gradient families pass ``step`` and ``relaxation`` as details, and
        ``stationary=True`` for a last iteration in which no step raised the
        bound (the bound is that of the iteration before).
    sample_weight : ndarray of shape (n_samples,) or None, default=None
        Row weights of the log-likelihood (see
        :func:`~sklearn_meanfield.variational._erf_network.negative_bound`);
        the convergence scale and the noise re-estimate use their sum as the
        number of samples.

    Returns
    -------
    result : RestartResult

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.variational._erf_network import NetworkShape
    >>> from sklearn_meanfield.variational._optimise import (
    ...     RestartOptions, fit_restart)
    >>> rng = np.random.RandomState(0)
    >>> X = rng.uniform(-2, 2, size=(30, 1))
    >>> X1 = np.column_stack([X, np.ones(30)])
    >>> T = np.sin(X) + 0.1 * rng.normal(size=(30, 1))
    >>> options = RestartOptions(alpha_init=25.0, init_std=0.1, max_iter=50,
    ...     inner_max_iter=20, tol=1e-4, max_precision=1e6)
    >>> result = fit_restart(X1, T, NetworkShape(1, 3, 1), options, seed=0)
    >>> bool(np.all(np.diff(result.scores) >= 0)), result.converged
    (True, True)
    """
    rng = np.random.RandomState(seed)
    problem = _Problem(X1, T, shape, weight_groups(shape), sample_weight)
    theta = init_params(shape, rng, init_std=options.init_std)
    alpha = np.full(shape.n_outputs, float(options.alpha_init))
    lam_groups = np.ones(problem.groups.max() + 1)
    run = _lbfgs_phases if shape.covariance == "lowrank" else _natural_gradient
    return run(problem, theta, alpha, lam_groups, options, on_iteration)


# Largest over-relaxation factor of the hyperparameter updates.
_MAX_RELAX = 16.0


def _update_hyperparameters(value, stats, alpha, lam, groups, relax, previous, cap):
    """Re-estimate the hyperparameters, over-relaxed in log space when safe.

    The exact re-estimates at fixed ``Q`` are an EM-like step: for an input
    that the data do not need, ``lambda`` grows only additively per
    iteration (by about the data's precision on its weights), so plain
    alternation crawls.  As in adaptive over-relaxed EM (Salakhutdinov &
    Roweis 2003) the step in ``log`` hyperparameters is multiplied by
    ``relax``, doubled after every success; the over-relaxed values are kept
    only when the bound still ends the iteration above ``previous`` (the
    bound after the last iteration), otherwise the exact re-estimates are used
    and ``relax`` drops back to 1.  Either way the bound never decreases.

    Returns ``(alpha, lam, value, relax)``, ``value`` minus the bound.
    """
    n = stats.n_samples
    best_alpha, best_lam = reestimate_from_stats(stats, n, groups, cap)
    exact = bound_at_hyperparameters(
        value, stats, alpha, lam[groups], best_alpha, best_lam[groups], n
    )
    if relax > 1.0:
        bounds = (-np.log(cap), np.log(cap))
        trial_alpha = np.exp(
            np.clip(np.log(alpha) + relax * np.log(best_alpha / alpha), *bounds)
        )
        trial_lam = np.exp(
            np.clip(np.log(lam) + relax * np.log(best_lam / lam), *bounds)
        )
        trial = bound_at_hyperparameters(
            value, stats, alpha, lam[groups], trial_alpha, trial_lam[groups], n
        )
        if np.isfinite(trial) and -trial >= previous:
            return trial_alpha, trial_lam, trial, min(2.0 * relax, _MAX_RELAX)
    return best_alpha, best_lam, exact, 2.0 if relax == 1.0 else 1.0


def _try_natural_step(problem, theta, precision, alpha, lam, step):
    """Minus the bound at ``theta`` and the accepted step from it (or None).

    The step first tried is twice the last accepted one, at most 1.
    """
    args = problem.args(alpha, lam)
    weights = problem.sample_weight
    value, g_wbar, target = natural_gradient_terms(theta, *args, sample_weight=weights)
    accepted = _natural_step(
        theta,
        precision,
        value,
        g_wbar,
        target,
        min(1.0, 2.0 * step),
        args,
        problem.shape,
        weights,
    )
    return value, accepted


def _warm_up(problem, theta, precision, alpha, lam, options):
    """Natural-gradient steps at the initial hyperparameters.

    Fit Q at the initial hyperparameters first: letting the weight precisions
    move before the data are fitted prunes relevant inputs.  These steps are
    not counted as iterations.  Returns ``(theta, precision, step)``.
    """
    scores = []
    step = 1.0
    for _ in range(options.inner_max_iter):
        _, accepted = _try_natural_step(problem, theta, precision, alpha, lam, step)
        if accepted is None:
            break
        theta, precision, value, _, step = accepted
        scores.append(-value)
        if _converged(scores, options.tol, problem.n_eff):
            break
    return theta, precision, step


def _natural_gradient(problem, theta, alpha, lam, options, on_iteration):
    """Natural-gradient iterations, each closed by the re-estimation."""
    n = problem.n_eff
    precision = precision_matrix(theta, problem.shape)
    theta, precision, step = _warm_up(problem, theta, precision, alpha, lam, options)
    scores = []
    relax = 1.0
    converged = stopped = False
    n_iter = 0
    for n_iter in range(1, options.max_iter + 1):
        value, accepted = _try_natural_step(problem, theta, precision, alpha, lam, step)
        if accepted is None:
            # Not even the smallest step raises the bound: a stationary point
            # of Q at these hyperparameters, which are already at their
            # re-estimates.  The bound stays where it was.
            scores.append(scores[-1] if scores else -value)
            converged = True
            if on_iteration is not None:  # a stop request changes nothing
                on_iteration(n_iter, scores[-1], stationary=True)
            break
        theta, precision, value, stats, step = accepted
        previous = scores[-1] if scores else -np.inf
        alpha, lam, value, relax = _update_hyperparameters(
            value,
            stats,
            alpha,
            lam,
            problem.groups,
            relax,
            previous,
            options.max_precision,
        )
        scores.append(-value)
        converged, stopped = _end_iteration(
            on_iteration, scores, options.tol, n, n_iter, step=step, relaxation=relax
        )
        if converged or stopped:
            break
    return RestartResult(
        theta, alpha, lam, np.asarray(scores), n_iter, converged, stopped
    )


def _lbfgs_phase(problem, theta, alpha, lam, first, box):
    """One L-BFGS phase: ``Q`` alone (``first``), else ``Q`` and the log
    hyperparameters together; a phase that does not lower minus the bound
    leaves everything as it was.  Returns ``(theta, alpha, lam)``."""
    joint = problem.shape.joint
    weights = problem.sample_weight
    if first:
        start, objective, bounds = theta, negative_bound, None
        args = (*problem.args(alpha, lam), True, False, weights)
    else:
        start = joint.pack(theta=theta, log_alpha=np.log(alpha), log_lambda=np.log(lam))
        objective, bounds = joint_negative_bound, box
        args = (problem.X1, problem.T, problem.shape, problem.groups, weights)
    result = minimize(
        objective,
        start,
        args=args,
        jac=True,
        method="L-BFGS-B",
        bounds=bounds,
        options=dict(maxiter=_LBFGS_ITER_PER_PHASE),
    )
    if np.all(np.isfinite(result.x)) and result.fun <= objective(start, *args)[0]:
        if first:
            theta = result.x
        else:
            theta, log_alpha, log_lambda = joint.unpack(result.x)
            alpha, lam = np.exp(log_alpha), np.exp(log_lambda)
    return theta, alpha, lam


def _reestimate_at(problem, theta, alpha, lam, max_precision):
    """The exact re-estimates at ``theta``: ``(alpha, lam, minus the bound)``."""
    value, stats = negative_bound(
        theta,
        *problem.args(alpha, lam),
        return_grad=False,
        return_stats=True,
        sample_weight=problem.sample_weight,
    )
    groups, n = problem.groups, problem.n_eff
    new_alpha, new_lam = reestimate_from_stats(stats, n, groups, max_precision)
    value = bound_at_hyperparameters(
        value, stats, alpha, lam[groups], new_alpha, new_lam[groups], n
    )
    return new_alpha, new_lam, value


def _lbfgs_phases(problem, theta, alpha, lam, options, on_iteration):
    """L-BFGS phases, each closed by the exact re-estimation.

    The first phase fits ``Q`` at the initial hyperparameters; later phases
    move ``Q`` and the log hyperparameters together
    (:func:`joint_negative_bound`), which needs far fewer phases than plain
    alternation.
    """
    log_cap = np.log(options.max_precision)
    box = [(None, None)] * problem.shape.n_params
    box += [(-log_cap, log_cap)] * (alpha.size + lam.size)
    scores = []
    converged = stopped = False
    n_iter = 0
    for n_iter in range(1, options.max_iter + 1):
        theta, alpha, lam = _lbfgs_phase(problem, theta, alpha, lam, n_iter == 1, box)
        alpha, lam, value = _reestimate_at(
            problem, theta, alpha, lam, options.max_precision
        )
        scores.append(-value)
        converged, stopped = _end_iteration(
            on_iteration, scores, options.tol, problem.n_eff, n_iter
        )
        if converged or stopped:
            break
    return RestartResult(
        theta, alpha, lam, np.asarray(scores), n_iter, converged, stopped
    )
