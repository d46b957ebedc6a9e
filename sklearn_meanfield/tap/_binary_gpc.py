"""Fitting one binary problem of the TAP Gaussian-process classifier.

The estimator (:mod:`~sklearn_meanfield.tap.gpc`) validates, dispatches
the binary problems (one-vs-rest, one-vs-one) to workers and stores what
they return; this module is what a worker runs, as scikit-learn's
``_BinaryGaussianProcessClassifierLaplace`` is to its shell:

* :class:`FitOptions`, the validated parameters, built once per fit;
* the evidence of a point of the search space (kernel hyperparameters and,
  with ``label_noise="auto"``, the log label noise), with its gradient
  (:func:`_evaluate`);
* the optimiser strategy: EP warm-started from the secant of the last two
  evaluations, a tolerance that tightens with the gradient, failed
  evaluations penalised (:class:`_Search`, :func:`_run_optimizer`), and
  restarts in parallel (:func:`_optimise`);
* the final solve at the fitted kernel and its warnings, giving a
  :class:`BinaryFit` (:func:`fit_binary`).
"""

import warnings
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import Kernel
from sklearn.utils.validation import _num_samples

from .._parallel import blas_threads_for_matrix, run_parallel, select_best
from .._progress import ProgressReporter
from ._evidence import ep_evidence_gradient, ep_label_noise_gradient
from ._fallback import ep_with_fallback
from ._hooks import print_sweeps, sweep_steps
from ._kernels import (
    BINDING_AMPLITUDE_SLOPE,
    ignores_inputs,
    length_scale_outside_bounds,
    with_length_scale,
    with_lifted_amplitude,
)
from ._likelihoods import LABEL_NOISE_BOUNDS, make_likelihood
from ._mean_field import PriorVariance, mean_field_iteration
from ._posterior import KernelPosterior

__all__ = [
    "LABEL_NOISE_BOUNDS",
    "BinaryFit",
    "BinaryProblem",
    "FitOptions",
    "contradicted_points",
    "fit_binary",
    "is_reliable",
    "log_evidence",
]


class _StopRequested(Exception):
    """A scikit-learn callback asked the fit to stop (at an evaluation)."""


class _Stalled(Exception):
    """The optimiser's steps shrank below what EP resolves (see
    ``_STALL_STEP``): its best point is the optimum."""


@dataclass(frozen=True)
class FitOptions:
    """The validated parameters a binary problem's fit reads, built once in fit.

    ``label_noise`` is the fixed label noise, or, when it is learned
    (``learns_label_noise``), None until the search has a value for it: the
    optimiser's points carry their own (:func:`_at`).
    """

    likelihood: str
    label_noise: float | None
    learns_label_noise: bool
    method: str
    optimizer: object
    n_restarts_optimizer: int
    max_iter: int
    tol: float
    damping: float
    verbose: int = 0
    prefix: str = "TAPGaussianProcessClassifier"
    default_kernel: bool = False
    """Whether the kernel is the estimator's default (``kernel=None``)."""
    stochastic: object = False
    """Sparse mode: search by stochastic EP (True), by ``optimizer`` (False),
    or by stochastic EP above a row count ("auto")."""

    def make_likelihood(self):
        """The likelihood object of these options' label noise."""
        return make_likelihood(self.likelihood, self.label_noise)


class BinaryProblem(NamedTuple):
    """One binary problem: its rows of the training set (None: all), its
    +-1 targets and its site weights (None: all one)."""

    rows: object
    t: np.ndarray
    weights: object


class BinaryFit(NamedTuple):
    """A fitted binary problem (what a worker returns, and predict reads)."""

    kernel: Kernel
    likelihood: object
    solution: object
    log_evidence: float
    stopped: bool
    loo_valid: bool  # only the cavities of a fixed point are leave-one-out

    @property
    def label_noise(self):
        return self.likelihood.label_noise

    def latent(self, X_train, X):
        """Predictive mean and variance of the problem's field at ``X``."""
        K_cross = self.kernel(X_train, X)
        mean = K_cross.T @ self.solution.alpha
        reduction = self.solution.posterior.variance_reduction(K_cross)
        return mean, np.maximum(self.kernel.diag(X) - reduction, 0.0)


class _Evaluation(NamedTuple):
    """The EP solution at one point of the search, its evidence and gradient
    (None unless asked) and :func:`contradicted_points`."""

    solution: object
    value: float
    gradient: object
    contradicted: int


def _solve(
    posterior, t, likelihood, options, start, on_iteration, log, weights, tol=None
):
    """Run EP (adaptive TAP) on a posterior, fractional EP where it stalls.

    ``posterior`` is a :class:`~sklearn_meanfield.tap._posterior.KernelPosterior`
    (the exact model) or a compatible one (the sparse model's
    :class:`~sklearn_meanfield.tap._sparse.FITCPosterior`).
    ``start`` holds warm-start sites (see
    :func:`~sklearn_meanfield.tap._ep.expectation_propagation`),
    ``on_iteration`` sees every sweep (and may stop the solve at its best
    iterate), ``log`` prints the fallback's notices; ``weights`` are the site
    weights (None: all one).  The step likelihood falls back on fractional
    EP when plain EP stalls
    (:func:`~sklearn_meanfield.tap._fallback.ep_with_fallback`).
    """
    return ep_with_fallback(
        posterior,
        t,
        likelihood,
        start=start,
        max_iter=options.max_iter,
        tol=options.tol if tol is None else tol,
        damping=options.damping,
        on_iteration=on_iteration,
        log=log,
        site_weights=weights,
    )


def _naive_solve(posterior, t, likelihood, options, on_iteration=None, weights=None):
    """Naive mean field (the cavity variance is the prior variance)."""
    return mean_field_iteration(
        posterior,
        t,
        likelihood,
        PriorVariance(posterior.prior_var.copy()),
        max_iter=options.max_iter,
        tol=options.tol,
        damping=min(options.damping, 0.2),
        on_iteration=on_iteration,
        site_weights=weights,
    )


# ``label_noise="auto"``: the label noise is searched on a log scale within
# LABEL_NOISE_BOUNDS, from this start, as one more hyperparameter.
_LABEL_NOISE_START = 0.01


def _search_space(kernel, options):
    """Start and bounds of the optimiser: the kernel's log-hyperparameters,
    then ``log(label_noise)`` when it is learned."""
    # A kernel without free hyperparameters has bounds of shape (0,).
    theta, bounds = kernel.theta, np.reshape(kernel.bounds, (-1, 2))
    if options.learns_label_noise:
        theta = np.append(theta, np.log(_LABEL_NOISE_START))
        bounds = np.vstack([bounds, np.log(LABEL_NOISE_BOUNDS)])
    return theta, bounds


def _at(theta, kernel, options):
    """The kernel and the options (with the label noise's value) at a point
    ``theta`` of the search space."""
    theta = np.asarray(theta, dtype=float)
    if not options.learns_label_noise:
        return kernel.clone_with_theta(theta), options
    label_noise = float(np.exp(theta[-1]))
    return kernel.clone_with_theta(theta[:-1]), replace(
        options, label_noise=label_noise
    )


def log_evidence(theta, X, t, kernel, options, eval_gradient=False, weights=None):
    """TAP (EP) log evidence at a point ``theta`` of the search space.

    ``theta`` holds the kernel's log-hyperparameters and, when the label noise
    is learned, ``log(label_noise)`` last; the gradient has the same layout.
    """
    evaluation = _evaluate(
        theta, X, t, kernel, options, eval_gradient=eval_gradient, weights=weights
    )
    if eval_gradient:
        return evaluation.value, evaluation.gradient
    return evaluation.value


def _evaluate(
    theta,
    X,
    t,
    kernel,
    options,
    start=None,
    eval_gradient=False,
    tol=None,
    weights=None,
    printer=None,
):
    """The :class:`_Evaluation` of the EP solution at ``theta``."""
    kernel, options = _at(theta, kernel, options)
    if eval_gradient:
        K, K_gradient = kernel(X, eval_gradient=True)
    else:
        K = kernel(X)
    likelihood = options.make_likelihood()
    sweeps = None if printer is None else print_sweeps(printer)
    solution = _solve(
        KernelPosterior(K), t, likelihood, options, start, sweeps, printer, weights, tol
    )
    contradicted = contradicted_points(K, t, solution)
    if not eval_gradient:
        return _Evaluation(solution, solution.log_evidence, None, contradicted)
    gradient = ep_evidence_gradient(solution, K_gradient)
    if len(theta) > kernel.n_dims:
        # The evidence is stationary in the sites: only log Z moves with the
        # label noise (weights included).  d/dlog(kappa) = kappa d/dkappa.
        d_kappa = ep_label_noise_gradient(solution, t, likelihood)
        gradient = np.append(gradient, options.label_noise * d_kappa)
    return _Evaluation(solution, solution.log_evidence, gradient, contradicted)


# While the optimiser is far from a stationary point the EP equations are
# solved only to GRADIENT_RELATIVE_TOL times the size of the last gradient
# (at most LOOSEST_TOL): the gradient's error is of the order of the EP
# residual, and the evidence's error of its square (the EP evidence is
# stationary in the sites).  Near the optimum the tolerance tightens to
# ``tol``.  Components of the gradient that push against a bound do not
# count: an amplitude held at its upper bound (saturated likelihood) would
# otherwise keep the tolerance loose while the free hyperparameters'
# gradient, inaccurate at that tolerance, keeps L-BFGS-B from converging.
_GRADIENT_RELATIVE_TOL = 1e-4
_LOOSEST_TOL = 1e-3
# _STALL_COUNT steps in a row below _STALL_STEP in every log-hyperparameter
# end a search at its best point.  The gradient, computed from sites
# converged to ``tol``, is not accurate enough for L-BFGS-B's tolerance on
# it, and its line search then shrinks the step towards rounding, each
# evaluation a full posterior solve (14 of 37 evaluations of the multinomial
# model on 600 digits).  A step of 1e-7 changes the kernel by 1e-7.
_STALL_STEP = 1e-7
_STALL_COUNT = 3


class _Sites(NamedTuple):
    """The sites of a reliable evaluation at ``theta``."""

    theta: np.ndarray
    tau: np.ndarray
    nu: np.ndarray


def _extrapolate_sites(history, theta):
    """Warm-start sites at ``theta`` from the last two evaluations.

    The sites are moved along the secant of the last optimiser step, projected
    on ``theta``'s displacement (line searches and L-BFGS steps mostly
    continue in that direction), which halves the EP sweeps per evaluation.
    Site precisions keep their sign (a non-negative one stays non-negative).
    Negative ones, from label noise, may make the extrapolated posterior
    improper: the last sites are then the fallback.  Returns EP's warm
    starts, a list of ``(tau, nu)`` pairs.
    """
    if not history:
        return []
    last = history[-1]
    if len(history) < 2:
        return [(last.tau, last.nu)]
    previous = history[0]
    step = last.theta - previous.theta
    length = step @ step
    if not length > 0:
        return [(last.tau, last.nu)]
    # Within one step beyond either end: an extrapolation, not a leap.
    c = float(np.clip((np.asarray(theta) - last.theta) @ step / length, -2.0, 1.0))
    tau = last.tau + c * (last.tau - previous.tau)
    tau = np.where(last.tau < 0, np.minimum(tau, 0.0), np.maximum(tau, 0.0))
    return [(tau, last.nu + c * (last.nu - previous.nu)), (last.tau, last.nu)]


class _OptimizerRun(NamedTuple):
    """One optimiser run's optimum, its negative log evidence, the sites of
    its best evaluation (a warm start for the final solve), whether a
    callback asked to stop (then the best point evaluated so far) and the
    log evidence's gradient at the optimum (None when not evaluated)."""

    theta: np.ndarray
    neg_log_evidence: float
    sites: object
    stopped: bool
    gradient: np.ndarray = None


def _with_max_iter(options, max_iter):
    """``options`` with at most ``max_iter`` sweeps (None: unchanged)."""
    return options if max_iter is None else replace(options, max_iter=max_iter)


def free_gradient(theta, gradient, bounds):
    """The gradient of a maximised function without its components that
    push against a bound: the optimiser cannot follow them, so they do not
    measure how far it is from its optimum.

    Examples
    --------
    >>> import numpy as np
    >>> bounds = np.array([[0.0, 1.0], [0.0, 1.0]])
    >>> free_gradient(np.array([1.0, 1.0]), np.array([2.0, -3.0]), bounds)
    array([ 0., -3.])
    """
    gradient = np.asarray(gradient, dtype=float)
    if bounds is None:
        return gradient
    theta = np.asarray(theta, dtype=float)
    at_upper = (theta >= bounds[:, 1]) & (gradient > 0)
    at_lower = (theta <= bounds[:, 0]) & (gradient < 0)
    return np.where(at_upper | at_lower, 0.0, gradient)


def is_reliable(evaluation):
    """Whether an :class:`_Evaluation` is a converged, consistent EP
    solution with a finite evidence (and gradient)."""
    gradient = evaluation.gradient
    return bool(
        evaluation.solution.converged
        and not evaluation.contradicted
        and np.isfinite(evaluation.value)
        and (gradient is None or np.all(np.isfinite(gradient)))
    )


# An evaluation whose EP did not converge (plain and fractional EP stalled:
# typically the noise-free step on a kernel that cannot separate the data
# without huge fields), or whose solution is degenerate (its fitted means
# contradict its cavities, see contradicted_points: a loose tolerance can
# pass a stalled iterate), has no meaningful evidence or gradient.  The optimiser
# sees it as this much worse than the best evaluation so far, with a zero
# gradient, so that its line search backs off (an infinite value would end
# L-BFGS-B at once, reporting convergence at its start).
_FAILED_EVALUATION_PENALTY = 1e3


@dataclass
class _Search:
    """The objective of one optimiser run and what it has learned so far:
    the EP tolerance, the best evaluation and the last two reliable sites."""

    X: object
    t: np.ndarray
    kernel: Kernel
    options: FitOptions
    weights: object
    task: object
    theta: np.ndarray
    printer: object = None
    tol: float = _LOOSEST_TOL
    best: float = np.inf
    sites: object = None
    gradient: np.ndarray = None
    """The log evidence's gradient at ``theta``, the best evaluation."""
    evaluations: int = 0
    history: list = field(default_factory=list)
    last: tuple = None
    """``(theta, value, gradient)`` the optimiser last saw."""
    bounds: np.ndarray = None
    """The search space's bounds, ``(n_params, 2)``, or None."""
    stalled_steps: int = 0

    def evaluate(self, theta, start, eval_gradient, max_iter=None):
        """The :class:`_Evaluation` at ``theta`` from warm starts ``start``,
        in at most ``max_iter`` sweeps (None: the options' own); a subclass
        evaluates another model's evidence."""
        return _evaluate(
            theta,
            self.X,
            self.t,
            self.kernel,
            _with_max_iter(self.options, max_iter),
            start,
            eval_gradient=eval_gradient,
            tol=max(self.options.tol, self.tol),
            weights=self.weights,
            printer=self.printer,
        )

    def describe(self, theta):
        """``exp(theta)`` as the verbose lines print it."""
        return ", ".join(f"{x:.4g}" for x in np.exp(theta))

    def __call__(self, theta, eval_gradient=True):
        last = self.last
        if (
            last is not None
            and np.max(np.abs(np.asarray(theta) - last[0])) < _STALL_STEP
        ):
            self.stalled_steps += 1
            if self.stalled_steps >= _STALL_COUNT:
                raise _Stalled
        else:
            self.stalled_steps = 0
        if (
            last is not None
            and np.array_equal(theta, last[0])
            and (last[2] is not None or not eval_gradient)
        ):
            # L-BFGS-B repeats a point whose line search ends on a bound: the
            # same answer, without solving again.
            self.evaluations += 1
            if self.task.step("evaluation"):
                raise _StopRequested
            return last[1] if not eval_gradient else (last[1], last[2])
        start = _extrapolate_sites(self.history, theta)
        if start:
            # Sites from far away (a long first step of the line search) can
            # hold EP where a cold start converges: a warm start gets a
            # quarter of the sweeps, then a cold start all of them.
            max_iter = max(25, self.options.max_iter // 4)
            evaluation = self.evaluate(theta, start, eval_gradient, max_iter)
        if not start or not evaluation.solution.converged:
            evaluation = self.evaluate(theta, [], eval_gradient)
        self.evaluations += 1
        value, gradient = self._record(theta, evaluation, eval_gradient)
        self.last = (
            np.array(theta, dtype=float),
            -value,
            None if gradient is None else -gradient,
        )
        if self.task.step("evaluation"):
            raise _StopRequested
        if eval_gradient:
            return -value, -gradient
        return -value

    def _record(self, theta, evaluation, eval_gradient):
        """Keep a reliable evaluation; penalise the others (see
        ``_FAILED_EVALUATION_PENALTY``).  Returns the value and gradient the
        optimiser sees."""
        solution, value, gradient = evaluation[:3]
        reliable = is_reliable(evaluation)
        if self.printer is not None:
            self.printer(
                1,
                "evaluation %d: log evidence %.4f at theta [%s] (%d sweeps%s)",
                self.evaluations,
                value,
                self.describe(theta),
                solution.n_iter,
                "" if reliable else ", not converged or degenerate: rejected",
            )
        if reliable:
            if eval_gradient:
                scale = np.max(np.abs(free_gradient(theta, gradient, self.bounds)))
                self.tol = min(_GRADIENT_RELATIVE_TOL * scale, _LOOSEST_TOL)
            sites = _Sites(np.array(theta), solution.tau, solution.nu)
            self.history[:] = self.history[-1:] + [sites]
            if -value < self.best:
                self.best = -value
                self.theta = np.array(theta, dtype=float)
                self.sites = [(solution.tau, solution.nu)]
                self.gradient = gradient
            return value, gradient
        reference = self.best
        if not np.isfinite(reference):  # nothing better known yet
            reference = -value if np.isfinite(value) else 0.0
        value = -(reference + _FAILED_EVALUATION_PENALTY * (1.0 + abs(reference)))
        if not np.isfinite(self.best) and gradient is not None:
            gradient = np.where(np.isfinite(gradient), gradient, 0.0)
        elif gradient is not None:
            gradient = np.zeros_like(gradient)
        return value, gradient


def _run_optimizer(
    initial_theta,
    X,
    t,
    kernel,
    options,
    task,
    weights,
    bounds=None,
    search_class=None,
    search_fields=None,
):
    """One optimiser run from ``initial_theta``; EP warm-starts along the path.

    Returns an :class:`_OptimizerRun`.  ``task`` (a
    :class:`~sklearn_meanfield._progress.CallbackTask`) gets a step per
    evidence evaluation.  ``bounds`` (None: :func:`_search_space`'s),
    ``search_class`` (None: :class:`_Search`) and its extra
    ``search_fields`` let another model's search (the sparse fit's) run
    the same strategy.
    """
    if bounds is None:
        _, bounds = _search_space(kernel, options)
    search = (search_class or _Search)(
        X,
        t,
        kernel,
        options,
        weights,
        task,
        theta=np.asarray(initial_theta, dtype=float),
        printer=_evaluation_printer(options),
        bounds=np.asarray(bounds, dtype=float),
        **(search_fields or {}),
    )
    return _drive_search(search, initial_theta)


def _evaluation_printer(options):
    """The progress printer of a search's evaluations: None below
    ``verbose=1``."""
    if options.verbose >= 1:
        return ProgressReporter(options.verbose, options.prefix)
    return None


def _drive_search(search, initial_theta):
    """Runs the options' optimiser on ``search`` from ``initial_theta``
    within ``search.bounds``, as one ``search.task``.

    Returns the :class:`_OptimizerRun` at the optimiser's answer, or at the
    search's best evaluation when the optimiser stalled (:class:`_Stalled`),
    a callback stopped it, or it ended elsewhere than at its best.
    """
    with search.task:
        try:
            theta, value = search.options.optimizer(
                search, initial_theta, bounds=search.bounds
            )
            theta = np.asarray(theta, dtype=float)
            if theta.shape != np.shape(initial_theta) or not np.all(np.isfinite(theta)):
                raise ValueError(
                    f"The optimizer returned the hyperparameters {theta!r}; a "
                    "callable optimizer must return finite log-hyperparameters "
                    f"of the shape of initial_theta, {np.shape(initial_theta)}."
                )
        except _StopRequested:
            return _OptimizerRun(search.theta, float(search.best), search.sites, True)
        except _Stalled:
            theta, value = search.theta, float(search.best)
    if search.best < value or not np.isfinite(value):
        # The optimiser ended elsewhere than at its best evaluation (an
        # abnormal line search): the best one is used.
        theta, value = search.theta, float(search.best)
    gradient = search.gradient if np.array_equal(theta, search.theta) else None
    return _OptimizerRun(theta, float(value), search.sites, False, gradient)


def _warn_at_bounds(kernel, options):
    """ConvergenceWarning for optimised hyperparameters that end on a bound.

    The kernel's own check (as scikit-learn's GP estimators make it), and the
    same for a learned label noise.
    """
    if options.default_kernel:
        _warn_default_kernel_at_bounds(kernel)
    else:
        kernel._check_bounds_params()
    if options.learns_label_noise:
        low, high = np.isclose(np.log(options.label_noise), np.log(LABEL_NOISE_BOUNDS))
        if low or high:
            warnings.warn(
                f"The learned label noise {options.label_noise:.3g} is at the "
                f"{'lower' if low else 'upper'} end of LABEL_NOISE_BOUNDS "
                f"{LABEL_NOISE_BOUNDS}.",
                ConvergenceWarning,
            )


def _warn_default_kernel_at_bounds(kernel):
    """The default kernel's bounds, with what they mean and what to do.

    Its amplitude ends at its upper bound whenever the kernel separates the
    classes (the evidence grows with it without end; the bound lies where
    the likelihood is saturated, see ``DEFAULT_AMPLITUDE_BOUNDS``): no
    warning.  A length scale at either bound is worth one.
    """
    rbf = kernel.k2
    low, high = np.log(rbf.length_scale_bounds)
    log_ell = np.log(rbf.length_scale)
    if np.isclose(log_ell, high, rtol=0, atol=1e-3):
        warnings.warn(
            f"The kernel's length scale ran to its upper bound ({rbf.length_scale:.3g}"
            ", 1000 times the median distance between the inputs): the model is "
            "nearly constant, no feature separates the classes. Check the "
            "features, or pass a kernel of your own.",
            ConvergenceWarning,
        )
    elif np.isclose(log_ell, low, rtol=0, atol=1e-3):
        warnings.warn(
            f"The kernel's length scale ran to its lower bound ({rbf.length_scale:.3g}"
            ", 1/1000 of the median distance between the inputs): every "
            "training point is its own neighbourhood. Inputs that repeat with "
            "different labels, or features on very different scales, do this: "
            "standardise the features or pass a kernel of your own.",
            ConvergenceWarning,
        )


def _optimise(X, t, kernel, options, seed, n_jobs, reporter, weights):
    """The best of the optimiser runs (the first from the kernel's own
    hyperparameters, the others from random draws within the bounds).

    When the best run ends at a kernel blind to the inputs' geometry
    (:func:`~sklearn_meanfield.tap._kernels.ignores_inputs`: a constant
    model, or white noise), one more run starts from the data's own length
    scale (:func:`~sklearn_meanfield.tap._kernels.with_length_scale`) and
    the larger evidence wins: from a length scale far below the distances
    between the inputs, the evidence's gradient vanishes or points towards
    the constant model.  A default kernel held back by its amplitude's bound
    goes on beyond it (:func:`_lift_amplitude_bound`).  Returns ``(best,
    stopped, kernel)``, the kernel whose bounds the best run kept to.
    """
    rng = np.random.RandomState(seed)
    theta0, bounds = _search_space(kernel, options)
    starts = [theta0]
    check_restart_bounds(options, bounds)
    for _ in range(options.n_restarts_optimizer):
        starts.append(rng.uniform(bounds[:, 0], bounds[:, 1]))

    def arguments_for(kernel):
        return lambda start, task: (start, X, t, kernel, options, task, weights)

    arguments = arguments_for(kernel)
    best, stopped = best_optimiser_run(starts, arguments, n_jobs, reporter)
    best, stopped = retry_blind_kernel(
        best, stopped, theta0, kernel, X, weights, arguments, n_jobs, reporter
    )
    return _lift_amplitude_bound(
        best, stopped, kernel, options, arguments_for, n_jobs, reporter
    )


def retry_blind_kernel(
    best, stopped, theta0, kernel, X, weights, run_arguments, n_jobs, reporter
):
    """The best run, or a retry from the data's length scale if better.

    When the best run's kernel (the first ``kernel.n_dims`` entries of its
    point of the search space) is blind to the inputs' geometry
    (:func:`~sklearn_meanfield.tap._kernels.ignores_inputs`), one more run
    starts from the first start ``theta0`` with the kernel's part set to
    the data's length scale, and the larger evidence wins; a
    ConvergenceWarning says when the data's scale lies outside the length
    scale's bounds.  Returns ``(best, stopped)``.
    """
    fitted = kernel.clone_with_theta(best.theta[: kernel.n_dims])
    if stopped or not ignores_inputs(fitted, X, weights):
        return best, stopped
    rescaled = with_length_scale(kernel, X, weights)
    if rescaled is not None:
        start = np.array(theta0, dtype=float)
        start[: kernel.n_dims] = rescaled.theta
        reporter(1, "the kernel ignores the inputs: one more run from their scale")
        retry, stopped = best_optimiser_run([start], run_arguments, n_jobs, reporter)
        if retry.neg_log_evidence < best.neg_log_evidence:
            best = retry
    outside = length_scale_outside_bounds(kernel, X, weights)
    if outside is not None:
        warnings.warn(
            f"The median distance between the inputs, {outside[0]:.3g}, lies "
            f"outside the bounds {outside[1]} of the kernel's length scale, "
            "which cannot reach the data's scale: standardise X, or widen "
            "the bounds.",
            ConvergenceWarning,
        )
    return best, stopped


def amplitude_bound_binds(best, kernel, options):
    """Whether the default kernel's amplitude (:func:`~._kernels.default_kernel`,
    its first log-hyperparameter) ends the optimiser run ``best`` at its upper
    bound with the log evidence still climbing there faster than
    :data:`~._kernels.BINDING_AMPLITUDE_SLOPE`: the bound, not the saturated
    likelihood, holds the model back."""
    if not options.default_kernel or best.gradient is None:
        return False
    high = np.log(kernel.k1.constant_value_bounds[1])
    return best.theta[0] >= high - 1e-6 and best.gradient[0] > BINDING_AMPLITUDE_SLOPE


def _lift_amplitude_bound(
    best, stopped, kernel, options, arguments_for, n_jobs, reporter
):
    """The best run, or its continuation to a higher amplitude if better,
    with the kernel it belongs to.

    For the default kernel only (:func:`~._kernels.default_kernel`, whose
    first log-hyperparameter is the amplitude): when the best run ends at
    the amplitude's upper bound with the log evidence still climbing there
    faster than :data:`~._kernels.BINDING_AMPLITUDE_SLOPE`, one more run
    continues from its optimum within
    :data:`~._kernels.LIFTED_AMPLITUDE_BOUNDS`, and the larger evidence
    wins.  ``arguments_for(kernel)`` gives the ``run_arguments`` of
    :func:`best_optimiser_run` for a kernel.  Returns ``(best, stopped,
    kernel)``.
    """
    if stopped or not amplitude_bound_binds(best, kernel, options):
        return best, stopped, kernel
    lifted = with_lifted_amplitude(kernel)
    reporter(
        1,
        "the evidence climbs at the amplitude's bound (%.3g per e-fold): one "
        "more run with the bound at %.3g",
        best.gradient[0],
        lifted.k1.constant_value_bounds[1],
    )
    run, stopped = best_optimiser_run(
        [best.theta], arguments_for(lifted), n_jobs, reporter
    )
    if run.neg_log_evidence < best.neg_log_evidence:
        return run, stopped, lifted
    return best, stopped, kernel


def check_restart_bounds(options, bounds):
    """Random restarts draw from the bounds: refuse infinite ones."""
    if options.n_restarts_optimizer > 0 and not np.all(np.isfinite(bounds)):
        raise ValueError(
            "Multiple optimizer restarts (n_restarts_optimizer>0) require "
            "that all kernel bounds are finite."
        )


def best_optimiser_run(starts, run_arguments, n_jobs, reporter):
    """Run the optimiser from every start in parallel, one callback subtask
    each; the best run (largest log evidence) and whether any was stopped.

    ``run_arguments(start, task)`` gives the arguments of one
    :func:`_run_optimizer` call.
    """
    run_tasks = reporter.task.subtasks(len(starts), "optimiser run", max_steps=None)
    runs = run_parallel(
        _run_optimizer,
        [run_arguments(start, task) for start, task in zip(starts, run_tasks)],
        n_jobs=n_jobs,
    )
    index, best = select_best(runs, key=lambda run: -run.neg_log_evidence)
    reporter(
        1,
        "best of %d optimiser run(s): log evidence %.4f (run %d)",
        len(runs),
        -best.neg_log_evidence,
        index,
    )
    return best, any(run.stopped for run in runs)


def fit_binary(X, t, kernel, options, seed, n_jobs, task=None, weights=None):
    """Fit one binary problem: hyperparameters, then the mean-field solution.

    A pure function of its arguments (and ``seed``), so one-vs-rest problems
    and restarts can run on any joblib backend with identical results; on
    the BLAS threads its matrices are worth.  ``task`` (a
    :class:`~sklearn_meanfield._progress.CallbackTask`) is the problem's
    callback task: its subtasks are the optimiser runs (a step per evidence
    evaluation) and the final solve (a step per sweep).  Returns a
    :class:`BinaryFit`.
    """
    reporter = ProgressReporter(options.verbose, options.prefix, task=task)
    with reporter.task, blas_threads_for_matrix(_num_samples(X)):
        stopped = False
        sites = None
        if options.optimizer is not None and (
            kernel.n_dims > 0 or options.learns_label_noise
        ):
            best, stopped, kernel = _optimise(
                X, t, kernel, options, seed, n_jobs, reporter, weights
            )
            kernel, options = _at(best.theta, kernel, options)
            sites = best.sites
            if not stopped:
                _warn_at_bounds(kernel, options)
        else:
            kernel = kernel.clone_with_theta(kernel.theta)
        K = kernel(X)
        likelihood = options.make_likelihood()
        solution, log_evidence, stopped = _final_solve(
            KernelPosterior(K),
            t,
            likelihood,
            options,
            sites,
            stopped,
            reporter,
            weights,
        )
        loo_valid = settle_final_solution(K, t, solution, options, stopped)
    return BinaryFit(
        kernel=kernel,
        likelihood=likelihood,
        solution=solution,
        log_evidence=log_evidence,
        stopped=stopped,
        loo_valid=loo_valid,
    )


def settle_final_solution(K, t, solution, options, stopped):
    """Check the final solution against its own cavities, warn when its
    leave-one-out is unreliable, release its training-size factors; whether
    its leave-one-out estimates are valid.  ``K`` is the prior covariance or
    anything with its ``@`` (the sparse fit passes a matvec)."""
    contradicted = contradicted_points(K, t, solution)
    _warn_unreliable(solution, options, stopped, contradicted, len(t))
    if solution.posterior is not None:
        solution.posterior.release()
    return bool(solution.converged and not stopped and not contradicted)


# The final solve, once converged to ``tol``, goes on to this tolerance for
# at most _POLISH_SWEEPS more sweeps (EP converges linearly: a few), so that
# fits of the same model (weighted rows or their repeats, any order of the
# points) agree to 1e-7 and better, as scikit-learn's estimator checks ask;
# a polish that does not get there keeps the solution converged to ``tol``.
_POLISH_TOL = 1e-9
_POLISH_SWEEPS = 50


def _polish(posterior, t, likelihood, options, solution, sweeps, log, weights):
    """``solution`` iterated on to ``_POLISH_TOL``, or itself.  Its sweeps
    go on with the solve's numbers (``sweeps`` sees them as more of it)."""
    done = solution.n_iter

    def more_sweeps(sweep):
        return sweeps(sweep._replace(number=sweep.number + done))

    polished = _solve(
        posterior,
        t,
        likelihood,
        replace(options, max_iter=_POLISH_SWEEPS),
        [(solution.tau, solution.nu)],
        more_sweeps,
        log,
        weights,
        tol=_POLISH_TOL,
    )
    if not polished.converged or polished.stopped:
        return solution
    polished.n_iter += solution.n_iter
    return polished


def _final_solve(posterior, t, likelihood, options, sites, stopped, reporter, weights):
    """The mean-field solution at the fitted kernel (a callback subtask whose
    steps are the sweeps), on ``posterior`` (exact or sparse).  Returns it,
    its EP evidence and whether a callback asked to stop (now or during the
    search)."""
    solve = ProgressReporter(
        options.verbose,
        reporter.prefix,
        task=reporter.task.subtask("solve", max_steps=None),
    )
    sweeps = sweep_steps(solve)
    # Stopped during the search: the best evaluation's sites as they are
    # (one sweep returns the warm start's solution, not a step beyond it).
    final = replace(options, max_iter=1) if stopped else options
    with solve.task:
        ep = _solve(posterior, t, likelihood, final, sites, sweeps, solve, weights)
        if ep.converged and not ep.stopped and final.tol > _POLISH_TOL:
            ep = _polish(posterior, t, likelihood, final, ep, sweeps, solve, weights)
        solution = ep
        if options.method == "naive":
            solution = _naive_solve(
                posterior, t, likelihood, final, on_iteration=sweeps, weights=weights
            )
    stopped |= ep.stopped or solution.stopped
    reporter(
        1,
        "final %s solve: %d sweeps, %s, log evidence %.4f",
        options.method,
        solution.n_iter,
        "converged" if solution.converged else "not converged",
        ep.log_evidence,
    )
    return solution, ep.log_evidence, stopped


def _warn_unreliable(solution, options, stopped, contradicted, n):
    """ConvergenceWarning for a final solve whose cavities are no
    leave-one-out predictions (stopped, not converged or degenerate)."""
    if stopped:
        warnings.warn(
            "A callback asked the fit to stop; the best hyperparameters and "
            "mean-field iterate found so far are kept. loo_error_ and "
            "loo_proba_ are NaN (they need converged equations).",
            ConvergenceWarning,
        )
    elif not solution.converged:
        warnings.warn(
            f"The {options.method} mean-field equations did not converge in "
            f"{solution.n_iter} sweeps; the best iterate is kept, and loo_error_ "
            "and loo_proba_ are NaN (the cavities of an iterate that is not a "
            "fixed point are no leave-one-out predictions). Increase max_iter "
            "or lower damping." + _degenerate_advice(options, contradicted, n),
            ConvergenceWarning,
        )
    elif contradicted:
        warnings.warn(
            "The fitted model is degenerate: its predictions on "
            f"{contradicted} of {n} training points contradict its own "
            "leave-one-out predictions, so loo_error_ and loo_proba_ are NaN."
            + _degenerate_advice(options, contradicted, n),
            ConvergenceWarning,
        )


def contradicted_points(K, t, solution):
    """Training points whose fitted prediction contradicts their leave-one-out one.

    At a fixed point of EP (or of the naive equations) each posterior
    marginal mean lies between its cavity mean and the side of its label:
    the likelihood of a label pulls its field towards that label.  So a
    point whose cavity (leave-one-out) mean has its label's sign has a
    fitted mean of that sign too, and the training error can never exceed
    the leave-one-out error point by point.  The model's fitted means are
    ``K @ alpha`` (what ``predict`` computes on the training inputs); when
    the site precisions are huge (a noise-free step whose constraints the
    kernel can only meet with tiny posterior variances) ``alpha = nu - tau
    mean`` cancels catastrophically and these means contradict the
    solution's own marginals.

    Parameters
    ----------
    K : ndarray of shape (n, n)
        Kernel matrix of the training points.
    t : ndarray of shape (n,)
        Labels +-1.
    solution : TAPSolution

    Returns
    -------
    int
        Number of points that the leave-one-out prediction classifies
        correctly and the fitted model does not (0 for a sound fit).

    Examples
    --------
    >>> import numpy as np
    >>> from types import SimpleNamespace
    >>> from sklearn_meanfield.tap.gpc import contradicted_points
    >>> K, t = np.eye(2), np.array([1.0, -1.0])
    >>> sound = SimpleNamespace(alpha=np.array([0.5, -0.5]),
    ...                         cavity_mean=np.array([0.1, 0.2]))
    >>> contradicted_points(K, t, sound)  # LOO wrong on point 1: allowed
    0
    >>> broken = SimpleNamespace(alpha=np.array([-0.5, -0.5]),
    ...                          cavity_mean=np.array([0.1, -0.2]))
    >>> contradicted_points(K, t, broken)
    1
    """
    with np.errstate(all="ignore"):
        fitted = K @ solution.alpha
        loo_right = t * solution.cavity_mean > 0
        fitted_right = t * fitted > 0
    return int(np.sum(loo_right & ~fitted_right))


def _degenerate_advice(options, contradicted, n):
    """What to change when a step likelihood's solution is degenerate."""
    advice = ""
    if contradicted:
        advice = (
            f" The fitted predictions contradict the leave-one-out ones on "
            f"{contradicted} of {n} training points: the model is degenerate."
        )
    if options.likelihood == "step" and options.label_noise == 0.0:
        advice += (
            " The noise-free step likelihood has no room for points the kernel "
            "cannot separate without huge fields: give label_noise > 0 or "
            "'auto', use likelihood='probit', or a kernel with a shorter "
            "length scale."
        )
    return advice
