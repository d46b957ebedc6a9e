"""Fitting the multinomial GP classifier: one coupled model for all classes.

What a worker runs for ``TAPGaussianProcessClassifier(multi_class=
"multinomial")``, as :mod:`~sklearn_meanfield.tap._binary_gpc` is for a
binary problem, and with the same search strategy (its :class:`_Search`
subclassed): the kernel shared by the classes' latent functions is chosen
by maximising nested EP's evidence with its analytic gradient, EP
warm-started along the optimiser's path, restarts in parallel; then a final
solve at the fitted kernel gives a :class:`MultinomialFit`.  In the sparse
mode the prior is FITC's at k-means inducing inputs (or the user's), which
stay fixed (:mod:`._sparse_multinomial`), and the row blocks may live on
Dask workers as the binary sparse fit's do.
"""

import warnings
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np
from joblib import parallel_config
from sklearn.exceptions import ConvergenceWarning
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
    _OptimizerRun,
    _Search,
    _warn_at_bounds,
    _warn_unreliable,
    amplitude_bound_binds,
    best_optimiser_run,
    check_restart_bounds,
    retry_blind_kernel,
)
from ._hooks import print_sweeps, sweep_steps
from ._kernels import LIFTED_AMPLITUDE_BOUNDS
from ._multinomial import (
    KernelPrior,
    multinomial_ep,
    multinomial_evidence_gradient,
    predictive_proba,
)
from ._sparse import DaskBlocks, FITCPosterior
from ._sparse_gpc import (
    _PREDICT_BLOCK_BYTES,
    _HeldOutSearch,
    _learn_inducing_points,
    initial_inducing_points,
    row_blocks,
)
from ._sparse_multinomial import SparseCoupledPrior, sparse_multinomial_gradient

__all__ = [
    "MultinomialFit",
    "SparsePrior",
    "check_multinomial_memory",
    "check_sparse_multinomial_memory",
    "fit_multinomial",
    "multinomial_log_evidence",
]


# Rows predicted at once: 1000 rows of a 10-class model on 2000 training
# points hold 160 MB of work arrays.
_PREDICT_BLOCK = 1000


class SparsePrior(NamedTuple):
    """The sparse mode's fixed inducing inputs ``Z``, ``K_mm``'s relative
    nugget and where the row blocks live."""

    Z: np.ndarray
    jitter: float
    blocks: object

    def at(self, kernel, X):
        """The :class:`SparseCoupledPrior` of ``kernel`` on the rows ``X``."""
        fitc = FITCPosterior.from_kernel(
            kernel, X, self.Z, jitter=self.jitter, executor=self.blocks
        )
        return SparseCoupledPrior(fitc)


class MultinomialFit(NamedTuple):
    """The fitted multinomial model (what the worker returns, predict reads)."""

    kernel: Kernel
    solution: object
    log_evidence: float
    stopped: bool
    loo_valid: bool
    inducing_points: np.ndarray = None

    def latent(self, X_train, X):
        """Predictive means ``(m, C)`` and covariances ``(m, C, C)`` of the
        classes' latent values at ``X`` (the sparse mode: through the
        inducing values only, ``X_train`` is not needed)."""
        if self.inducing_points is not None:
            return self.solution.posterior.predict(
                self.kernel(self.inducing_points, X), self.kernel.diag(X)
            )
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
        block = _PREDICT_BLOCK
        if self.inducing_points is not None:
            block = max(1, _PREDICT_BLOCK_BYTES // (8 * len(self.inducing_points)))
            block = min(block, _PREDICT_BLOCK)
        blocks = [
            predictive_proba(*self.latent(X_train, _safe_indexing(X, rows)))
            for rows in gen_batches(n_rows, block)
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
    sparse=None,
    learn_inputs=False,
):
    """Nested EP at ``theta`` (on the ``sparse`` mode's :class:`SparsePrior`,
    or exact when None): an :class:`_Evaluation` (never degenerate).  With
    ``learn_inputs`` the inducing inputs follow the kernel's entries in
    ``theta``, and the gradient covers them too."""
    if learn_inputs:
        theta = np.asarray(theta, dtype=float)
        head = kernel.n_dims
        sparse = sparse._replace(Z=theta[head:].reshape(sparse.Z.shape))
        theta = theta[:head]
    kernel = kernel.clone_with_theta(theta)
    K_gradient = None
    if sparse is not None:
        prior = sparse.at(kernel, X)
    elif eval_gradient:
        K, K_gradient = kernel(X, eval_gradient=True)
        prior = KernelPrior(K)
    else:
        prior = KernelPrior(kernel(X))
    solution = multinomial_ep(
        prior,
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
    if eval_gradient and sparse is not None:
        gradient, Z_gradient = sparse_multinomial_gradient(
            solution, kernel, sparse.Z, inducing=learn_inputs
        )
        if learn_inputs:
            gradient = np.concatenate([gradient, Z_gradient.ravel()])
    elif eval_gradient:
        gradient = multinomial_evidence_gradient(solution, K_gradient)
    if sparse is not None:
        solution.posterior.release()
    return _Evaluation(solution, solution.log_evidence, gradient, 0)


def multinomial_log_evidence(
    theta,
    X,
    labels,
    n_classes,
    kernel,
    options,
    eval_gradient=False,
    weights=None,
    sparse=None,
):
    """Nested EP's log evidence (and its gradient) at ``theta``, exact or on
    the ``sparse`` mode's :class:`SparsePrior`."""
    evaluation = _evaluate(
        theta,
        X,
        labels,
        n_classes,
        kernel,
        options,
        eval_gradient=eval_gradient,
        weights=weights,
        sparse=sparse,
    )
    if eval_gradient:
        return evaluation.value, evaluation.gradient
    return evaluation.value


@dataclass
class _MultinomialSearch(_Search):
    """The binary search's strategy on the multinomial model's evidence; its
    ``t`` are the class indices, ``sparse`` its :class:`SparsePrior` (None:
    exact)."""

    n_classes: int = 2
    sparse: SparsePrior = None

    def evaluate(self, theta, start, eval_gradient, max_iter=None):
        return _search_evaluation(
            self, theta, start, eval_gradient, max_iter, self.sparse
        )


def _search_evaluation(
    search, theta, start, eval_gradient, max_iter, sparse, learn_inputs=False
):
    """A multinomial search's :meth:`~._binary_gpc._Search.evaluate`, on
    ``sparse`` (None: exact), ``learn_inputs`` as for :func:`_evaluate`."""
    options = search.options
    if max_iter is not None:
        options = replace(options, max_iter=max_iter)
    return _evaluate(
        theta,
        search.X,
        search.t,
        search.n_classes,
        search.kernel,
        options,
        start,
        eval_gradient=eval_gradient,
        tol=max(search.options.tol, search.tol),
        weights=search.weights,
        printer=search.printer,
        sparse=sparse,
        learn_inputs=learn_inputs,
    )


@dataclass
class _MultinomialHeldOutSearch(_HeldOutSearch):
    """The binary problems' held-out search of the kernel and the inducing
    inputs on the multinomial model's evidence; the held-out rows' score is
    the multi-class Brier score ``sum_c (p_c - [y = c])^2`` of the nested-EP
    predictive probabilities (twice the binary problems' for two classes)."""

    n_classes: int = 2

    def evaluate(self, params, start, eval_gradient, max_iter=None):
        sparse = SparsePrior(self.Z, self.inducing.jitter, self.blocks)
        return _search_evaluation(
            self, params, start, eval_gradient, max_iter, sparse, learn_inputs=True
        )

    def held_out_losses(self, solution, kernel, options, Z):
        mean, cov = solution.posterior.predict(
            kernel(Z, self.X_out), kernel.diag(self.X_out)
        )
        proba = predictive_proba(mean, cov)
        proba[np.arange(len(self.t_out)), self.t_out] -= 1.0
        return np.sum(proba**2, axis=1)


def _optimise(
    X, labels, n_classes, kernel, options, seed, n_jobs, reporter, weights, sparse
):
    """The best optimiser run (the kernel's own start, then random draws),
    with the binary fit's retry from the data's length scale when the best
    kernel ignores the inputs.

    The default kernel's amplitude keeps its bound here: nested EP at
    amplitudes beyond it needs many more sweeps (the benchmark's nested
    shells of ``make_gaussian_quantiles`` took about four times the fit time
    with the bound at 1e5), where the binary problems' EP does not mind.
    """
    rng = np.random.RandomState(seed)
    theta0, bounds = kernel.theta, kernel.bounds
    check_restart_bounds(options, bounds)
    starts = [theta0] + [
        rng.uniform(bounds[:, 0], bounds[:, 1])
        for _ in range(options.n_restarts_optimizer)
    ]
    fields = {"n_classes": n_classes, "sparse": sparse}

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

    # Row blocks on a Dask cluster: the runs take turns here, each evaluation
    # spread over the cluster's blocks.
    distributed = sparse is not None and isinstance(sparse.blocks, DaskBlocks)
    n_jobs = 1 if distributed else n_jobs
    with parallel_config(backend="sequential") if distributed else nullcontext():
        best, stopped = best_optimiser_run(starts, arguments, n_jobs, reporter)
        return retry_blind_kernel(
            best, stopped, theta0, kernel, X, weights, arguments, n_jobs, reporter
        )


def _warn_binding_amplitude(best, kernel, options):
    """ConvergenceWarning when the default kernel's amplitude bound holds the
    evidence back (:func:`~._binary_gpc.amplitude_bound_binds`): the binary
    problems go on to a wider bound; nested EP, many sweeps slower there,
    leaves it to the user."""
    if not amplitude_bound_binds(best, kernel, options):
        return
    warnings.warn(
        "The kernel's amplitude ran to its upper bound "
        f"({kernel.k1.constant_value_bounds[1]:.3g}) with the log evidence "
        f"still climbing there ({best.gradient[0]:.3g} per e-fold): the "
        "probabilities may be less sharp than the data allow. A kernel with a "
        "wider bound, ConstantKernel(1.0, "
        f"{LIFTED_AMPLITUDE_BOUNDS}) * RBF(...), may fit better, for several "
        "times the fit time.",
        ConvergenceWarning,
    )


# The polish ends once this many sweeps in a row bring no residual below
# the lowest so far: at a large kernel amplitude the factors' rounding floor
# can lie above _POLISH_TOL (about 1e-8 at an amplitude of 1000), and sweeps
# there change nothing.
_POLISH_FLOOR_SWEEPS = 3


def _final_solve(prior, labels, n_classes, options, sites, stopped, reporter, weights):
    """Nested EP at the fitted kernel (a callback subtask, a step per sweep),
    polished to ``_POLISH_TOL`` as the binary final solve is, or to the
    factors' rounding floor when that lies above it."""
    solve = ProgressReporter(
        options.verbose,
        reporter.prefix,
        task=reporter.task.subtask("solve", max_steps=None),
    )
    sweeps = sweep_steps(solve)
    max_iter = 1 if stopped else options.max_iter

    def run(start, tol, max_iter, on_iteration, floor_sweeps=None):
        return multinomial_ep(
            prior,
            labels,
            n_classes,
            weights=weights,
            start=start,
            max_iter=max_iter,
            tol=tol,
            damping=options.damping,
            on_iteration=on_iteration,
            floor_sweeps=floor_sweeps,
        )

    with solve.task:
        solution = run(sites, options.tol, max_iter, sweeps)
        if solution.converged and not solution.stopped and options.tol > _POLISH_TOL:
            done = solution.n_iter

            def more_sweeps(sweep):
                return sweeps(sweep._replace(number=sweep.number + done))

            polished = run(
                [(solution.tau, solution.nu)],
                _POLISH_TOL,
                _POLISH_SWEEPS,
                more_sweeps,
                _POLISH_FLOOR_SWEEPS,
            )
            # Ended on the floor, the polished factors still meet ``tol``.
            if not polished.stopped and polished.residual <= options.tol:
                polished.n_iter += done
                polished.converged = True
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
    X, labels, n_classes, kernel, options, seed, n_jobs, task=None, weights=None,
    *, inducing=None, client=None,
):  # fmt: skip
    """Fit the multinomial model: the shared kernel, then nested EP.

    A pure function of its arguments (and ``seed``): restarts run in
    parallel with ``n_jobs`` on any joblib backend with identical results.
    ``inducing`` (an :class:`~._sparse_gpc.InducingOptions`) selects the
    sparse mode, whose row blocks live on the workers of the Dask ``client``
    when one is given (the restarts then take turns here); the k-means seed
    and the held-out split of the inducing-input search (when the inputs are
    learned) are drawn from ``seed`` first.  Returns a
    :class:`MultinomialFit`.
    """
    reporter = ProgressReporter(options.verbose, options.prefix, task=task)
    sparse = None
    matrix = _num_samples(X)
    if inducing is not None:
        X = np.asarray(X, dtype=float)
        rng = np.random.RandomState(seed)
        kmeans_seed, seed = (int(s) for s in rng.randint(2**31 - 1, size=2))
        Z = initial_inducing_points(X, inducing, kmeans_seed, weights)
        sparse = SparsePrior(Z, inducing.jitter, row_blocks(len(X), len(Z), client))
        matrix = min(matrix, n_classes * len(Z))
        # The held-out rows of the inducing-input search.
        split_rng = np.random.RandomState(rng.randint(2**31 - 1))
    with reporter.task, blas_threads_for_matrix(matrix):
        stopped = False
        sites = None
        learn_inputs = sparse is not None and inducing.learn
        if options.optimizer is not None and (kernel.n_dims > 0 or learn_inputs):
            # The kernel first, at the starting inducing inputs; then, when
            # they are learned, both, watched on held-out rows.
            best = _OptimizerRun(np.empty(0), np.nan, None, False)
            if kernel.n_dims > 0:
                best, stopped = _optimise(
                    X, labels, n_classes, kernel, options, seed, n_jobs, reporter,
                    weights, sparse,
                )  # fmt: skip
                kernel = kernel.clone_with_theta(best.theta)
                if not stopped:
                    _warn_at_bounds(kernel, options)
                    _warn_binding_amplitude(best, kernel, options)
            sites = best.sites
            if learn_inputs and not stopped:
                point, sites, stopped = _learn_inducing_points(
                    best, X, labels, kernel, options, inducing, sparse.Z,
                    split_rng, reporter, weights, client,
                    search_type=_MultinomialHeldOutSearch,
                    fields={"n_classes": n_classes},
                )  # fmt: skip
                head = kernel.n_dims
                kernel = kernel.clone_with_theta(point[:head])
                sparse = sparse._replace(Z=point[head:].reshape(sparse.Z.shape))
        else:
            kernel = kernel.clone_with_theta(kernel.theta)
        prior = KernelPrior(kernel(X)) if sparse is None else sparse.at(kernel, X)
        solution, stopped = _final_solve(
            prior, labels, n_classes, options, sites, stopped, reporter, weights
        )
        _warn_unreliable(solution, options, stopped, 0, len(labels))
        if sparse is not None:
            solution.posterior.release()
    return MultinomialFit(
        kernel=kernel,
        solution=solution,
        log_evidence=solution.log_evidence,
        stopped=stopped,
        loo_valid=bool(solution.converged and not stopped),
        inducing_points=None if sparse is None else sparse.Z,
    )


# n x n arrays at the peak of a sweep, per class (E_c, and E_c K and its
# product with L_P^-1 while the marginal covariances are formed) and in all
# (the kernel matrix, the sum of the E_c, its factor and the factor's
# inverse).
_ARRAYS_PER_CLASS = 3
_SHARED_ARRAYS = 4


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


def sparse_multinomial_peak_bytes(n, m, n_classes, n_concurrent=1):
    """Peak bytes of sparse multinomial fits run at once.

    Each holds the whitened cross-covariances ``U`` (``n x m``), the ``C m
    x C m`` precision of the inducing values, its factor and inverse, nested
    EP's ``n x C x C`` marginals and cavities, and a row block's products
    with a block row of the inverse (``C`` times the block's 8 MiB of
    ``U``).

    Examples
    --------
    >>> sparse_multinomial_peak_bytes(20_000, 256, 10) / 2**30 < 1
    True
    """
    per_fit = (
        8.0 * (2 * n * m + 30 * n * n_classes**2 + 4 * (n_classes * m) ** 2)
        + (2 + 2 * n_classes) * 8 * 2**20
    )
    return n_concurrent * per_fit


def check_sparse_multinomial_memory(n, m, n_classes, n_concurrent=1):
    """Raise ``MemoryError`` before a sparse multinomial fit whose arrays
    cannot fit."""
    check_memory(
        sparse_multinomial_peak_bytes(n, m, n_classes, n_concurrent),
        f"A sparse multinomial Gaussian-process fit on {n} samples of "
        f"{n_classes} classes with {m} inducing points",
        "Use fewer inducing points (n_inducing) or fewer n_jobs, or "
        "multi_class='one_vs_rest'.",
    )
