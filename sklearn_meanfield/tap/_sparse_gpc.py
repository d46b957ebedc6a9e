"""Fitting one binary problem of the TAP GP classifier with inducing points.

The sparse counterpart of :func:`~sklearn_meanfield.tap._binary_gpc.fit_binary`:
EP (adaptive TAP) on the FITC prior ``Q + diag(K - Q)`` of ``m`` inducing
inputs (:class:`~sklearn_meanfield.tap._sparse.FITCPosterior`, ``O(n m^2)``
time a sweep, ``O(n m)`` memory, no ``n x n`` array anywhere):

* :func:`initial_inducing_points`, k-means centres of the inputs (or the
  user's array);
* the FITC-EP evidence at a point of the search space (kernel
  log-hyperparameters, ``log(label_noise)`` when it is learned, then the
  inducing inputs when they are learned) and its analytic gradient
  (:func:`log_evidence`);
* the optimiser strategy of the exact fit, reused: EP warm-started along the
  secant of the last evaluations, a tolerance that tightens with the
  gradient, failed evaluations penalised, restarts in parallel from seeds
  drawn up front;
* learning the inducing inputs after the kernel, on all but a held-out
  share of the rows whose Brier score decides whether they move
  (:func:`validation_split`, :func:`significant_gain`);
* the final solve, giving a :class:`SparseBinaryFit` that predicts from
  ``O(m^2)`` state (the ``n x m`` whitened cross-covariances are released)
  and keeps the cavities, the leave-one-out predictions of the sparse model
  with the other sites frozen (as exact TAP's are of the full model).

References
----------
.. [1] L. Csato and M. Opper, "Sparse on-line Gaussian processes", Neural
   Computation 14(3), 641-668, 2002.
.. [2] A. Naish-Guzman and S. Holden, "The generalized FITC approximation",
   NIPS 20, 2008.
.. [3] E. Snelson and Z. Ghahramani, "Sparse Gaussian processes using
   pseudo-inputs", NIPS 18, 2006.
.. [4] M. Bauer, M. van der Wilk and C. E. Rasmussen, "Understanding
   probabilistic sparse Gaussian process approximations", NIPS 29, 2016.
"""

import warnings
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np
from joblib import parallel_config
from sklearn.cluster import KMeans, MiniBatchKMeans
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import Kernel
from sklearn.utils.validation import _num_samples

from .._memory import check_memory
from .._parallel import blas_threads_for_matrix, run_parallel, select_best
from .._progress import ProgressReporter
from ._binary_gpc import (
    _at,
    _drive_search,
    _Evaluation,
    _evaluation_printer,
    _final_solve,
    _OptimizerRun,
    _Search,
    _search_space,
    _solve,
    _Stalled,
    _warn_at_bounds,
    _with_max_iter,
    best_optimiser_run,
    check_restart_bounds,
    contradicted_points,
    is_reliable,
    settle_final_solution,
)
from ._evidence import ep_label_noise_gradient
from ._hooks import print_sweeps
from ._sparse import (
    DaskBlocks,
    FITCPosterior,
    LocalBlocks,
    _blocks,
    block_marginals,
    combine_site_statistics,
    fitc_search_gradient,
    inducing_cholesky,
    whiten_block,
)
from ._sparse import _block_size as _default_block_size
from ._stochastic_ep import site_statistics, stochastic_search

__all__ = [
    "KMEANS_EXACT_MAX_SAMPLES",
    "STOCHASTIC_MIN_SAMPLES",
    "InducingOptions",
    "check_sparse_fit_memory",
    "row_blocks",
    "SparseBinaryFit",
    "fit_sparse_binary",
    "held_out_losses",
    "initial_inducing_points",
    "log_evidence",
    "significant_gain",
    "sparse_fit_peak_bytes",
    "uses_stochastic_search",
    "validation_split",
]

# Full (Lloyd) k-means up to this many samples, mini-batch k-means above:
# on many samples full k-means costs about as much as the FITC fit itself,
# and the mini-batch centres (k-means objective 3.5% higher at n = 50,000,
# m = 256) start the inducing inputs as well.
KMEANS_EXACT_MAX_SAMPLES = 10_000
_MINIBATCH_SIZE = 4096
# optimizer="auto" searches by stochastic EP above this many rows, where it
# reaches the full-batch search's evidence in less time.
STOCHASTIC_MIN_SAMPLES = 50_000
_PREDICT_BLOCK_BYTES = 8 * 2**20
# Learning the inducing inputs by L-BFGS-B: FITC's evidence over-fits them
# (Bauer, van der Wilk and Rasmussen 2016), so this share of the rows
# (stratified) is held out of that search, which keeps the point of lowest
# held-out Brier score when it beats the start's by VALIDATION_SIGNIFICANCE
# standard errors of the paired per-row differences (a one-sided test at
# about 2.3%; more for the k-th comparison along the path: sqrt(2 ln k)),
# and ends after VALIDATION_PATIENCE evaluations without a new lowest
# held-out Brier score; the amplitude, which the over-fitting inflates, may
# not grow beyond its optimum at the starting inputs.  On 300 noisy rows
# with m = 48, L-BFGS-B run to its end raised the test log-loss by
# 0.05-0.07 over fixed inputs.
VALIDATION_FRACTION = 0.1
VALIDATION_SIGNIFICANCE = 2.0
VALIDATION_PATIENCE = 30
INDUCING_SEARCH_MAX_EVALUATIONS = 500
# The stochastic inducing-input search learns on at most this many of the
# learning rows (a random subset): a row's site is matched once an epoch,
# which bounds how far the inputs may move an epoch, so shorter epochs move
# them sooner.  At 200,000 rows (m = 256, 4 inputs) the search on 50,000
# ended at a lower held-out log-loss in 40% of the time of the search on all
# of them.
INDUCING_SEARCH_MAX_SAMPLES = 50_000


@dataclass(frozen=True)
class InducingOptions:
    """How a sparse fit places its inducing inputs.

    Parameters
    ----------
    n_inducing : int
        Number of inducing inputs ``m`` (for ``init="kmeans"``; an array
        gives its own).
    init : "kmeans" or ndarray of shape (m, n_features), default="kmeans"
        k-means centres of the problem's training inputs
        (:func:`initial_inducing_points`), or the inducing inputs themselves.
    learn : bool, default=False
        Optimise the inducing inputs with the kernel's hyperparameters (the
        evidence's gradient in them is analytic; ``m * n_features`` more
        parameters, and FITC's evidence may over-fit them).
    jitter : float, default=1e-8
        Relative nugget added to ``K_mm``
        (:func:`~sklearn_meanfield.tap._sparse.inducing_cholesky`).
    """

    n_inducing: int
    init: object = "kmeans"
    learn: bool = False
    jitter: float = 1e-8


def initial_inducing_points(X, inducing, seed, sample_weight=None):
    """The starting inducing inputs of a problem with training inputs ``X``.

    ``init="kmeans"``: the cluster centres of ``X`` (Lloyd's k-means, one
    initialisation, up to :data:`KMEANS_EXACT_MAX_SAMPLES` rows; mini-batch
    k-means above, which costs a fraction of it on large data), or ``X``
    itself when ``n_inducing`` is at least its number of rows (the exact
    model, up to the nugget), or its distinct rows when there are no more
    than ``n_inducing`` of them.

    Parameters
    ----------
    X : ndarray of shape (n, n_features)
    inducing : InducingOptions
    seed : int
        Seed of the k-means initialisation.
    sample_weight : ndarray of shape (n,) or None, default=None
        Weights of the rows in the k-means objective (as repeated rows).

    Returns
    -------
    ndarray of shape (m, n_features)

    Examples
    --------
    >>> import numpy as np
    >>> X = np.r_[np.zeros((5, 1)), np.ones((5, 1))]
    >>> Z = initial_inducing_points(X, InducingOptions(2), seed=0)
    >>> np.sort(Z[:, 0]).tolist()
    [0.0, 1.0]
    """
    if not isinstance(inducing.init, str):
        return np.array(inducing.init, dtype=float)
    n, m = len(X), inducing.n_inducing
    if m >= n:
        return np.array(X, dtype=float)
    distinct = np.unique(X, axis=0)
    if len(distinct) <= m:  # k-means would find fewer clusters than asked
        return distinct
    if n <= KMEANS_EXACT_MAX_SAMPLES:
        model = KMeans(m, n_init=1, random_state=seed)
    else:
        model = MiniBatchKMeans(
            m, n_init=3, batch_size=_MINIBATCH_SIZE, random_state=seed
        )
    return model.fit(X, sample_weight=sample_weight).cluster_centers_


def sparse_fit_peak_bytes(n, m, n_features, n_params, n_concurrent=1):
    """Peak bytes of sparse fits run at once (what :func:`check_memory` needs).

    Each holds the whitened cross-covariances ``U`` (``n x m``), a few
    ``n``-vectors of EP state per warm start, the ``n x m`` adjoint of
    ``K_nm`` during a gradient, and row blocks of about 8 MiB of kernel
    derivatives (``b x m x max(n_params, n_features)``).

    Parameters
    ----------
    n, m, n_features, n_params : int
    n_concurrent : int, default=1

    Returns
    -------
    float

    Examples
    --------
    >>> sparse_fit_peak_bytes(50_000, 256, 4, 3) / 2**20 < 300
    True
    """
    per_fit = 8.0 * (2 * n * m + 40 * n + 4 * m * m) + 4 * 8 * 2**20
    return n_concurrent * per_fit


def check_sparse_fit_memory(n, m, n_features, n_params, n_concurrent=1):
    """Refuse, before any work, sparse fits whose ``n x m`` arrays cannot fit
    (:func:`~sklearn_meanfield._memory.check_memory` of
    :func:`sparse_fit_peak_bytes`)."""
    check_memory(
        sparse_fit_peak_bytes(n, m, n_features, n_params, n_concurrent),
        f"A sparse Gaussian-process fit on {n} samples with {m} inducing points",
        advice="Use fewer inducing points (n_inducing) or fewer n_jobs.",
    )


def row_blocks(n, m, client=None, block_size=None):
    """Where a sparse fit's row blocks live: on the workers of ``client``
    (:class:`~sklearn_meanfield.tap._sparse.DaskBlocks`), else here
    (:class:`~sklearn_meanfield.tap._sparse.LocalBlocks`); the same
    partition of about 8 MiB of ``U`` a block either way, so both fits give
    the same numbers.

    Parameters
    ----------
    n, m : int
        Training rows and inducing inputs.
    client : distributed.Client or None, default=None
    block_size : int or None, default=None
        Rows a block (None: the default partition).

    Returns
    -------
    LocalBlocks or DaskBlocks

    Examples
    --------
    >>> row_blocks(10_000, 256).slices[:2]
    [slice(0, 4096, None), slice(4096, 8192, None)]
    """
    size = _default_block_size(block_size, m)
    if client is None:
        return LocalBlocks(n, size)
    return DaskBlocks(client, n, size)


class SparseBinaryFit(NamedTuple):
    """A fitted sparse binary problem; the interface of
    :class:`~sklearn_meanfield.tap._binary_gpc.BinaryFit`, plus the inducing
    inputs.  Its solution's posterior keeps ``O(m^2)`` state only."""

    kernel: Kernel
    likelihood: object
    solution: object
    log_evidence: float
    stopped: bool
    loo_valid: bool
    inducing_points: np.ndarray

    @property
    def label_noise(self):
        return self.likelihood.label_noise

    def latent(self, X_train, X):
        """Predictive mean and variance of the problem's field at ``X``
        (``X_train`` is not needed: the FITC prior links new fields to the
        training fields through the inducing values only), in row blocks of
        ``X`` (``m x`` block cross-covariances of about 8 MiB)."""
        n = _num_samples(X)
        mean, var = np.empty(n), np.empty(n)
        rows = max(1, _PREDICT_BLOCK_BYTES // (8 * len(self.inducing_points)))
        for start in range(0, n, rows):
            block = X[start : start + rows]
            mean[start : start + rows], var[start : start + rows] = (
                self.solution.posterior.predict(
                    self.kernel(self.inducing_points, block), self.kernel.diag(block)
                )
            )
        return mean, var


class _Matvec:
    """``K @ alpha`` for :func:`contradicted_points` without ``K``."""

    def __init__(self, posterior):
        self.posterior = posterior

    def __matmul__(self, alpha):
        return self.posterior.matvec(alpha)


def _split(params, kernel, options, inducing, Z):
    """Kernel, options and inducing inputs at a point of the search space."""
    params = np.asarray(params, dtype=float)
    head = kernel.n_dims + int(options.learns_label_noise)
    kernel, options = _at(params[:head], kernel, options)
    if inducing.learn:
        Z = params[head:].reshape(Z.shape)
    return kernel, options, Z


def _evaluate(
    params,
    X,
    t,
    kernel,
    options,
    inducing,
    Z,
    start=None,
    eval_gradient=False,
    tol=None,
    weights=None,
    printer=None,
    blocks=None,
):
    """The :class:`~sklearn_meanfield.tap._binary_gpc._Evaluation` at
    ``params``, on the row ``blocks`` (None: here)."""
    kernel, options, Z = _split(params, kernel, options, inducing, Z)
    if blocks is None:
        blocks = row_blocks(len(X), len(Z))
    posterior = FITCPosterior.from_kernel(
        kernel, X, Z, jitter=inducing.jitter, executor=blocks
    )
    likelihood = options.make_likelihood()
    sweeps = None if printer is None else print_sweeps(printer)
    solution = _solve(
        posterior, t, likelihood, options, start, sweeps, printer, weights, tol
    )
    contradicted = contradicted_points(_Matvec(posterior), t, solution)
    if not eval_gradient:
        return _Evaluation(solution, solution.log_evidence, None, contradicted)
    # Each block contracts its own adjoint: only m x m statistics travel.
    theta_gradient, Z_gradient = fitc_search_gradient(
        solution, kernel, Z, inducing=inducing.learn
    )
    gradient = [theta_gradient]
    if options.learns_label_noise:
        d_kappa = ep_label_noise_gradient(solution, t, likelihood)
        gradient.append([options.label_noise * d_kappa])
    if inducing.learn:
        gradient.append(Z_gradient.ravel())
    gradient = np.concatenate(gradient)
    return _Evaluation(solution, solution.log_evidence, gradient, contradicted)


def log_evidence(
    params, X, t, kernel, options, inducing, Z, eval_gradient=False, weights=None
):
    """FITC-EP log evidence at a point ``params`` of the search space.

    ``params`` holds the kernel's log-hyperparameters, then
    ``log(label_noise)`` when the label noise is learned, then the inducing
    inputs (raveled) when they are learned (else ``Z`` is used); the gradient
    has the same layout.

    Parameters
    ----------
    params : ndarray
    X : ndarray of shape (n, n_features)
    t : ndarray of shape (n,)
        Labels +-1.
    kernel : scikit-learn kernel
    options : FitOptions
    inducing : InducingOptions
    Z : ndarray of shape (m, n_features)
        The inducing inputs (their shape when they are learned).
    eval_gradient : bool, default=False
    weights : ndarray of shape (n,) or None, default=None

    Returns
    -------
    float, or (float, ndarray) with ``eval_gradient``
    """
    evaluation = _evaluate(
        params, X, t, kernel, options, inducing, Z, eval_gradient=eval_gradient,
        weights=weights,
    )  # fmt: skip
    if eval_gradient:
        return evaluation.value, evaluation.gradient
    return evaluation.value


def _search_start(X, kernel, options, inducing, Z):
    """Start and bounds of the search: the exact fit's (kernel, label noise),
    then the inducing inputs within the inputs' range widened by its width
    on either side."""
    params, bounds = _search_space(kernel, options)
    if inducing.learn:
        low, high = np.min(X, axis=0), np.max(X, axis=0)
        width = np.maximum(high - low, 1e-12)
        box = np.column_stack([low - width, high + width])
        params = np.concatenate([params, Z.ravel()])
        bounds = np.vstack([bounds, np.tile(box, (len(Z), 1))])
    return params, bounds


@dataclass
class _SparseSearch(_Search):
    """The exact fit's :class:`_Search` (tolerance schedule, warm starts,
    penalised failures) evaluating the FITC-EP evidence."""

    inducing: InducingOptions = None
    Z: np.ndarray = None
    blocks: object = None

    def describe(self, params):
        """``exp`` of the kernel's (and label noise's) entries; the inducing
        inputs are not printed."""
        head = self.kernel.n_dims + int(self.options.learns_label_noise)
        text = super().describe(params[:head])
        if self.inducing.learn:
            text += f"] and [{len(self.Z)} inducing inputs"
        return text

    def evaluate(self, params, start, eval_gradient, max_iter=None):
        return _evaluate(
            params,
            self.X,
            self.t,
            self.kernel,
            _with_max_iter(self.options, max_iter),
            self.inducing,
            self.Z,
            start,
            eval_gradient=eval_gradient,
            tol=max(self.options.tol, self.tol),
            weights=self.weights,
            printer=self.printer,
            blocks=self.blocks,
        )


def validation_split(t, rng, fraction=VALIDATION_FRACTION):
    """Rows to learn on and rows held out, stratified by the label.

    Each class gives ``round(fraction * count)`` of its rows to the held-out
    set (at least one, and at least one kept to learn on when it has two or
    more rows), drawn from ``rng``.

    Parameters
    ----------
    t : ndarray of shape (n,)
        Labels.
    rng : numpy.random.RandomState
    fraction : float, default=VALIDATION_FRACTION

    Returns
    -------
    learn, held_out : ndarray of int
        Sorted row indices.

    Examples
    --------
    >>> import numpy as np
    >>> t = np.r_[-np.ones(20), np.ones(10)]
    >>> learn, held_out = validation_split(t, np.random.RandomState(0))
    >>> len(learn), len(held_out), int(np.sum(t[held_out] > 0))
    (27, 3, 1)
    """
    held_out = []
    for label in np.unique(t):
        rows = np.flatnonzero(t == label)
        size = int(np.clip(round(fraction * len(rows)), 1, max(len(rows) - 1, 1)))
        held_out.append(rng.permutation(rows)[:size])
    held_out = np.sort(np.concatenate(held_out))
    return np.setdiff1d(np.arange(len(t)), held_out), held_out


def held_out_losses(solution, kernel, likelihood, Z, X, t):
    """Each held-out row's Brier score ``(1 - p(t_i | x_i))^2`` under an EP
    solution of the sparse model (kernel, likelihood, inducing inputs
    ``Z``) fitted to other rows.

    A proper score bounded by one: the paired comparison of two models on a
    few dozen rows has the power the log-loss's heavy tail (a flipped label
    predicted with confidence) takes away."""
    mean, var = solution.posterior.predict(kernel(Z, X), kernel.diag(X))
    return _brier(likelihood.predictive_positive(mean, var), t)


def _brier(positive, t):
    """Each row's ``(1 - p(t_i))^2`` from its probability of the positive
    class."""
    return (1.0 - np.where(t > 0, positive, 1.0 - positive)) ** 2


def brier_scores(kernel, likelihood, Z, chol_mm, chol_A, mean_w, X, t):
    """:func:`held_out_losses` under the posterior ``N(mean_w, (chol_A
    chol_A^T)^-1)`` of the whitened inducing values (a stochastic search's
    ``q``), without a solution."""
    U, d = whiten_block(kernel(X, Z), kernel.diag(X), chol_mm)
    zero = np.zeros(len(X))
    mean, var, _ = block_marginals(U, d, zero, zero, chol_A, mean_w)
    return _brier(likelihood.predictive_positive(mean, var), t)


class _Patience(_Stalled):
    """The held-out Brier score has not improved for VALIDATION_PATIENCE
    evaluations: the search ends, and its choice is final."""


@dataclass
class _HeldOutSearch(_SparseSearch):
    """:class:`_SparseSearch` of the kernel and the inducing inputs on the
    rows learned on, watching the Brier score of the held-out rows (``X_out``,
    ``t_out``, weights ``w_out``) at every reliable evaluation: the point
    of lowest held-out Brier score, when :func:`significant_gain` says it beats
    the start's, is kept (``choice``: the point and its mean held-out
    Brier score)."""

    X_out: np.ndarray = None
    t_out: np.ndarray = None
    w_out: np.ndarray = None
    baseline: np.ndarray = None
    lowest: float = np.inf
    since_lowest: int = 0
    comparisons: int = 0
    choice: tuple = None

    def _record(self, theta, evaluation, eval_gradient):
        value, gradient = super()._record(theta, evaluation, eval_gradient)
        if is_reliable(evaluation):
            self._watch(theta, evaluation.solution)
        elif self.baseline is None:
            # No held-out reference at the start: the start is kept.
            raise _Patience
        self.since_lowest += 1
        if self.since_lowest > VALIDATION_PATIENCE:
            raise _Patience
        if self.evaluations >= INDUCING_SEARCH_MAX_EVALUATIONS:
            warnings.warn(
                "The inducing-input search reached its budget of "
                f"{INDUCING_SEARCH_MAX_EVALUATIONS} evaluations; the point of lowest "
                "held-out Brier score is used.",
                ConvergenceWarning,
            )
            raise _Patience
        return value, gradient

    def held_out_losses(self, solution, kernel, options, Z):
        """The held-out rows' Brier scores under ``solution``."""
        likelihood = options.make_likelihood()
        return held_out_losses(solution, kernel, likelihood, Z, self.X_out, self.t_out)

    def _watch(self, theta, solution):
        kernel, options, Z = _split(
            theta, self.kernel, self.options, self.inducing, self.Z
        )
        losses = self.held_out_losses(solution, kernel, options, Z)
        mean = _mean(losses, self.w_out)
        if self.baseline is None:
            self.baseline, self.lowest, self.since_lowest = losses, mean, -1
            return
        if mean < self.lowest:
            self.lowest, self.since_lowest = mean, -1
            self.comparisons += 1
            if significant_gain(self.baseline, losses, self.w_out, self.comparisons):
                self.choice = (np.array(theta, dtype=float), mean)


def significant_gain(baseline, losses, weights, comparisons):
    """Whether held-out Brier scores ``losses`` beat the ``baseline`` ones.

    The (weighted) mean of the paired per-row gains ``baseline - losses``
    must exceed ``z`` times its standard error, ``z = max(
    VALIDATION_SIGNIFICANCE, sqrt(2 ln comparisons))``: the threshold grows
    as the largest of ``comparisons`` normal draws, since every new lowest
    point along the search is one more comparison with the start.

    Parameters
    ----------
    baseline, losses : ndarray of shape (n,)
    weights : ndarray of shape (n,) or None
    comparisons : int
        How many points have been compared with the start, this one included.

    Returns
    -------
    bool

    Examples
    --------
    >>> import numpy as np
    >>> base, wave = np.full(100, 0.5), np.sin(np.arange(100))
    >>> significant_gain(base, base - 0.01 + 0.01 * wave, None, comparisons=1)
    True
    >>> significant_gain(base, base - 0.001 + 0.1 * wave, None, comparisons=1)
    False
    """
    gain = np.asarray(baseline) - np.asarray(losses)
    average = _mean(gain, weights)
    error = np.sqrt(_mean((gain - average) ** 2, weights) / len(gain))
    threshold = max(VALIDATION_SIGNIFICANCE, np.sqrt(2.0 * np.log(comparisons)))
    return bool(average > threshold * error)


def _mean(values, weights):
    return float(np.average(values, weights=weights))


def _amplitude_capped(bounds, theta, kernel):
    """``bounds`` with the upper bound of every ``ConstantKernel``'s
    ``constant_value`` (the kernel's amplitudes) lowered to its value in
    ``theta``."""
    bounds = np.array(bounds, dtype=float)
    index = 0
    for hyperparameter in kernel.hyperparameters:
        if hyperparameter.fixed:
            continue
        size = hyperparameter.n_elements
        if hyperparameter.name.endswith("constant_value"):
            stop = index + size
            bounds[index:stop, 1] = np.minimum(bounds[index:stop, 1], theta[index:stop])
        index += size
    return bounds


class _HeldOutStart(NamedTuple):
    """Where the search of the kernel and the inducing inputs starts: the
    rows it learns on and the held-out ones with their weights (None when
    unweighted), the starting point and the search's bounds."""

    learn: np.ndarray
    out: np.ndarray
    w_learn: np.ndarray
    w_out: np.ndarray
    point: np.ndarray
    bounds: np.ndarray


def _held_out_start(best, X, t, kernel, options, inducing, Z, rng, weights):
    """The :class:`_HeldOutStart` from the fixed-input optimum ``best``: a
    stratified split drawn from ``rng``, the point ``best`` with the inputs
    ``Z``, and the bounds with every amplitude capped at its value there."""
    learn, out = validation_split(t, rng)
    w_learn = None if weights is None else weights[learn]
    w_out = None if weights is None else weights[out]
    point, bounds = _search_start(X, kernel, options, inducing, Z)
    head = kernel.n_dims + int(options.learns_label_noise)
    point[:head] = best.theta
    # FITC's over-fitting of the inputs inflates the amplitude: it may not
    # grow beyond its optimum at the starting inputs.
    bounds[:head] = _amplitude_capped(bounds[:head], point[:head], kernel)
    return _HeldOutStart(learn, out, w_learn, w_out, point, bounds)


def _report_inducing_choice(reporter, scores=None):
    """Report the inducing-input search's outcome: ``scores`` the learned
    point's and the start's mean held-out Brier scores, None when the start
    is kept."""
    if scores is None:
        reporter(1, "inducing inputs: no significant held-out gain; kept at the start")
    else:
        message = "inducing inputs learned: held-out Brier score %.4f (start %.4f)"
        reporter(1, message, *scores)


def _learn_inducing_points(best, X, t, kernel, options, inducing, Z, rng, reporter,
                           weights, client, search_type=None, fields=None):  # fmt: skip
    """The inducing inputs learned with the kernel from the fixed-input
    optimum ``best``, on all but a held-out share of the rows (see
    ``VALIDATION_FRACTION``); the start when no point of the search lowers
    the held-out Brier score significantly.  Returns the point of the search
    space (kernel, label noise, inducing inputs), the sites to warm-start
    the final solve from (None for a learned point: they are the learning
    rows' only) and whether a callback asked to stop.  ``search_type``
    (default :class:`_HeldOutSearch`, with its extra ``fields``) is the
    model's held-out search."""
    learn, out, w_learn, w_out, start, bounds = _held_out_start(
        best, X, t, kernel, options, inducing, Z, rng, weights
    )
    search = (search_type or _HeldOutSearch)(
        X[learn], t[learn], kernel, options, w_learn,
        reporter.task.subtask("inducing-input search", max_steps=None), theta=start,
        printer=_evaluation_printer(options), bounds=bounds, inducing=inducing, Z=Z,
        blocks=row_blocks(len(learn), len(Z), client), X_out=X[out], t_out=t[out],
        w_out=w_out, **(fields or {}),
    )  # fmt: skip
    stopped = _drive_search(search, start).stopped
    if search.choice is None:
        _report_inducing_choice(reporter)
        return start, best.sites, stopped
    _report_inducing_choice(reporter, (search.choice[1], _mean(search.baseline, w_out)))
    return search.choice[0], None, stopped


class _HeldOutScores:
    """The held-out rows' Brier scores under a stochastic search's ``q``
    (:func:`brier_scores`), as its ``validation``: each call returns their
    (weighted) mean, and the per-row scores of the lowest mean so far are
    kept, with the count of new lowest ones (comparisons with the start)."""

    def __init__(self, X_out, t_out, w_out, m):
        self.X_out, self.t_out, self.w_out = X_out, t_out, w_out
        self.block_size = _default_block_size(None, m)
        self.losses, self.lowest, self.comparisons = None, np.inf, 0

    def scores(self, kernel, likelihood, Z, chol_mm, chol_A, mean_w):
        """The per-row Brier scores under ``q``, a block of rows at a time."""
        return np.concatenate([
            brier_scores(
                kernel, likelihood, Z, chol_mm, chol_A, mean_w,
                self.X_out[block], self.t_out[block],
            )
            for block in _blocks(len(self.X_out), self.block_size)
        ])  # fmt: skip

    def __call__(self, *q):
        losses = self.scores(*q)
        mean = _mean(losses, self.w_out)
        if mean < self.lowest:
            self.losses, self.lowest = losses, mean
            self.comparisons += 1
        return mean


def _learn_inducing_points_stochastic(best, X, t, kernel, options, inducing, Z, rng,
                                      reporter, weights, client):  # fmt: skip
    """:func:`_learn_inducing_points` by one stochastic search on the
    learning rows (at most :data:`INDUCING_SEARCH_MAX_SAMPLES` of them, a
    random subset), from the fixed-input optimum ``best`` (a stochastic
    search's, over all rows) and its sites.  The search scores its ``q`` on
    the held-out rows and ends at the lowest score (:class:`_HeldOutScores`);
    that point is kept when its held-out Brier scores beat those of the
    start's ``q`` by :func:`significant_gain` (without sites to start from,
    full-batch EP at the start on ``client``'s workers gives the start's).
    The same returns; a learned point's sites are the search's on its rows
    and zero on the others."""
    learn, out, _, w_out, start, bounds = _held_out_start(
        best, X, t, kernel, options, inducing, Z, rng, weights
    )
    if len(learn) > INDUCING_SEARCH_MAX_SAMPLES:
        learn = np.sort(rng.choice(learn, INDUCING_SEARCH_MAX_SAMPLES, replace=False))
    w_learn = None if weights is None else weights[learn]
    seed = int(rng.randint(np.iinfo(np.int32).max))
    X_learn, t_learn = X[learn], t[learn]
    task = reporter.task.subtask("inducing-input search", max_steps=None)
    held_out = _HeldOutScores(X[out], t[out], w_out, len(Z))
    start_sites = None
    if best.sites is not None:
        start_sites = [(tau[learn], nu[learn]) for tau, nu in best.sites]
    run = _stochastic_run(
        start, seed, X_learn, t_learn, kernel, options, inducing, Z, bounds,
        _search_scales(X, start, kernel, options, inducing), w_learn, task,
        evaluate=False, sites=None if start_sites is None else start_sites[0],
        validation=held_out,
    )  # fmt: skip
    if run.stopped:
        return start, best.sites, True
    kernel_at, options_at, Z_at = _split(start, kernel, options, inducing, Z)
    likelihood = options_at.make_likelihood()
    if start_sites is None:
        evaluation = _evaluate(
            start, X_learn, t_learn, kernel, options, inducing, Z, weights=w_learn,
            blocks=row_blocks(len(learn), len(Z), client),
        )  # fmt: skip
        baseline = None
        if is_reliable(evaluation):
            baseline = held_out_losses(
                evaluation.solution, kernel_at, likelihood, Z_at, X[out], t[out]
            )
    else:
        chol_mm, _ = inducing_cholesky(kernel_at(Z_at), inducing.jitter)
        precision, shift = site_statistics(
            X_learn, kernel_at, Z_at, chol_mm, *start_sites[0], held_out.block_size
        )
        chol_A, mean_w, _ = combine_site_statistics(precision, shift, 0.0)
        baseline = held_out.scores(kernel_at, likelihood, Z_at, chol_mm, chol_A, mean_w)
    losses = held_out.losses
    if (
        baseline is None
        or losses is None
        or not significant_gain(baseline, losses, w_out, held_out.comparisons)
    ):
        _report_inducing_choice(reporter)
        return start, best.sites, False
    _report_inducing_choice(reporter, (_mean(losses, w_out), _mean(baseline, w_out)))
    sites = []
    for tau_learn, nu_learn in run.sites:
        tau, nu = np.zeros(len(t)), np.zeros(len(t))
        tau[learn], nu[learn] = tau_learn, nu_learn
        sites.append((tau, nu))
    return run.theta, sites, False


def _optimise(
    X, t, kernel, options, inducing, Z, rng, n_jobs, reporter, weights, blocks
):
    """The best of the optimiser runs: the first from the kernel's own
    hyperparameters, the others from random hyperparameters within the
    bounds (drawn here, before dispatch); all from the same inducing inputs.
    With row blocks on a Dask cluster the runs take turns here (each
    evaluation is spread over the cluster's blocks)."""
    start, bounds = _search_start(X, kernel, options, inducing, Z)
    head = kernel.n_dims + int(options.learns_label_noise)
    check_restart_bounds(options, bounds[:head])
    starts = [start]
    for _ in range(options.n_restarts_optimizer):
        draw = start.copy()
        draw[:head] = rng.uniform(bounds[:head, 0], bounds[:head, 1])
        starts.append(draw)
    fields = {"inducing": inducing, "Z": Z, "blocks": blocks}
    distributed = isinstance(blocks, DaskBlocks)
    with parallel_config(backend="sequential") if distributed else nullcontext():
        return best_optimiser_run(
            starts,
            lambda s, task: (
                (s, X, t, kernel, options, task, weights, bounds, _SparseSearch, fields)
            ),
            1 if distributed else n_jobs,
            reporter,
        )


def _stochastic_run(start, seed, X, t, kernel, options, inducing, Z, bounds, scales,
                    weights, task, evaluate, sites=None,
                    validation=None):  # fmt: skip
    """One stochastic search (:func:`~._stochastic_ep.stochastic_search`,
    from ``sites``, scored by ``validation``) as an :class:`_OptimizerRun`;
    with ``evaluate``, its full-batch EP evidence (warm-started from its
    sites) ranks it among the restarts."""
    printer = _evaluation_printer(options)

    def at(point):
        kernel_at, options_at, Z_at = _split(point, kernel, options, inducing, Z)
        return kernel_at, options_at.make_likelihood(), Z_at

    with task:
        run = stochastic_search(
            start, bounds, scales, at, X, t, weights,
            jitter=inducing.jitter, damping=options.damping,
            learns_label_noise=options.learns_label_noise,
            learns_inducing=inducing.learn, seed=seed, task=task, printer=printer,
            max_epochs=options.max_iter, sites=sites, validation=validation,
        )  # fmt: skip
    if not (run.converged or run.stopped):
        used = (
            "the last window's mean point"
            if validation is None
            else "the point of lowest held-out score"
        )
        warnings.warn(
            f"The stochastic EP search did not settle in {run.epochs} epochs "
            f"(its budget); {used} is used.",
            ConvergenceWarning,
        )
    sites = [(run.tau, run.nu)]
    value = np.nan
    if evaluate:
        evaluation = _evaluate(
            run.point, X, t, kernel, options, inducing, Z, start=sites,
            weights=weights,
        )  # fmt: skip
        converged = evaluation.solution.converged
        value = evaluation.value if converged else -np.inf
    return _OptimizerRun(run.point, -value, sites, run.stopped)


def uses_stochastic_search(options, n):
    """Whether a sparse fit of ``n`` rows searches by stochastic EP:
    ``optimizer="stochastic"``, or ``"auto"`` above
    :data:`STOCHASTIC_MIN_SAMPLES` rows."""
    if options.stochastic == "auto":
        return n > STOCHASTIC_MIN_SAMPLES
    return bool(options.stochastic)


def _search_scales(X, point, kernel, options, inducing):
    """The units of the stochastic search's steps: one for the
    log-hyperparameters, each input's spread for the inducing inputs."""
    scales = np.ones(len(point))
    if inducing.learn:
        head = kernel.n_dims + int(options.learns_label_noise)
        spread = np.maximum(np.std(X, axis=0), 1e-12)
        scales[head:] = np.tile(spread, (len(point) - head) // X.shape[1])
    return scales


def _stochastic_optimise(X, t, kernel, options, inducing, Z, rng, n_jobs, reporter,
                         weights):  # fmt: skip
    """The best of the stochastic searches: the first from the kernel's own
    hyperparameters, the others from random ones within the bounds; their
    starts and minibatch seeds drawn here, before dispatch.  With restarts,
    each search's full-batch evidence at its end ranks it."""
    start, bounds = _search_start(X, kernel, options, inducing, Z)
    head = kernel.n_dims + int(options.learns_label_noise)
    check_restart_bounds(options, bounds[:head])
    scales = _search_scales(X, start, kernel, options, inducing)
    starts, seeds = [], []
    for run in range(1 + options.n_restarts_optimizer):
        draw = start.copy()
        if run:
            draw[:head] = rng.uniform(bounds[:head, 0], bounds[:head, 1])
        starts.append(draw)
        seeds.append(int(rng.randint(np.iinfo(np.int32).max)))
    tasks = reporter.task.subtasks(len(starts), "optimiser run", max_steps=None)
    evaluate = len(starts) > 1
    runs = run_parallel(
        _stochastic_run,
        [
            (
                s,
                seed,
                X,
                t,
                kernel,
                options,
                inducing,
                Z,
                bounds,
                scales,
                weights,
                task,
                evaluate,
            )  # fmt: skip
            for s, seed, task in zip(starts, seeds, tasks)
        ],
        n_jobs=n_jobs,
    )
    index, best = select_best(runs, key=lambda run: -run.neg_log_evidence)
    if evaluate:
        reporter(
            1,
            "best of %d stochastic search(es): log evidence %.4f (run %d)",
            len(runs),
            -best.neg_log_evidence,
            index,
        )
    return best, any(run.stopped for run in runs)


def fit_sparse_binary(
    X, t, kernel, options, seed, n_jobs, task=None, weights=None, *, inducing,
    client=None,
):  # fmt: skip
    """Fit one binary problem on the FITC prior of inducing inputs.

    The arguments and the result's interface are those of
    :func:`~sklearn_meanfield.tap._binary_gpc.fit_binary`, plus
    ``inducing`` (an :class:`InducingOptions`) and ``client``: a Dask client
    on whose workers the row blocks live (every EP sweep maps over them and
    only ``m x m`` statistics and the blocks' site vectors travel; the
    restarts then run one after the other here), or None (here).  The
    k-means seed and the restarts' starting hyperparameters are drawn from
    ``seed`` before any work is dispatched, so the result does not depend
    on ``n_jobs``, nor on where the blocks live beyond rounding.

    Returns
    -------
    SparseBinaryFit
    """
    X = np.asarray(X, dtype=float)
    rng = np.random.RandomState(seed)
    kmeans_seed = int(rng.randint(np.iinfo(np.int32).max))
    reporter = ProgressReporter(options.verbose, options.prefix, task=task)
    with reporter.task, blas_threads_for_matrix(min(len(X), 4 * inducing.n_inducing)):
        Z = initial_inducing_points(X, inducing, kmeans_seed, weights)
        blocks = row_blocks(len(X), len(Z), client)
        stopped = False
        sites = None
        if options.optimizer is not None and (
            kernel.n_dims > 0 or options.learns_label_noise or inducing.learn
        ):
            stochastic = uses_stochastic_search(options, len(X))
            # The kernel first, at the starting inducing inputs; then, when
            # they are learned, both, watched on held-out rows.
            fixed = replace(inducing, learn=False)
            if kernel.n_dims > 0 or options.learns_label_noise:
                if stochastic:
                    best, stopped = _stochastic_optimise(
                        X, t, kernel, options, fixed, Z, rng, n_jobs, reporter,
                        weights,
                    )  # fmt: skip
                else:
                    best, stopped = _optimise(
                        X, t, kernel, options, fixed, Z, rng, n_jobs, reporter,
                        weights, blocks,
                    )  # fmt: skip
            else:
                best = _OptimizerRun(np.empty(0), np.nan, None, False)
            point, sites = best.theta, best.sites
            if inducing.learn and not stopped:
                learn_inputs = (
                    _learn_inducing_points_stochastic
                    if stochastic
                    else _learn_inducing_points
                )
                point, sites, stopped = learn_inputs(
                    best, X, t, kernel, options, inducing, Z, rng, reporter,
                    weights, client,
                )  # fmt: skip
            elif inducing.learn:
                point = np.concatenate([point, Z.ravel()])
            kernel, options, Z = _split(point, kernel, options, inducing, Z)
            if not stopped:
                _warn_at_bounds(kernel, options)
        else:
            kernel = kernel.clone_with_theta(kernel.theta)
        posterior = FITCPosterior.from_kernel(
            kernel, X, Z, jitter=inducing.jitter, executor=blocks
        )
        likelihood = options.make_likelihood()
        solution, evidence, stopped = _final_solve(
            posterior, t, likelihood, options, sites, stopped, reporter, weights
        )
        loo_valid = settle_final_solution(
            _Matvec(posterior), t, solution, options, stopped
        )
    return SparseBinaryFit(
        kernel=kernel,
        likelihood=likelihood,
        solution=solution,
        log_evidence=evidence,
        stopped=stopped,
        loo_valid=loo_valid,
        inducing_points=np.array(Z, dtype=float),
    )
