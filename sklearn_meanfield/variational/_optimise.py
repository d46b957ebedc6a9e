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

import numpy as np
from scipy.linalg import LinAlgError, cho_solve, cholesky, solve_triangular
from scipy.optimize import minimize
from threadpoolctl import threadpool_limits

from .._progress import ProgressReporter
from ._erf_network import (
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
    temporaries; 9.6-10.4 measured with tracemalloc at k = 906 and 1806) and
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
    # copies of the parameters and gradients: ~70 vectors measured.
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
    k = shape.n_weights
    if shape.covariance == "diag":
        if np.any(precision <= 0.0):
            raise LinAlgError("precision not positive")
        return np.concatenate([wbar, -0.5 * np.log(precision)])
    # J P J = K K^T (J reverses the order)  =>  C = (J K^-T J) (J K^-T J)^T with
    # J K^-T J lower triangular.
    K = cholesky(precision[::-1, ::-1], lower=True)
    L = solve_triangular(K, np.eye(k), lower=True).T[::-1, ::-1]
    return np.concatenate([wbar, np.log(np.diagonal(L)), L[shape._tril]])


def _natural_step(
    theta, precision, value, g_wbar, target, step, args, shape, sample_weight=None
):
    """Halve ``step`` until the natural-gradient update lowers minus the bound.

    Returns ``(theta, precision, value, stats, step)`` of the accepted update,
    or None when even ``_MIN_STEP`` does not help (converged, or stuck).
    """
    wbar = theta[: shape.n_weights]
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
        stats = {}
        new_value = negative_bound(
            new_theta,
            *args,
            return_grad=False,
            stats=stats,
            sample_weight=sample_weight,
        )
        if np.isfinite(new_value) and new_value <= value:
            return new_theta, new_precision, new_value, stats, step
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


def _end_iteration(reporter, scores, tol, n_samples, message, *args):
    """Report a finished iteration; ``(converged, stopped)`` end its loop.

    A callback's stop request counts only when the bound has not converged.
    """
    stopped = reporter.step(1, message, *args, task_name="iteration")
    if _converged(scores, tol, n_samples):
        return True, False
    return False, bool(stopped)


def _phase_result(theta, alpha, lam, scores, n_iter, converged, stopped):
    """What both optimisation phases return to :func:`fit_restart`."""
    return dict(
        theta=theta,
        alpha=alpha,
        lam_groups=lam,
        scores=np.asarray(scores),
        n_iter=n_iter,
        converged=converged,
        stopped=stopped,
        bound=scores[-1],
    )


def fit_restart(
    X1,
    T,
    *,
    shape,
    alpha_init,
    init_std,
    max_iter,
    inner_max_iter,
    tol,
    verbose,
    seed,
    max_precision,
    task=None,
    label="EnsembleLearningRegressor",
    sample_weight=None,
):
    """One variational fit from one random start.

    BLAS is limited to one thread: the matrices are small, and a multi-threaded
    BLAS costs more in thread wake-ups than the work itself.  Parallelism comes
    from the restarts instead.

    Parameters
    ----------
    X1 : ndarray of shape (n_samples, n_inputs + 1)
    T : ndarray of shape (n_samples, n_outputs)
    shape : NetworkShape
    alpha_init, init_std : float
    max_iter : int
        Iterations (each a natural-gradient step, or a phase of 100 L-BFGS
        iterations for ``"lowrank"``, then a re-estimation).
    inner_max_iter : int
        Warm-up natural-gradient steps at the initial hyperparameters (for
        ``"lowrank"`` the first L-BFGS phase plays that part).
    tol : float
    verbose : int
    seed : int
    max_precision : float
        Cap of every precision.
    label : str, default="EnsembleLearningRegressor"
        Prefix of the progress lines (the shell names the restart; its
        internal seed means nothing to a user).
    task : CallbackTask or None, default=None
        The restart's scikit-learn callback task
        (:class:`~sklearn_meanfield._progress.CallbackTask`): its hooks run
        around the restart and every iteration is one of its steps.  When a
        step's callback asks to stop, the restart ends there, with the state
        after that iteration.
    sample_weight : ndarray of shape (n_samples,) or None, default=None
        Row weights of the log-likelihood (see
        :func:`~sklearn_meanfield.variational._erf_network.negative_bound`);
        the convergence scale and the noise re-estimate use their sum as the
        number of samples.

    Returns
    -------
    result : dict
        ``theta``, ``alpha``, ``lam_groups``, ``scores`` (the bound after every
        iteration), ``n_iter``, ``converged``, ``stopped`` (by a callback) and
        ``bound``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.variational._erf_network import NetworkShape
    >>> from sklearn_meanfield.variational._optimise import fit_restart
    >>> rng = np.random.RandomState(0)
    >>> X = rng.uniform(-2, 2, size=(30, 1))
    >>> X1 = np.column_stack([X, np.ones(30)])
    >>> T = np.sin(X) + 0.1 * rng.normal(size=(30, 1))
    >>> result = fit_restart(
    ...     X1, T, shape=NetworkShape(1, 3, 1), alpha_init=25.0, init_std=0.1,
    ...     max_iter=50, inner_max_iter=20, tol=1e-4, verbose=0, seed=0,
    ...     max_precision=1e6)
    >>> bool(np.all(np.diff(result["scores"]) >= 0)), result["converged"]
    (True, True)
    """
    with threadpool_limits(limits=1, user_api="blas"):
        rng = np.random.RandomState(seed)
        reporter = ProgressReporter(verbose, label, task=task)
        reporter.task.begin()
        groups = weight_groups(shape)
        theta = init_params(shape, rng, init_std=init_std)
        alpha = np.full(shape.n_outputs, float(alpha_init))
        lam_groups = np.ones(groups.max() + 1)
        settings = dict(
            max_iter=max_iter,
            inner_max_iter=inner_max_iter,
            tol=tol,
            max_precision=max_precision,
            sample_weight=sample_weight,
        )
        if shape.covariance == "lowrank":
            run = _lbfgs_phases
        else:
            run = _natural_gradient
        result = run(X1, T, shape, groups, theta, alpha, lam_groups, reporter, settings)
        if result["stopped"]:
            reporter(1, "stopped by a callback after %d iterations", result["n_iter"])
        reporter.task.end()
        return result


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
    n = stats["n_samples"]
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


def _natural_gradient(X1, T, shape, groups, theta, alpha, lam, reporter, settings):
    """Natural-gradient iterations; the warm-up keeps the hyperparameters."""
    weights = settings["sample_weight"]
    n = X1.shape[0] if weights is None else float(np.sum(weights))
    tol, max_precision = settings["tol"], settings["max_precision"]
    precision = precision_matrix(theta, shape)
    scores = []
    warm_up = True
    warm_up_scores = []
    n_warm_up = 0
    step = 1.0
    relax = 1.0
    converged = stopped = False
    n_iter = 0
    while n_iter < settings["max_iter"]:
        args = (X1, T, alpha, lam[groups], shape)
        value, g_wbar, target = natural_gradient_terms(
            theta, *args, sample_weight=weights
        )
        accepted = _natural_step(
            theta,
            precision,
            value,
            g_wbar,
            target,
            min(1.0, 2.0 * step),
            args,
            shape,
            weights,
        )
        if warm_up:
            # Fit Q at the initial hyperparameters first: letting the weight
            # precisions move before the data are fitted prunes relevant
            # inputs.  These steps are not counted as iterations.
            n_warm_up += 1
            if accepted is not None:
                theta, precision, value, _, step = accepted
                warm_up_scores.append(-value)
            if (
                accepted is None
                or _converged(warm_up_scores, tol, n)
                or n_warm_up >= settings["inner_max_iter"]
            ):
                warm_up = False
            continue
        n_iter += 1
        if accepted is None:
            # Not even the smallest step raises the bound: a stationary point
            # of Q at these hyperparameters, which are already at their
            # re-estimates.  The bound stays where it was.
            scores.append(scores[-1] if scores else -value)
            converged = True
            reporter.task.step("iteration")  # counted, not printed
            break
        theta, precision, value, stats, step = accepted
        previous = scores[-1] if scores else -np.inf
        alpha, lam, value, relax = _update_hyperparameters(
            value, stats, alpha, lam, groups, relax, previous, max_precision
        )
        scores.append(-value)
        converged, stopped = _end_iteration(
            reporter,
            scores,
            tol,
            n,
            "iteration %d: bound %.4f (step %.3g, relaxation %g)",
            n_iter,
            -value,
            step,
            relax,
        )
        if converged or stopped:
            break
    return _phase_result(theta, alpha, lam, scores, n_iter, converged, stopped)


def _lbfgs_phases(X1, T, shape, groups, theta, alpha, lam, reporter, settings):
    """L-BFGS phases, each closed by the exact re-estimation.

    The first phase fits ``Q`` at the initial hyperparameters; later phases
    move ``Q`` and the log hyperparameters together
    (:func:`joint_negative_bound`), which needs far fewer phases than plain
    alternation.
    """
    weights = settings["sample_weight"]
    n = X1.shape[0] if weights is None else float(np.sum(weights))
    tol, max_precision = settings["tol"], settings["max_precision"]
    n_theta = shape.n_params
    log_cap = np.log(max_precision)
    box = [(None, None)] * n_theta + [(-log_cap, log_cap)] * (alpha.size + lam.size)
    scores = []
    converged = stopped = False
    n_iter = 0
    for n_iter in range(1, settings["max_iter"] + 1):
        if n_iter > 1:
            start = np.concatenate([theta, np.log(alpha), np.log(lam)])
            objective, bounds = joint_negative_bound, box
            args = (X1, T, shape, groups, weights)
        else:
            start = theta
            objective = negative_bound
            args = (X1, T, alpha, lam[groups], shape, True, None, weights)
            bounds = None
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
            theta = result.x[:n_theta]
            if n_iter > 1:
                alpha = np.exp(result.x[n_theta : n_theta + alpha.size])
                lam = np.exp(result.x[n_theta + alpha.size :])
        stats = {}
        value = negative_bound(
            theta,
            X1,
            T,
            alpha,
            lam[groups],
            shape,
            return_grad=False,
            stats=stats,
            sample_weight=weights,
        )
        new_alpha, new_lam = reestimate_from_stats(stats, n, groups, max_precision)
        value = bound_at_hyperparameters(
            value, stats, alpha, lam[groups], new_alpha, new_lam[groups], n
        )
        alpha, lam = new_alpha, new_lam
        scores.append(-value)
        converged, stopped = _end_iteration(
            reporter, scores, tol, n, "iteration %d: bound %.4f", n_iter, -value
        )
        if converged or stopped:
            break
    return _phase_result(theta, alpha, lam, scores, n_iter, converged, stopped)
