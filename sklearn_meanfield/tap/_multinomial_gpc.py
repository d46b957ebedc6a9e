"""Fitting the multinomial GP classifier: one coupled model for all classes.

What a worker runs for ``TAPGaussianProcessClassifier(multi_class=
"multinomial")``, as :mod:`~sklearn_meanfield.tap._binary_gpc` is for a
binary problem, and with the same search strategy (its :class:`_Search`
subclassed): the kernel shared by the classes' latent functions is chosen
by maximising nested EP's evidence with its analytic gradient, EP
warm-started along the optimiser's path, restarts in parallel; then a final
solve at the fitted kernel gives a :class:`MultinomialFit`.
"""

from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np
from sklearn.gaussian_process.kernels import Kernel
from sklearn.utils import _safe_indexing, gen_batches
from sklearn.utils.validation import _num_samples

from .._memory import check_memory, format_bytes
from .._parallel import blas_threads_for_matrix
from .._progress import ProgressReporter
from ._binary_gpc import (
    _POLISH_SWEEPS,
    _POLISH_TOL,
    _Evaluation,
    _Search,
    _warn_at_bounds,
    _warn_unreliable,
    best_optimiser_run,
    check_restart_bounds,
    retry_blind_kernel,
)
from ._hooks import print_sweeps, sweep_steps
from ._multinomial import (
    multinomial_ep,
    multinomial_evidence_gradient,
    predictive_proba,
)

__all__ = [
    "MultinomialFit",
    "check_multinomial_memory",
    "fit_multinomial",
    "multinomial_log_evidence",
]


# Rows predicted at once: 1000 rows of a 10-class model on 2000 training
# points hold 160 MB of work arrays.
_PREDICT_BLOCK = 1000


class MultinomialFit(NamedTuple):
    """The fitted multinomial model (what the worker returns, predict reads)."""

    kernel: Kernel
    solution: object
    log_evidence: float
    stopped: bool
    loo_valid: bool

    def latent(self, X_train, X):
        """Predictive means ``(m, C)`` and covariances ``(m, C, C)`` of the
        classes' latent values at ``X``."""
        K_cross = self.kernel(X_train, X)
        mean = K_cross.T @ self.solution.alpha
        reduction, cov = self.solution.posterior.covariance_terms(K_cross)
        idx = np.arange(mean.shape[1])
        cov[:, idx, idx] += self.kernel.diag(X)[:, None] - reduction
        return mean, cov

    def proba(self, X_train, X):
        """Predictive class probabilities at ``X``, in blocks of rows (the
        covariances' work arrays grow as ``n C`` per row)."""
        n_rows = _num_samples(X)
        blocks = [
            predictive_proba(*self.latent(X_train, _safe_indexing(X, rows)))
            for rows in gen_batches(n_rows, _PREDICT_BLOCK)
        ]
        if not blocks:
            return np.empty((0, self.solution.mean.shape[1]))
        return np.vstack(blocks)


def _evaluate(
    theta,
    X,
    labels,
    n_classes,
    kernel,
    options,
    start=None,
    eval_gradient=False,
    tol=None,
    weights=None,
    printer=None,
):
    """Nested EP at ``theta``: an :class:`_Evaluation` (never degenerate)."""
    kernel = kernel.clone_with_theta(theta)
    if eval_gradient:
        K, K_gradient = kernel(X, eval_gradient=True)
    else:
        K = kernel(X)
    solution = multinomial_ep(
        K,
        labels,
        n_classes,
        weights=weights,
        start=start,
        max_iter=options.max_iter,
        tol=options.tol if tol is None else tol,
        damping=options.damping,
        on_iteration=None if printer is None else print_sweeps(printer),
    )
    gradient = None
    if eval_gradient:
        gradient = multinomial_evidence_gradient(solution, K_gradient)
    return _Evaluation(solution, solution.log_evidence, gradient, 0)


def multinomial_log_evidence(
    theta, X, labels, n_classes, kernel, options, eval_gradient=False, weights=None
):
    """Nested EP's log evidence (and its gradient) at ``theta``."""
    evaluation = _evaluate(
        theta,
        X,
        labels,
        n_classes,
        kernel,
        options,
        eval_gradient=eval_gradient,
        weights=weights,
    )
    if eval_gradient:
        return evaluation.value, evaluation.gradient
    return evaluation.value


@dataclass
class _MultinomialSearch(_Search):
    """The binary search's strategy on the multinomial model's evidence; its
    ``t`` are the class indices."""

    n_classes: int = 2

    def evaluate(self, theta, start, eval_gradient, max_iter=None):
        options = self.options
        if max_iter is not None:
            options = replace(options, max_iter=max_iter)
        return _evaluate(
            theta,
            self.X,
            self.t,
            self.n_classes,
            self.kernel,
            options,
            start,
            eval_gradient=eval_gradient,
            tol=max(self.options.tol, self.tol),
            weights=self.weights,
            printer=self.printer,
        )


def _optimise(X, labels, n_classes, kernel, options, seed, n_jobs, reporter, weights):
    """The best optimiser run (the kernel's own start, then random draws),
    with the binary fit's retry from the data's length scale when the best
    kernel ignores the inputs.

    The default kernel's amplitude keeps its bound here: nested EP at
    amplitudes beyond it converges slowly or not at all (200 sweeps did not
    suffice on the nested shells of ``make_gaussian_quantiles``), where the
    binary problems' EP does not mind.
    """
    rng = np.random.RandomState(seed)
    theta0, bounds = kernel.theta, kernel.bounds
    check_restart_bounds(options, bounds)
    starts = [theta0] + [
        rng.uniform(bounds[:, 0], bounds[:, 1])
        for _ in range(options.n_restarts_optimizer)
    ]
    fields = {"n_classes": n_classes}

    def arguments(start, task):
        return (
            start,
            X,
            labels,
            kernel,
            options,
            task,
            weights,
            bounds,
            _MultinomialSearch,
            fields,
        )

    best, stopped = best_optimiser_run(starts, arguments, n_jobs, reporter)
    return retry_blind_kernel(
        best, stopped, theta0, kernel, X, weights, arguments, n_jobs, reporter
    )


def _final_solve(K, labels, n_classes, options, sites, stopped, reporter, weights):
    """Nested EP at the fitted kernel (a callback subtask, a step per sweep),
    polished to ``_POLISH_TOL`` as the binary final solve is."""
    solve = ProgressReporter(
        options.verbose,
        reporter.prefix,
        task=reporter.task.subtask("solve", max_steps=None),
    )
    sweeps = sweep_steps(solve)
    max_iter = 1 if stopped else options.max_iter

    def run(start, tol, max_iter, on_iteration):
        return multinomial_ep(
            K,
            labels,
            n_classes,
            weights=weights,
            start=start,
            max_iter=max_iter,
            tol=tol,
            damping=options.damping,
            on_iteration=on_iteration,
        )

    with solve.task:
        solution = run(sites, options.tol, max_iter, sweeps)
        if solution.converged and not solution.stopped and options.tol > _POLISH_TOL:
            done = solution.n_iter

            def more_sweeps(sweep):
                return sweeps(sweep._replace(number=sweep.number + done))

            polished = run(
                [(solution.tau, solution.nu)], _POLISH_TOL, _POLISH_SWEEPS, more_sweeps
            )
            if polished.converged and not polished.stopped:
                polished.n_iter += done
                solution = polished
    stopped |= solution.stopped
    reporter(
        1,
        "final nested EP solve: %d sweeps, %s, log evidence %.4f",
        solution.n_iter,
        "converged" if solution.converged else "not converged",
        solution.log_evidence,
    )
    return solution, stopped


def fit_multinomial(
    X, labels, n_classes, kernel, options, seed, n_jobs, task=None, weights=None
):
    """Fit the multinomial model: the shared kernel, then nested EP.

    A pure function of its arguments (and ``seed``): restarts run in
    parallel with ``n_jobs`` on any joblib backend with identical results.
    Returns a :class:`MultinomialFit`.
    """
    reporter = ProgressReporter(options.verbose, options.prefix, task=task)
    with reporter.task, blas_threads_for_matrix(_num_samples(X)):
        stopped = False
        sites = None
        if options.optimizer is not None and kernel.n_dims > 0:
            best, stopped = _optimise(
                X, labels, n_classes, kernel, options, seed, n_jobs, reporter, weights
            )
            kernel = kernel.clone_with_theta(best.theta)
            sites = best.sites
            if not stopped:
                _warn_at_bounds(kernel, options)
        else:
            kernel = kernel.clone_with_theta(kernel.theta)
        solution, stopped = _final_solve(
            kernel(X), labels, n_classes, options, sites, stopped, reporter, weights
        )
        _warn_unreliable(solution, options, stopped, 0, len(labels))
    return MultinomialFit(
        kernel=kernel,
        solution=solution,
        log_evidence=solution.log_evidence,
        stopped=stopped,
        loo_valid=bool(solution.converged and not stopped),
    )


# n x n arrays at the peak of a sweep, per class (E_c, and E_c K and its
# triangular solve while the marginal covariances are formed) and in all
# (the kernel matrix, the sum of the E_c and its factor).
_ARRAYS_PER_CLASS = 3
_SHARED_ARRAYS = 3


def multinomial_fit_peak_bytes(n, n_classes, n_params, optimise, n_concurrent):
    """Peak bytes of a multinomial fit, all concurrent restarts counted."""
    arrays = _ARRAYS_PER_CLASS * n_classes + _SHARED_ARRAYS
    if optimise:
        arrays += n_params + 1  # the kernel's gradient and the trace matrix
    return 8.0 * n**2 * arrays * n_concurrent


def check_multinomial_memory(n, n_classes, n_params, optimise, n_concurrent):
    """Raise ``MemoryError`` before a multinomial fit whose arrays cannot fit."""
    needed = multinomial_fit_peak_bytes(n, n_classes, n_params, optimise, n_concurrent)
    per_worker = (
        f" ({n_concurrent} concurrent restarts, "
        f"{format_bytes(needed / n_concurrent)} each: a smaller n_jobs needs less)"
        if n_concurrent > 1
        else ""
    )
    check_memory(
        needed,
        f"A multinomial Gaussian-process fit on {n} samples of {n_classes} "
        f"classes{per_worker}",
        "Subsample the data, or use multi_class='one_vs_rest' with the sparse "
        "mode (n_inducing).",
    )
