"""Fitting one binary problem of the TAP perceptron.

The estimator (:mod:`~sklearn_meanfield.tap.perceptron`) validates, builds
the design matrix and dispatches the one-vs-rest problems; this module is
what a worker runs: the configured mean-field equations (adaptive TAP with
its fractional-EP fallback, naive, or the 1996 isotropic closure) in weight
or dual space, the paper's incremental restarts for runs that do not
converge, and the fitted :class:`BinaryFit` (weight mean and field-variance
model).
"""

import warnings
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np
from scipy import sparse
from scipy.optimize import minimize_scalar
from sklearn.exceptions import ConvergenceWarning

from .._parallel import blas_threads_for_matrix, draw_seeds, run_parallel, select_best
from .._progress import ProgressReporter
from ._fallback import ep_with_fallback
from ._hooks import sweep_steps
from ._likelihoods import LABEL_NOISE_BOUNDS, make_likelihood
from ._mean_field import PriorVariance, mean_field_iteration
from ._posterior import KernelPosterior
from ._weight_space import WeightSpacePosterior, _row_norms_squared

__all__ = ["BinaryFit", "FitOptions", "fit_binary"]

# Smallest cavity variance of the isotropic closure 1 - |<w>|^2 / N, which
# leaves its domain once the posterior has (numerically) collapsed.
_MIN_ISOTROPIC_VARIANCE = 1e-6

PREFIX = "TAPPerceptronClassifier"


# The closures feed the cavity variance back from the current solution, which
# oscillates at larger steps (a step of 0.5 did not converge on teacher
# problems with N = 50 inputs).
_MAX_CLOSURE_STEP = 0.2

# ``label_noise="auto"`` scans this grid of label noises from the largest
# down (each solve warm-started from the best so far: EP converges easily at
# large noise and the solution carries over) until the leave-one-out
# log-likelihood falls, then refines between the best point's neighbours to
# _LOG_LABEL_NOISE_TOL in log noise (15%: the score is stationary there).
# Each solve of the search runs to _SEARCH_TOL at most (the score's error is
# of the order of the square of EP's residual); the chosen noise is then
# solved to ``tol``.
_LABEL_NOISE_GRID = np.geomspace(LABEL_NOISE_BOUNDS[1], LABEL_NOISE_BOUNDS[0], 9)
_LOG_LABEL_NOISE_TOL = 0.15
_SEARCH_TOL = 1e-3


class _IsotropicVariance:
    """The 1996 closure ``Lambda = 1 - |<w>|^2 / N`` (uncorrelated inputs).

    ``|<w>|^2 = alpha^T K alpha = alpha . <h>``.  Written relative to each
    field's prior variance, so that for unit-variance inputs (prior variance
    ``|x|^2 / N = 1``) it is the paper's closure.
    """

    def __init__(self, prior_var, n_weights):
        self.prior_var = prior_var
        self.n_weights = n_weights

    def __call__(self, alpha, mean):
        overlap = float(alpha @ mean) / self.n_weights
        if not np.isfinite(overlap):
            overlap = 1.0
        return self.prior_var * max(1.0 - overlap, _MIN_ISOTROPIC_VARIANCE)


@dataclass(frozen=True)
class FitOptions:
    """The validated parameters a binary problem's fit reads, built once in fit.

    ``likelihood`` is the noisy step of ``label_noise``, built once for every
    solve and for predictions; when ``learns_label_noise``, each problem
    searches its own label noise and ``likelihood`` is not used.
    """

    likelihood: object
    variance: str
    space: str
    max_iter: int
    tol: float
    damping: float
    n_restarts: int
    n_weights: int
    verbose: int = 0
    learns_label_noise: bool = False


class _WarmStart(NamedTuple):
    """Sites and mean-field coefficients to start an iteration from."""

    tau: object = None
    nu: object = None
    alpha: object = None


class BinaryFit(NamedTuple):
    """A fitted binary problem: the posterior mean of the weights, the model
    of the field variance at new inputs, the mean-field solution and the
    likelihood (with the problem's label noise)."""

    weight_mean: np.ndarray
    variance_model: object
    solution: object
    likelihood: object


def _adaptive_solve(posterior, t, w, options, warm, reporter):
    """Adaptive TAP: plain EP, then fractional EP where plain EP stalls.

    The ladder is :func:`~sklearn_meanfield.tap._fallback.ep_with_fallback`,
    shared with the GP classifier's step likelihood; the returned cavities
    remove whole sites, so the leave-one-out estimate keeps its meaning.
    """
    return ep_with_fallback(
        posterior,
        t,
        options.likelihood,
        start=None if warm.tau is None else [(warm.tau, warm.nu)],
        max_iter=options.max_iter,
        tol=options.tol,
        damping=options.damping,
        on_iteration=sweep_steps(reporter),
        log=reporter,
        site_weights=w,
    )


def _solve(posterior, t, w, options, warm=None, reporter=None):
    """Run the configured mean-field equations (a pure function of its inputs).

    ``w`` holds the site weights (None: all one).  Every sweep is a step of
    ``reporter.task`` (named "sweep") for scikit-learn callbacks; a
    callback's request to stop ends the iteration with its best iterate.
    """
    warm = warm or _WarmStart()
    if reporter is None:
        reporter = ProgressReporter(options.verbose, PREFIX)
    if options.variance == "adaptive":
        return _adaptive_solve(posterior, t, w, options, warm, reporter)
    if options.variance == "naive":
        closure = PriorVariance(posterior.prior_var)
    else:
        closure = _IsotropicVariance(posterior.prior_var, options.n_weights)
    return mean_field_iteration(
        posterior,
        t,
        options.likelihood,
        closure,
        alpha=warm.alpha,
        max_iter=options.max_iter,
        tol=options.tol,
        damping=min(options.damping, _MAX_CLOSURE_STEP),
        on_iteration=sweep_steps(reporter),
        site_weights=w,
    )


def _free_energy_score(solution):
    """Larger is better: the TAP log evidence, else the leave-one-out log-lik."""
    if np.isfinite(solution.log_evidence):
        return solution.log_evidence
    return _loo_log_likelihood(solution, None)


def _learn_label_noise(posterior, t, w, options, reporter):
    """The label noise of largest leave-one-out log-likelihood, its solution.

    The leave-one-out log-likelihood of the labels (free from the cavities)
    is what a held-out log-loss measures; it is maximised over
    ``log(label_noise)`` within ``LABEL_NOISE_BOUNDS``: a scan down
    :data:`_LABEL_NOISE_GRID` brackets the maximum, bounded Brent search
    refines it.  A solve that does not converge scores nothing (its cavities
    are not the model's).  Clean, separable data drive the noise to the
    lower bound, so probabilities are not capped at ``1 - 0.05``; noisy data
    get the noise they show.  Returns the options with the chosen likelihood
    and the solution at ``tol``; a callback's stop ends the search where it
    is.
    """
    search = replace(options, tol=max(options.tol, _SEARCH_TOL))
    points = []  # (log noise, score, options, solution), in order of solving

    def evaluate(log_noise):
        best = _best_point(points)
        warm = None if best is None else _warm_start(best[3], 0)
        at = replace(
            search, likelihood=make_likelihood("step", float(np.exp(log_noise)))
        )
        solution = _solve(posterior, t, w, at, warm, reporter)
        score = _loo_log_likelihood(solution, w) if solution.converged else -np.inf
        points.append((log_noise, score, at, solution))
        if solution.stopped:
            raise _SearchStopped
        return -score

    try:
        for log_noise in np.log(_LABEL_NOISE_GRID):
            evaluate(log_noise)
            best = _best_point(points)
            if best is not None and points[-1][1] < best[1]:
                break
        ordered = sorted(points, key=lambda point: point[0])
        index = int(np.argmax([point[1] for point in ordered]))
        if 0 < index < len(ordered) - 1:
            minimize_scalar(
                evaluate,
                bounds=(ordered[index - 1][0], ordered[index + 1][0]),
                method="bounded",
                options={"xatol": _LOG_LABEL_NOISE_TOL},
            )
    except _SearchStopped:
        return replace(points[-1][2], tol=options.tol), points[-1][3]
    _, score, at, solution = _best_point(points) or points[-1]
    reporter(
        1,
        "label noise %.4g by %d solves (leave-one-out log-likelihood %.4f)",
        at.likelihood.label_noise,
        len(points),
        score,
    )
    at = replace(at, tol=options.tol)
    warm = _warm_start(solution, 0) if solution.converged else None
    return at, _solve(posterior, t, w, at, warm, reporter)


def _best_point(points):
    """The converged point of largest score, or None."""
    finite = [point for point in points if np.isfinite(point[1])]
    return max(finite, key=lambda point: point[1]) if finite else None


class _SearchStopped(Exception):
    """A callback asked the label-noise search to stop."""


def _loo_log_likelihood(solution, w):
    """``sum_i w_i log p(t_i | cavity_i)``: the leave-one-out log-likelihood
    of the labels, from the tilted normalisers at the cavities."""
    log_z = solution.log_z if w is None else w * solution.log_z
    return float(np.sum(log_z))


def _warm_start(solution, n_new):
    pad = np.zeros(n_new)
    return _WarmStart(
        np.concatenate([solution.tau, pad]),
        np.concatenate([solution.nu, pad]),
        np.concatenate([solution.alpha, pad]),
    )


def _incremental_solve(posterior, t, w, options, seed, task=None):
    """The paper's schedule for hard problems: a few examples first, then more.

    The examples are taken in a random order (``seed``); the set doubles at
    every stage, each stage warm-started from the previous solution.
    Returns the solution in the original order of the examples.  ``task``
    (a :class:`~sklearn_meanfield._progress.CallbackTask`) is the restart's
    callback task; its steps are the sweeps of every stage.
    """
    reporter = ProgressReporter(options.verbose, PREFIX, task=task)
    n = posterior.n
    order = np.random.RandomState(seed).permutation(n)
    size = min(n, max(8, n // 16))
    warm = None
    with reporter.task:
        while True:
            index = order[:size]
            solution = _solve(
                posterior.subset(index),
                t[index],
                None if w is None else w[index],
                options,
                warm,
                reporter,
            )
            if size == n or solution.stopped:
                break
            new_size = min(n, 2 * size)
            warm = _warm_start(solution, new_size - size)
            size = new_size
        if solution.stopped:
            return solution  # a partial set: refused by the caller
        # Back to the original order of the examples.
        inverse = np.argsort(order)
        warm = _WarmStart(
            solution.tau[inverse], solution.nu[inverse], solution.alpha[inverse]
        )
        return _solve(posterior, t, w, options, warm, reporter)


def fit_binary(Phi, t, w, options, seed, n_jobs, task=None):
    """One binary problem: plain iteration, then incremental restarts if needed.

    On the BLAS threads its matrices are worth (``d x d`` in weight space,
    ``m x m`` in the dual space).  ``task`` (a
    :class:`~sklearn_meanfield._progress.CallbackTask`) is the problem's
    callback task: its subtasks are the solve (whose steps are the sweeps)
    and, when they run, the incremental restarts.  Returns a
    :class:`BinaryFit`.
    """
    side = Phi.shape[1] if options.space == "weight" else Phi.shape[0]
    reporter = ProgressReporter(options.verbose, PREFIX, task=task)
    with reporter.task, blas_threads_for_matrix(side):
        if options.space == "weight":
            posterior = WeightSpacePosterior(Phi)
        else:
            K = Phi @ Phi.T
            posterior = KernelPosterior(K.toarray() if sparse.issparse(K) else K)
        solve = ProgressReporter(
            options.verbose,
            reporter.prefix,
            task=reporter.task.subtask("solve", max_steps=None),
        )
        with solve.task:
            if options.learns_label_noise:
                options, solution = _learn_label_noise(posterior, t, w, options, solve)
            else:
                solution = _solve(posterior, t, w, options, reporter=solve)
        reporter(
            1,
            "%s mean field in %s space: %d sweeps, converged=%s",
            options.variance,
            options.space,
            solution.n_iter,
            solution.converged,
        )
        if not (solution.converged or solution.stopped) and options.n_restarts > 0:
            solution = _best_of_restarts(
                posterior, t, w, options, seed, n_jobs, reporter, solution
            )
        _warn_unconverged(solution, options)
        weight_mean = Phi.T @ solution.alpha
        if options.space == "weight":
            variance_model = solution.posterior
        else:
            variance_model = _DualFieldVariance(Phi, solution.posterior)
        if solution.posterior is not None:
            solution.posterior.release()
    return BinaryFit(weight_mean, variance_model, solution, options.likelihood)


def _best_of_restarts(posterior, t, w, options, seed, n_jobs, reporter, solution):
    """Incremental restarts (in parallel, one callback task each) for a
    solve that did not converge; the best converged one or ``solution``."""
    n_restarts = options.n_restarts
    restarts = reporter.task.subtask("incremental restarts", max_steps=n_restarts)
    with restarts:
        # Seeds drawn up front; one task per restart.
        candidates = run_parallel(
            _incremental_solve,
            [
                (posterior, t, w, options, int(s), task)
                for s, task in zip(
                    draw_seeds(seed, n_restarts),
                    restarts.subtasks(n_restarts, "restart", max_steps=None),
                )
            ],
            n_jobs=n_jobs,
        )
    candidates = [solution] + [c for c in candidates if c.converged and not c.stopped]
    _, solution = select_best(candidates, key=_free_energy_score)
    reporter(
        1,
        "incremental restarts: best free energy %.4f (converged=%s)",
        -_free_energy_score(solution),
        solution.converged,
    )
    return solution


def _warn_unconverged(solution, options):
    if solution.stopped:
        warnings.warn(
            f"A callback stopped the {options.variance} TAP equations after "
            f"{solution.n_iter} sweeps, before they converged; the best iterate "
            "is kept.",
            ConvergenceWarning,
        )
    elif not solution.converged:
        warnings.warn(
            f"The {options.variance} TAP equations did not converge in "
            f"{solution.n_iter} sweeps; the best iterate is kept. Increase "
            "max_iter or n_restarts, lower damping, or allow label_noise > 0.",
            ConvergenceWarning,
        )


class _DualFieldVariance:
    """Field variance at new inputs from a dual (kernel-space) solution.

    ``Var[phi . w] = |phi|^2 - k^T (K + S^-1)^-1 k`` with ``k = Phi phi``.
    """

    def __init__(self, Phi, posterior_solution):
        self.Phi = Phi
        self.solution = posterior_solution

    def field_variance(self, Phi_new):
        K_cross = self.Phi @ Phi_new.T
        if sparse.issparse(K_cross):
            K_cross = K_cross.toarray()
        prior = _row_norms_squared(Phi_new)
        return prior - self.solution.variance_reduction(K_cross)
