"""EnsembleLearningRegressor: a Gaussian variational posterior for an erf network."""

import warnings
from numbers import Integral, Real

import numpy as np
from joblib import effective_n_jobs
from sklearn.base import BaseEstimator, RegressorMixin, _fit_context
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import (
    Interval,
    StrOptions,
    validate_parameter_constraints,
)
from sklearn.utils.validation import check_is_fitted, validate_data

from .._base import StandardizedRegressorMixin, atomic_fit
from .._memory import check_memory, format_bytes
from .._parallel import (
    N_JOBS_CONSTRAINT,
    blas_threads_for_matrix,
    draw_seeds,
    run_parallel,
    select_best,
)
from .._progress import CallbackSupportMixin, ProgressReporter, fit_progress
from ._erf_network import (
    NetworkShape,
    cavity_loo,
    covariance_matrix,
    output_moments,
    psis_loo,
    sample_outputs,
    unpack,
)
from ._optimise import RestartOptions, fit_memory_bytes, fit_restart

__all__ = ["EnsembleLearningRegressor"]


def _iteration_progress(reporter):
    """``on_iteration`` of :func:`fit_restart`: a progress line and a step.

    Every iteration is one step of the restart's callback task (its stop
    request ends the restart); it is printed at ``verbose >= 1`` unless it
    only found the bound stationary.
    """

    def on_iteration(iteration, bound, step=None, relaxation=None, stationary=False):
        if stationary:  # counted, not printed
            return reporter.task.step("iteration")
        message, args = "iteration %d: bound %.4f", (iteration, bound)
        if step is not None:
            message += " (step %.3g, relaxation %g)"
            args += (step, relaxation)
        return reporter.step(1, message, *args, task_name="iteration")

    return on_iteration


def _blas_side(shape):
    """Side of the largest matrix a restart factorises (BLAS-thread policy).

    The full family factorises the ``k x k`` precision every step; the
    matrix-free families factorise at most the ``r x r`` Woodbury core.
    """
    return shape.n_weights if shape.covariance == "full" else shape.rank


def _run_restart(X1, T, shape, options, seed, sample_weight, task, index, verbose):
    """Module-level (picklable) unit of parallel work: one restart.

    Runs the restart's callback task around the fit, on the BLAS threads its
    largest factorisation is worth (one below ~1400 weights: thread wake-ups
    cost more than the work there), and reports its iterations.
    """
    reporter = ProgressReporter(
        verbose, f"EnsembleLearningRegressor restart {index}", task=task
    )
    with task, blas_threads_for_matrix(_blas_side(shape)):
        result = fit_restart(
            X1,
            T,
            shape,
            options,
            seed,
            on_iteration=_iteration_progress(reporter),
            sample_weight=sample_weight,
        )
        if result.stopped:
            reporter(1, "stopped by a callback after %d iterations", result.n_iter)
    return result


# Every precision (noise and weight groups, standardised units) stays in
# [1 / _MAX_PRECISION, _MAX_PRECISION].  The cap matters for the weights of an
# input the data do not need: the bound keeps rising as their precision lambda
# grows, towards a finite limit, so the exact re-estimates grow without bound
# (by about the data's precision h on those weights per iteration).  What is
# left to gain at lambda is about (h / lambda)^2 / 4 per weight -- under 1e-4
# nats at the cap for h up to 1e4 -- while a prior sd of 1e-3 already makes
# the input's effect on every activation negligible.
_MAX_PRECISION = 1e6

# Restarts whose final bounds (standardised units) differ by more than this
# many nats per sample ended in separate optima.  The bound per sample moves
# by half the log of the residual variance, so 0.05 is a 10% larger residual
# variance: a worse fit a user would notice.  It is above what the stopping
# tolerance leaves between restarts that climb a plateau slowly (up to 0.035
# on make_friedman1 at the default tol).
_SEPARATE_OPTIMA = 0.05


class EnsembleLearningRegressor(
    CallbackSupportMixin, StandardizedRegressorMixin, RegressorMixin, BaseEstimator
):
    """Two-layer erf network with a full-covariance Gaussian posterior.

    Ensemble learning (variational Bayes) for ``f(x) = sum_i v_i erf(u_i . x~
    / sqrt 2)``, ``x~`` the standardised input with a constant 1 appended: the
    posterior over all weights is approximated by ``Q = N(mean_, covariance_)``
    that maximises a lower bound on the log evidence.  Every expectation in the
    bound, and in the predictive mean and variance, is computed in closed form
    (bivariate normal CDF through Owen's T, Gaussian jets), so the bound is
    exact and its gradient is exact.  Noise precision per output and one prior
    precision per weight group (one per input, for automatic relevance
    determination; hidden biases; hidden-to-output weights) are re-estimated
    after every iteration.

    Full and diagonal covariances are fitted by natural-gradient steps (the
    precision of ``Q`` moves towards the prior precision plus the expected
    Hessian of the data term, the mean takes the matching Newton-like step,
    the step halved until the bound rises); the low-rank family by L-BFGS
    phases.  The bound never decreases from one iteration to the next.

    Parameters
    ----------
    hidden_layer_size : int, default=8
        Number of erf hidden units (shared by all outputs).
    covariance : {"full", "lowrank", "diag"}, default="full"
        Family of the posterior covariance: dense Cholesky factor, diagonal
        plus rank ``rank``, or diagonal.  ``"full"`` is the most accurate and
        holds about ten ``n_weights x n_weights`` matrices during the fit
        (``n_weights = hidden_layer_size * (n_features + 2)`` for one output);
        ``"diag"`` and ``"lowrank"`` never form one (memory linear in
        ``n_weights``), which makes thousands of inputs possible, at the cost
        of more iterations (``"lowrank"`` is fitted by L-BFGS).
        See :ref:`ensemble_learning`.
    rank : int, default=2
        Rank of the low-rank part when ``covariance="lowrank"``.
    n_restarts : int, default=2
        Random initialisations, run in parallel with ``n_jobs``; the fit with
        the highest bound is kept.  When the best bound is reached by one
        restart only and another ends over 0.05 nat per sample below it
        (``restart_bounds_``), the restarts found separate optima and a
        ``ConvergenceWarning`` suggests more restarts: a better optimum may
        exist that none reached.
    max_iter : int, default=300
        Maximum number of iterations, each an update of ``Q`` (one
        natural-gradient step; for ``"lowrank"`` a phase of 100 L-BFGS
        iterations on ``Q`` and the log hyperparameters jointly) followed by
        the exact re-estimation of the hyperparameters.
    inner_max_iter : int, default=10
        Before the first iteration ``Q`` is fitted at the initial
        hyperparameters, with at most this many natural-gradient steps (for
        ``"lowrank"`` the first L-BFGS phase plays that part).
    tol : float, default=1e-4
        Stop when an iteration raises the bound (in standardised units) by
        less than ``tol * max(|bound|, n_samples)``.
    alpha_init : float, default=25.0
        Initial noise precision of the standardised targets.
    init_std : float, default=0.1
        Initial posterior standard deviation of every weight.
    random_state : int, RandomState instance or None, default=None
        Seeds of the restarts (drawn up front, so results do not depend on
        ``n_jobs``) and default seed of :meth:`sample_y`.
    n_jobs : int or None, default=None
        Workers for the restarts; None defers to ``joblib.parallel_config``.
    verbose : int, default=0
        Print the bound after every iteration when >= 1.  With scikit-learn
        >= 1.9, ``set_callbacks`` (e.g. ``sklearn.callback.ProgressBar()``)
        also follows the fit: one subtask per restart, run in the restart's
        worker, and in each a step per iteration.  A callback that asks to
        stop (a progress monitor, a time budget) ends that restart after the
        iteration: its current ``Q`` and hyperparameters, which have the
        highest bound of the restart so far since the bound never decreases
        (no convergence warning); the best of the restarts is kept as usual.
    loo : {"cavity", "psis"}, default="cavity"
        How ``loo_prediction_`` is computed without refitting: ``"cavity"``
        removes each point's Gaussian site from the closed-form predictive of
        ``f`` (deterministic, free); ``"psis"`` importance-samples 2000 draws
        from ``Q`` to each leave-one-out posterior with Pareto smoothing and
        also sets ``pareto_k_``.

    Attributes
    ----------
    mean_ : ndarray of shape (n_weights,)
        Posterior mean of the weights, in standardised units: the
        ``hidden_layer_size * (n_features_in_ + 1)`` input-to-hidden weights
        (unit by unit, bias last) then the ``hidden_layer_size * n_outputs``
        hidden-to-output weights.
    covariance_ : ndarray of shape (n_weights, n_weights)
        Posterior covariance of the weights (computed on access from the
        fitted factor: ``"diag"`` and ``"lowrank"`` fits never hold this
        ``n_weights x n_weights`` matrix).
    alpha_ : ndarray of shape (n_outputs,)
        Noise precision per output, in the units of ``y``.
    lambda_ : ndarray of shape (n_features_in_ + 2,)
        Prior precision per weight group (standardised units): one per input
        feature, then hidden biases, then hidden-to-output weights.
    scores_ : ndarray of shape (n_iter_,)
        The lower bound on ``log p(y | X, alpha, lambda)`` (in the units of
        ``y``) after every iteration of the winning restart.
    restart_bounds_ : ndarray of shape (n_restarts,)
        The final bound of every restart (the units of ``scores_``); the
        largest is ``scores_[-1]``.  Bounds more than 0.05 nat per sample
        apart are separate optima: see ``n_restarts``.
    n_iter_ : int
        Iterations run by the winning restart.
    loo_prediction_ : ndarray of the shape of ``y``
        Leave-one-out predictive means, from the cavity of each training point
        in the Gaussian approximation (no refitting).
    loo_error_ : float
        Leave-one-out mean squared error, averaged over outputs; with
        ``sample_weight``, the weighted mean over rows (each row left out
        whole, whatever its weight).
    pareto_k_ : ndarray of the shape of ``y``
        PSIS tail shape per training point (only with ``loo="psis"``; above
        0.7 the estimate for that point is unreliable).
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Defined when ``X`` has string feature names.

    See Also
    --------
    sklearn.neural_network.MLPRegressor : point estimate of a similar network.
    sklearn.linear_model.BayesianRidge : Bayesian linear regression.

    Notes
    -----
    With ``loo="cavity"`` the leave-one-out predictions remove each point's
    Gaussian site from the predictive distribution of ``f`` at that point: with
    ``<f>`` and ``s^2 = <f^2> - <f>^2`` under ``Q``, the leave-one-out mean is
    ``y - (y - <f>) / (1 - alpha s^2)`` (exact for a linear-Gaussian model;
    ``alpha s^2`` is capped at 0.9).

    References
    ----------
    Barber, D. and Bishop, C. M. (1998). Ensemble learning for multi-layer
    networks. Advances in Neural Information Processing Systems 10, 395-401.

    Khan, M. E. and Rue, H. (2023). The Bayesian learning rule. Journal of
    Machine Learning Research 24(281), 1-46.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield import EnsembleLearningRegressor
    >>> rng = np.random.RandomState(0)
    >>> X = rng.uniform(-2, 2, size=(40, 1))
    >>> y = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=40)
    >>> model = EnsembleLearningRegressor(
    ...     hidden_layer_size=3, n_restarts=1, random_state=0,
    ... )
    >>> model = model.fit(X, y)
    >>> mean, std = model.predict(X[:3], return_std=True)
    >>> bool(model.score(X, y) > 0.9), bool(np.all(std > 0))
    (True, True)
    """

    _parameter_constraints: dict = {
        "hidden_layer_size": [Interval(Integral, 1, None, closed="left")],
        "covariance": [StrOptions({"full", "lowrank", "diag"})],
        "rank": [Interval(Integral, 1, None, closed="left")],
        "n_restarts": [Interval(Integral, 1, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "inner_max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "alpha_init": [Interval(Real, 0, None, closed="neither")],
        "init_std": [Interval(Real, 0, None, closed="neither")],
        "random_state": ["random_state"],
        "n_jobs": N_JOBS_CONSTRAINT,
        "verbose": ["verbose"],
        "loo": [StrOptions({"cavity", "psis"})],
    }

    def __init__(
        self,
        hidden_layer_size=8,
        *,
        covariance="full",
        rank=2,
        n_restarts=2,
        max_iter=300,
        inner_max_iter=10,
        tol=1e-4,
        alpha_init=25.0,
        init_std=0.1,
        random_state=None,
        n_jobs=None,
        verbose=0,
        loo="cavity",
    ):
        self.hidden_layer_size = hidden_layer_size
        self.covariance = covariance
        self.rank = rank
        self.n_restarts = n_restarts
        self.max_iter = max_iter
        self.inner_max_iter = inner_max_iter
        self.tol = tol
        self.alpha_init = alpha_init
        self.init_std = init_std
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.verbose = verbose
        self.loo = loo

    @_fit_context(prefer_skip_nested_validation=True)
    @atomic_fit
    def fit(self, X, y, sample_weight=None):
        """Fit the Gaussian posterior and the hyperparameters.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training inputs (standardised internally, at any magnitude a
            double holds).
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
            Targets (numeric strings are converted).  A constant target is a
            well-defined model: the estimator then predicts the constant (to
            1e-9 of its magnitude), with a predictive standard deviation far
            below it, in its units, and a leave-one-out error of about zero.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weights of the rows: row ``n``'s log-likelihood
            enters the bound ``sample_weight[n]`` times (and so the noise
            re-estimate and the standardisation of ``X`` and ``y``), so an
            integer weight is the row repeated and a zero weight drops it.
            ``loo_prediction_`` removes a row whole, whatever its weight, and
            ``loo_error_`` is the weighted mean over rows.

        Returns
        -------
        self : object

        Raises
        ------
        ValueError
            With fewer than two samples (nothing to standardise with, nothing
            to leave out), invalid ``X``, ``y`` or ``sample_weight`` (NaN,
            infinity, shape, non-numeric ``y``), or a spread of ``y`` outside
            ``[1e-150, 1e150]`` (its squares would over- or underflow).
        MemoryError
            Before any work, when the restarts that run at once (``n_jobs``)
            would need more memory than this process may use; the message
            names the size and what ``"diag"``/``"lowrank"`` would need.
        """
        X, y, _, T, sample_weight = self._validate_weighted_training_data(
            X, y, sample_weight
        )
        rng = check_random_state(self.random_state)
        X1 = self._augment(X)
        # Zero-weight rows leave no trace in the fit: they are not even
        # visited (the fit is that of the data without them); they still
        # get a leave-one-out prediction (the full posterior's).
        rows = slice(None) if sample_weight is None else sample_weight > 0
        fit_weight = None if sample_weight is None else sample_weight[rows]
        shape = NetworkShape(
            X.shape[1], self.hidden_layer_size, T.shape[1], self.covariance, self.rank
        )
        self._check_memory(X.shape[0] if fit_weight is None else fit_weight.size, shape)
        options = RestartOptions(
            alpha_init=self.alpha_init,
            init_std=self.init_std,
            max_iter=self.max_iter,
            inner_max_iter=self.inner_max_iter,
            tol=self.tol,
            max_precision=_MAX_PRECISION,
        )
        # Seeds drawn up front, one callback subtask
        # per restart, run in the restart's worker.
        seeds = draw_seeds(rng, self.n_restarts)
        with fit_progress(
            self, self.verbose, max_steps=self.n_restarts, X=X, y=y
        ) as reporter:
            tasks = reporter.task.subtasks(
                self.n_restarts, "restart", max_steps=self.max_iter
            )
            results = run_parallel(
                _run_restart,
                [
                    (
                        X1[rows],
                        T[rows],
                        shape,
                        options,
                        int(s),
                        fit_weight,
                        t,
                        k,
                        self.verbose,
                    )
                    for k, (s, t) in enumerate(zip(seeds, tasks))
                ],
                n_jobs=self.n_jobs,
            )
            self._finish(X1, T, y, shape, results, rng, sample_weight)
        return self

    def _check_memory(self, n_samples, shape):
        """Refuse up front a fit whose concurrent restarts would not fit."""
        workers = max(1, min(self.n_restarts, effective_n_jobs(self.n_jobs)))
        needed = workers * fit_memory_bytes(n_samples, shape)
        advice = []
        for family in ("lowrank", "diag"):
            if family != self.covariance:
                cheaper = NetworkShape(
                    shape.n_inputs, shape.n_hidden, shape.n_outputs, family, self.rank
                )
                cost = workers * fit_memory_bytes(n_samples, cheaper)
                if cost < needed:
                    advice.append(f"covariance={family!r} needs {format_bytes(cost)}")
        hint = (
            ("; ".join(advice) + " (no n_weights x n_weights matrix). ")
            if advice
            else ""
        )
        check_memory(
            needed,
            f"EnsembleLearningRegressor(covariance={self.covariance!r}) with "
            f"{shape.n_weights} weights ({shape.n_inputs} inputs, "
            f"{shape.n_hidden} hidden units) on {n_samples} samples, "
            f"{workers} restart(s) at once",
            hint + "Fewer hidden units, inputs or concurrent restarts (n_jobs) "
            "also reduce it.",
        )

    def _finish(self, X1, T, y, shape, results, rng, sample_weight):
        index, best = select_best(results, key=lambda r: r.bound)
        if best.stopped and not best.converged:
            # As every estimator of the library: a fit cut short by a
            # callback keeps its best iterate and says that it is one.
            warnings.warn(
                f"EnsembleLearningRegressor was stopped by a callback after "
                f"{best.n_iter} iterations, before the bound converged; the "
                "model is the best iterate so far.",
                ConvergenceWarning,
            )
        elif not best.converged:
            warnings.warn(
                f"EnsembleLearningRegressor did not converge in max_iter="
                f"{self.max_iter} iterations; increase max_iter or tol.",
                ConvergenceWarning,
            )
        self._shape = shape
        self._theta = best.theta
        self._alpha_std = best.alpha
        y_scale = self._y_scaler.scale
        # Bound in the units of y: the Jacobian of the target scaling.
        n_eff = len(T) if sample_weight is None else np.sum(sample_weight)
        jacobian = n_eff * np.sum(np.log(y_scale))
        self.scores_ = best.scores - jacobian
        self.restart_bounds_ = np.array([r.bound for r in results]) - jacobian
        self._warn_separate_optima(results, index, n_eff)
        self.n_iter_ = int(best.n_iter)
        self.mean_ = unpack(self._theta, shape)[0].copy()
        self.alpha_ = self._alpha_std / y_scale**2
        self.lambda_ = best.lam_groups

        if self.loo == "cavity":
            if hasattr(self, "pareto_k_"):  # from an earlier fit with "psis"
                del self.pareto_k_
            mean, second = output_moments(X1, self._theta, shape)
            loo_std = cavity_loo(
                T, mean, second, self._alpha_std, sample_weight=sample_weight
            )
        else:
            loo_std, pareto_k = psis_loo(
                X1,
                T,
                self._theta,
                shape,
                self._alpha_std,
                rng,
                sample_weight=sample_weight,
            )
            self.pareto_k_ = pareto_k.reshape(y.shape)
        loo = self._y_scaler.inverse_mean(loo_std)
        self.loo_prediction_ = loo.reshape(y.shape)
        sq = (y - self.loo_prediction_).reshape(len(y), -1) ** 2
        self.loo_error_ = float(np.average(sq.mean(axis=1), weights=sample_weight))
        return self

    def _warn_separate_optima(self, results, index, n_eff):
        """Warn when the best bound was reached by one restart only.

        Converged restarts whose final bounds differ by more than
        ``_SEPARATE_OPTIMA`` nats per sample sit in separate optima.  If no
        other converged restart comes that close to the best, the best
        optimum was found once in ``n_restarts`` tries, and restarts that
        land elsewhere that often may all miss a better one.
        """
        best = results[index].bound
        others = [r.bound for k, r in enumerate(results) if k != index and r.converged]
        margin = _SEPARATE_OPTIMA * n_eff
        if not others or best - max(others) <= margin:
            return
        warnings.warn(
            f"EnsembleLearningRegressor: the {len(others) + 1} restarts ended "
            f"in separate optima (bounds {(best - min(others)) / n_eff:.3g} "
            "nats per sample apart) and the best was found once; a better "
            "optimum may exist: increase n_restarts.",
            ConvergenceWarning,
        )

    @property
    def covariance_(self):
        """Posterior covariance of the weights, (n_weights, n_weights).

        Built on access from the fitted factor (a dense ``k x k`` matrix:
        the fit of ``"diag"`` and ``"lowrank"`` never forms it).
        """
        if not hasattr(self, "_theta"):
            raise AttributeError("covariance_ is defined after fit")
        return covariance_matrix(self._theta, self._shape)

    def _augment(self, X):
        Xs = self._x_scaler.transform(X)
        return np.column_stack([Xs, np.ones(len(Xs))])

    def _moments(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        mean, second = output_moments(self._augment(X), self._theta, self._shape)
        var = np.maximum(second - mean * mean, 0.0) + 1.0 / self._alpha_std
        return mean, var

    def predict(self, X, return_std=False):
        """Predictive mean (and standard deviation) of the targets.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        return_std : bool, default=False
            Also return ``sqrt(<f^2> - <f>^2 + 1 / alpha_)``, the predictive
            standard deviation including the noise.

        Returns
        -------
        y_mean : ndarray of shape (n_samples,) or (n_samples, n_outputs)
        y_std : ndarray of the same shape, only if ``return_std``.
        """
        mean, var = self._moments(X)
        y_mean = self._like_y(self._y_scaler.inverse_mean(mean))
        if not return_std:
            return y_mean
        y_std = self._like_y(np.sqrt(var) * self._y_scaler.scale)
        return y_mean, y_std

    def sample_y(self, X, n_samples=1, random_state=None):
        """Draw targets from the predictive distribution.

        Weights are drawn from ``Q`` and Gaussian noise of precision
        ``alpha_`` is added, so the draws have the mean and spread that
        :meth:`predict` reports.

        Parameters
        ----------
        X : array-like of shape (n_samples_X, n_features)
        n_samples : int, default=1
            Draws per row, at least 1.
        random_state : int, RandomState instance or None, default=None
            None uses the estimator's ``random_state``.

        Returns
        -------
        y_samples : ndarray of shape (n_samples_X, n_samples) or
            (n_samples_X, n_outputs, n_samples)

        Raises
        ------
        ValueError
            When ``n_samples`` is not an integer of at least 1.
        """
        check_is_fitted(self)
        validate_parameter_constraints(
            {"n_samples": [Interval(Integral, 1, None, closed="left")]},
            {"n_samples": n_samples},
            caller_name=f"{type(self).__name__}.sample_y",
        )
        X = validate_data(self, X, reset=False, dtype=np.float64)
        rng = check_random_state(
            self.random_state if random_state is None else random_state
        )
        shape = self._shape
        # The draws' weights, hidden activations and outputs (with the noise
        # and the copy the transpose makes) at once.
        peak = (
            8
            * n_samples
            * (
                2 * shape.n_weights
                + X.shape[0] * (shape.n_hidden + 3 * shape.n_outputs)
            )
        )
        check_memory(
            peak,
            f"sample_y of {n_samples} draws at {X.shape[0]} rows",
            "Draw fewer samples, or pass fewer rows at a time.",
        )
        f = sample_outputs(self._augment(X), self._theta, shape, rng, n_samples)
        f = np.transpose(f, (1, 2, 0))  # (n_X, n_outputs, n_samples)
        noise = rng.standard_normal(f.shape) / np.sqrt(self._alpha_std)[:, None]
        draws = (f + noise) * self._y_scaler.scale[:, None] + self._y_scaler.mean[
            :, None
        ]
        return self._like_y(draws)
