"""The Bayes-optimal perceptron by TAP mean-field theory (Opper & Winther 1996)."""

from numbers import Integral, Real

import numpy as np
from joblib import effective_n_jobs
from scipy import sparse
from scipy.linalg import LinAlgError
from scipy.special import logsumexp
from sklearn.base import BaseEstimator, ClassifierMixin, _fit_context
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import (
    _check_sample_weight,
    check_is_fitted,
    validate_data,
)

from .._base import atomic_fit
from .._gaussian import log_noisy_step
from .._memory import check_memory
from .._parallel import N_JOBS_CONSTRAINT, draw_seeds, run_parallel
from .._progress import CallbackSupportMixin, fit_progress
from ._binary_perceptron import FitOptions, fit_binary
from ._likelihoods import make_likelihood
from ._merging import merge_identical_points, partial_cavities
from ._multiclass import (
    class_sample_weights,
    encode_classes,
    leave_one_out,
    one_vs_rest_targets,
    positive_to_proba,
)
from ._weight_space import _row_norms_squared
from ._weights import positive_site_weights, weighted_error_rate

__all__ = ["TAPPerceptronClassifier"]

# Square matrices a running binary problem holds at once: in the weight space
# the precision, its Cholesky factor, L^-1 and the identity it is solved
# from; in the dual space the kernel matrix and the posterior's factors.
_WEIGHT_SPACE_WORK = 4
_DUAL_SPACE_WORK = 5

# Inputs whose largest magnitude lies within these bounds are used as they
# are; outside, the fields are divided by a power of two (an exact change of
# units the step likelihood does not see).  The intercept column is then 1/s:
# below this s it would outweigh the inputs beyond what float64 represents.
_MIN_PLAIN_SCALE = 2.0**-100
_MAX_PLAIN_SCALE = 2.0**100
_MIN_INTERCEPT_SCALE = 2.0**-256


class TAPPerceptronClassifier(CallbackSupportMixin, ClassifierMixin, BaseEstimator):
    """Bayes-optimal perceptron by TAP mean-field theory.

    The weights of a single-layer perceptron have the prior ``w ~ N(0, I)``;
    the field of an input is ``h = w . x / sqrt(n_features)`` and a label is
    the sign of the field, flipped with probability ``label_noise``.  The
    posterior over ``w`` is approximated by the TAP mean-field equations of
    Opper and Winther, which give the Bayes prediction ``sign(<w> . x)`` (the
    centre of mass of the version space, not a single consistent weight
    vector) and, from the cavity fields, a leave-one-out estimate of the
    error that comes with the fit.

    The equations are solved where they are cheapest: in the ``m x m`` dual
    (kernel) space when there are fewer samples than weights, in the
    ``N x N`` weight space otherwise, so that 10^5 samples with 50 features
    cost ``O(m N^2)`` BLAS work per sweep (tens of milliseconds) and never an
    ``m x m`` matrix.  Problems whose matrices have at most 512 rows run on
    one BLAS thread (their products are too small for threads to pay).

    The adaptive equations are solved by parallel EP.  With label noise and
    data that the model does not describe well (more flipped labels than
    ``label_noise`` says, or classes that no hyperplane separates), parallel
    EP can stall; when its residual has not halved in 25 sweeps, fractional
    (power) EP with powers 0.5, then 0.25, and a step per site takes over.
    Its fixed point is the alpha-divergence projection with alpha = power,
    close to EP's; the leave-one-out estimate still removes whole sites.

    Parameters
    ----------
    label_noise : float in [0, 0.5) or "auto", default="auto"
        Probability that a training label was flipped (the paper's ``beta``
        is ``log((1 - label_noise) / label_noise)``); no probability exceeds
        ``1 - label_noise``.  ``"auto"`` learns it per binary problem by
        maximising the leave-one-out log-likelihood within
        ``LABEL_NOISE_BOUNDS`` = (1e-4, 0.4), at the cost of about ten
        warm-started solves.  0 is the paper's noise-free (teacher) model,
        whose posterior is improper on data no perceptron separates.
    variance : {"adaptive", "isotropic", "naive"}, default="adaptive"
        Cavity variances: ``"adaptive"`` solves for them from the data's own
        correlations (exact for Gaussian posteriors, the TAP/EP fixed point);
        ``"isotropic"`` uses the 1996 closure ``1 - |<w>|^2 / N`` (scaled by
        each field's prior variance), valid for uncorrelated unit-variance
        inputs; ``"naive"`` drops the Onsager reaction term (cavity variance
        = prior variance).
    fit_intercept : bool, default=True
        Add a constant input of value ``sqrt(n_features)`` with the same
        ``N(0, 1)`` prior: the intercept then has a standard normal prior in
        the units of the field, like the rest of the field for standardised
        inputs.
    class_weight : dict, "balanced" or None, default=None
        Weights of the classes, multiplied with ``sample_weight`` in
        :meth:`fit`: a dict maps labels to weights (others 1);
        ``"balanced"`` gives class ``k`` the weight ``sum(w) / (n_classes
        * sum_{y_i = k} w_i)`` with the sample weights ``w`` (as
        :class:`~sklearn.linear_model.LogisticRegression`).  One-vs-rest
        problems use the weights of the original labels.
    space : {"auto", "dual", "weight"}, default="auto"
        Where to solve: ``"auto"`` takes the weight space when there are
        more samples than weights, the dual space otherwise.  Both give the
        same solution.
    max_iter : int, default=1000
        Maximum sweeps of the mean-field equations, shared by plain and
        fractional EP (plain EP needs tens; fractional EP and the closures,
        which take smaller steps, hundreds).
    tol : float, default=1e-6
        Convergence tolerance (posterior marginals, in posterior standard
        deviations).
    damping : float in (0, 1], default=0.8
        Largest fraction of each update taken (at most 0.2 for the
        ``"isotropic"`` and ``"naive"`` closures); reduced on oscillation.
    n_restarts : int, default=4
        When the iteration does not converge (for ``"adaptive"``: neither
        plain nor fractional EP; hard, noise-free problems), the paper's
        remedy: start from a few examples and add the rest in
        steps, in ``n_restarts`` random orders run in parallel; the solution
        with the best free energy is kept (for ``"naive"`` and
        ``"isotropic"``, which have no consistent free energy, the best
        leave-one-out log-likelihood).
    n_jobs : int, default=None
        Workers for one-vs-rest problems (or, with two classes, restarts).
    random_state : int, RandomState instance or None, default=None
        Orders of the incremental restarts.
    verbose : int, default=0
        The solve and the restarts when >= 1, every sweep when >= 2.  With
        scikit-learn >= 1.9, ``set_callbacks`` (e.g.
        ``sklearn.callback.ProgressBar()``) follows the fit, one subtask per
        one-vs-rest problem whose steps are the sweeps; a callback's request
        to stop ends the running problem's sweeps at the best iterate so
        far, with a ``ConvergenceWarning``.  See :ref:`progress`.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    coef_ : ndarray of shape (1, n_features) or (n_classes, n_features)
        Posterior mean weights in the inputs' scale: the decision function
        is ``X @ coef_.T + intercept_`` (that is ``<w> / sqrt(n_features)``).
    intercept_ : ndarray of shape (1,) or (n_classes,)
    label_noise_ : float or ndarray of shape (n_classes,)
        The label noise of the fitted model: ``label_noise``, or the learned
        one (an array, one per one-vs-rest problem, with more than two
        classes).
    loo_error_ : float
        Leave-one-out error rate from the cavity fields (paper's section 6);
        with weights, the weighted rate (a sample of weight ``w`` counts
        ``w`` times).
    loo_proba_ : ndarray of shape (n_samples, n_classes)
        Leave-one-out predictive probabilities: row ``i`` approximates the
        model fitted without sample ``i`` (its whole weight; for identical
        samples, without that one copy), evaluated at ``X[i]``.  A sample of
        weight zero is not in the fit: its row is the model's prediction.
    n_iter_ : int
        Sweeps of the final solve (largest over one-vs-rest problems).
    space_ : str
        The space the equations were solved in.
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (n_features_in_,)

    See Also
    --------
    TAPGaussianProcessClassifier : the same theory with any kernel.
    sklearn.linear_model.LogisticRegression : a point estimate.

    References
    ----------
    .. [1] M. Opper and O. Winther, "A mean field algorithm for Bayes
       learning in large feed-forward neural networks", Advances in Neural
       Information Processing Systems 9, 1996.
    .. [2] M. Opper and O. Winther, "Mean field approach to Bayes learning in
       feed-forward neural networks", Physical Review Letters 76, 1996.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield import TAPPerceptronClassifier
    >>> rng = np.random.RandomState(0)
    >>> teacher = rng.randn(20)
    >>> X = rng.randn(100, 20)
    >>> y = (X @ teacher > 0).astype(int)
    >>> clf = TAPPerceptronClassifier(label_noise=0.0).fit(X, y)
    >>> cosine = clf.coef_[0] @ teacher / np.linalg.norm(clf.coef_[0])
    >>> bool(cosine / np.linalg.norm(teacher) > 0.9)
    True
    >>> bool(clf.loo_error_ < 0.2)
    True
    """

    _parameter_constraints: dict = {
        "label_noise": [Interval(Real, 0, 0.5, closed="left"), StrOptions({"auto"})],
        "variance": [StrOptions({"adaptive", "isotropic", "naive"})],
        "fit_intercept": ["boolean"],
        "class_weight": [dict, StrOptions({"balanced"}), None],
        "space": [StrOptions({"auto", "dual", "weight"})],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="neither")],
        "damping": [Interval(Real, 0, 1, closed="right")],
        "n_restarts": [Interval(Integral, 0, None, closed="left")],
        "n_jobs": N_JOBS_CONSTRAINT,
        "random_state": ["random_state"],
        "verbose": ["verbose"],
    }

    def __init__(
        self,
        *,
        label_noise="auto",
        variance="adaptive",
        fit_intercept=True,
        class_weight=None,
        space="auto",
        max_iter=1000,
        tol=1e-6,
        damping=0.8,
        n_restarts=4,
        n_jobs=None,
        random_state=None,
        verbose=0,
    ):
        self.label_noise = label_noise
        self.variance = variance
        self.fit_intercept = fit_intercept
        self.class_weight = class_weight
        self.space = space
        self.max_iter = max_iter
        self.tol = tol
        self.damping = damping
        self.n_restarts = n_restarts
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    def _design(self, X):
        """``Phi = [X, sqrt(N)] / (s sqrt(N))``: rows whose dot with w is the
        field over ``s = _input_scale``.

        The noise-free step, with or without label noise, sees only the sign
        of the field, so dividing every field by the power of two ``s`` changes
        nothing but keeps ``|x|^2`` representable for inputs of scale 1e300
        (``s = 1`` for ordinary scales: the unscaled arithmetic).
        """
        scale = self._input_scale
        Phi = X / (scale * np.sqrt(X.shape[1]))
        if self.fit_intercept:
            column = np.full((X.shape[0], 1), 1.0 / scale)
            if sparse.issparse(Phi):
                return sparse.hstack([Phi, column], format="csr")
            Phi = np.hstack([Phi, column])
        return Phi

    def _scale_inputs(self, X):
        """The power of two ``s`` the fields are divided by (1 unless the
        inputs' largest magnitude lies outside ``2**+-100``)."""
        data = X.data if sparse.issparse(X) else X
        largest = float(np.max(np.abs(data))) if data.size else 0.0
        if largest == 0.0 or _MIN_PLAIN_SCALE <= largest <= _MAX_PLAIN_SCALE:
            return 1.0
        scale = float(2.0 ** np.frexp(largest)[1])
        if self.fit_intercept and scale < _MIN_INTERCEPT_SCALE:
            if sparse.issparse(X):
                column = int(np.argmax(np.abs(X).max(axis=0).toarray().ravel()))
            else:
                column = int(np.argmax(np.max(np.abs(X), axis=0)))
            raise ValueError(
                f"The inputs are too small for the intercept's N(0, 1) prior: "
                f"the largest |X| is {largest:.3g} (column {column}), so the "
                "intercept would outweigh every input by more than 1e77 and "
                "the fields could not be represented. Standardise X (e.g. "
                "StandardScaler) or use fit_intercept=False, under which the "
                "fit does not depend on the inputs' scale."
            )
        return scale

    def _sample_weights(self, y, sample_weight, X):
        """``sample_weight`` times the class weights (None when unweighted)."""
        if sample_weight is None and self.class_weight is None:
            return None
        sample_weight = _check_sample_weight(
            sample_weight, X, dtype=np.float64, ensure_non_negative=True
        )
        if self.class_weight is not None:
            sample_weight = class_sample_weights(
                self.class_weight, self.classes_, y, sample_weight
            )
        if not np.any(sample_weight > 0):
            raise ValueError(
                "Every sample has weight zero (sample_weight times class_weight): "
                "there is nothing to fit."
            )
        return sample_weight

    @_fit_context(prefer_skip_nested_validation=True)
    @atomic_fit
    def fit(self, X, y, sample_weight=None):
        """Fit the TAP mean-field perceptron.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training inputs (CSR/CSC matrices are used without densifying
            all of X).  With more samples than features the fit works in
            the n_features x n_features weight space, so 10^5 samples cost
            O(n_samples n_features^2) a sweep and no n_samples^2 memory.
            float32 inputs give float32 ``coef_`` and ``intercept_`` (the
            equations are solved in float64).
        y : array-like of shape (n_samples,)
            Target labels.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weights: a sample of integer weight ``k`` counts as
            ``k`` copies of it (its likelihood raised to ``k``, the EP fixed
            point of the repeated samples), weight zero as no sample.
            Multiplied by the weights of ``class_weight``.

        Returns
        -------
        self : object
            The fitted estimator.

        Raises
        ------
        ValueError
            If ``y`` holds a single class (there is nothing to classify), if
            every weight is zero, if ``X`` or ``y`` is invalid (NaN,
            infinity, wrong shape), or if the inputs are so small (largest
            magnitude below about 1e-77) that the intercept's prior swamps
            them.
        """
        X, y = validate_data(
            self,
            X,
            y,
            accept_sparse=("csr", "csc"),
            dtype=[np.float64, np.float32],
        )
        dtype = X.dtype
        X = X.astype(np.float64) if dtype != np.float64 else X
        self.classes_, y_index = encode_classes(y, type(self).__name__)
        n_classes = len(self.classes_)
        rng = check_random_state(self.random_state)
        weights = self._sample_weights(y, sample_weight, X)
        error_weights = weights  # loo_error_ counts every sample by its weight
        self._input_scale = self._scale_inputs(X)
        Phi = self._design(X)
        keep, site_weights, merged = _sites(X, Phi, y_index, weights)
        if len(keep) < X.shape[0]:
            Phi = Phi[keep]
        n_samples, n_weights = Phi.shape
        if self.space == "auto":
            self.space_ = "weight" if n_samples > n_weights else "dual"
        else:
            self.space_ = self.space
        self._check_memory(n_samples, n_weights, len(self.classes_))
        learned = self.label_noise == "auto"
        options = FitOptions(
            likelihood=make_likelihood("step", 0.0 if learned else self.label_noise),
            variance=self.variance,
            space=self.space_,
            max_iter=self.max_iter,
            tol=self.tol,
            damping=self.damping,
            n_restarts=self.n_restarts,
            n_weights=n_weights,
            verbose=self.verbose,
            learns_label_noise=learned,
        )
        targets = [t[keep] for t in one_vs_rest_targets(y_index, n_classes)]
        seeds = draw_seeds(rng, len(targets))
        # With scikit-learn callbacks, every problem is a subtask of the fit.
        with fit_progress(
            self, self.verbose, max_steps=len(targets), X=X, y=y
        ) as reporter:
            tasks = reporter.task.subtasks(len(targets), "problem", max_steps=None)
            problems = self._fit_problems(
                Phi, targets, site_weights, options, seeds, tasks
            )
            self._store(X, y, problems, keep, error_weights, dtype, merged)
        return self

    def _check_memory(self, n_samples, n_weights, n_classes):
        """Refuse a fit whose square matrices would not fit in memory.

        A problem solving in the weight space holds about
        ``_WEIGHT_SPACE_WORK`` ``d x d`` matrices (``d = n_weights``) while
        it runs and keeps one (its ``L^-1``) for prediction; in the dual
        space ``_DUAL_SPACE_WORK`` ``n x n`` ones, and keeps one.
        """
        n_problems = 1 if n_classes == 2 else n_classes
        concurrent = min(n_problems, max(1, effective_n_jobs(self.n_jobs)))
        weight = self.space_ == "weight"
        side = n_weights if weight else n_samples
        work = _WEIGHT_SPACE_WORK if weight else _DUAL_SPACE_WORK
        needed = 8.0 * side**2 * (work * concurrent + n_problems)
        check_memory(
            needed,
            f"A TAPPerceptronClassifier fit in the {self.space_} space "
            f"({side} x {side} matrices, {n_problems} problem(s), "
            f"{concurrent} at once)",
            "Reduce the number of features (a random projection or PCA)"
            if weight
            else "Use space='weight' or fewer samples",
        )

    def _fit_problems(self, Phi, targets, site_weights, options, seeds, tasks):
        try:
            if len(targets) == 1:
                return [
                    fit_binary(
                        Phi,
                        targets[0],
                        site_weights,
                        options,
                        int(seeds[0]),
                        self.n_jobs,
                        tasks[0],
                    )
                ]
            return run_parallel(
                fit_binary,
                [
                    (Phi, t, site_weights, options, int(s), 1, task)
                    for t, s, task in zip(targets, seeds, tasks)
                ],
                n_jobs=self.n_jobs,
            )
        except LinAlgError as error:
            raise ValueError(
                "The TAP equations met a posterior that is not positive "
                f"definite ({error}); check the data for extreme scales."
            ) from error

    def _store(self, X, y, problems, keep, weights, dtype, merged=None):
        weights_mean = np.vstack([fit.weight_mean for fit in problems])
        n_features = X.shape[1]
        coef = weights_mean[:, :n_features] / np.sqrt(n_features)
        if self.fit_intercept:
            intercept = weights_mean[:, n_features].copy()
        else:
            intercept = np.zeros(len(problems))
        self._variance_models = [fit.variance_model for fit in problems]
        self._likelihoods = [fit.likelihood for fit in problems]
        noise = np.array([fit.likelihood.label_noise for fit in problems])
        self.label_noise_ = float(noise[0]) if len(noise) == 1 else noise
        self.n_iter_ = int(max(fit.solution.n_iter for fit in problems))
        # coef_ and intercept_ follow X's dtype (solved in float64).
        self.coef_ = coef.astype(dtype, copy=False)
        self.intercept_ = intercept.astype(dtype, copy=False)

        likelihoods = self._likelihoods
        solutions = [fit.solution for fit in problems]
        if merged is None:
            loo_proba, _ = leave_one_out(likelihoods, solutions, self.classes_, y[keep])
        else:
            # A merged sample leaves its own share of the merged site out.
            keep = merged.kept
            loo_proba = positive_to_proba(
                np.column_stack(
                    [
                        likelihood.predictive_positive(
                            *partial_cavities(s, merged.group, merged.share)
                        )
                        for likelihood, s in zip(likelihoods, solutions)
                    ]
                )
            )
        if len(keep) < X.shape[0]:
            # A sample of weight zero was not in the fit: its leave-one-out
            # prediction is the model's own.
            full = np.empty((X.shape[0], len(self.classes_)))
            full[keep] = loo_proba
            dropped = np.setdiff1d(np.arange(X.shape[0]), keep)
            full[dropped] = self._proba64(X[dropped])
            loo_proba = full
        self.loo_proba_ = loo_proba
        loo_labels = self.classes_[np.argmax(loo_proba, axis=1)]
        self.loo_error_ = weighted_error_rate(y, loo_labels, weights)

    def _fields(self, X):
        """Mean and variance of each problem's field at validated ``X``,
        divided by the input scale (both in float64), and the dtype of the
        outputs: the preamble of every prediction method."""
        check_is_fitted(self)
        X = validate_data(
            self,
            X,
            reset=False,
            accept_sparse=("csr", "csc"),
            dtype=[np.float64, np.float32],
        )
        dtype = np.result_type(X.dtype, self.coef_.dtype)
        return (*self._fields64(X.astype(np.float64, copy=False)), dtype)

    def _fields64(self, X):
        scale = self._input_scale
        coef = np.asarray(self.coef_, dtype=np.float64)
        intercept = np.asarray(self.intercept_, dtype=np.float64)
        mean = (X / scale) @ coef.T + intercept / scale
        Phi = self._design(X)
        var = np.column_stack(
            [model.field_variance(Phi) for model in self._variance_models]
        )
        return np.asarray(mean), np.maximum(var, 0.0)

    def _proba64(self, X):
        return self._proba(*self._fields64(X))

    def _proba(self, mean, var):
        return positive_to_proba(self._positive(mean, var))

    def _standardised(self, mean, var):
        return mean / np.sqrt(np.maximum(var, np.finfo(float).tiny))

    def _positive(self, mean, var):
        # A field known exactly (var = 0) gives the likelihood at its mean.
        var = np.maximum(var, np.finfo(float).tiny)
        return np.column_stack(
            [
                likelihood.predictive_positive(mean[:, k], var[:, k])
                for k, likelihood in enumerate(self._likelihoods)
            ]
        )

    def _log_positive(self, z):
        """``log(kappa_k + (1 - 2 kappa_k) Phi(z_k))`` column by column, with
        each problem's label noise ``kappa_k``."""
        label_noise = np.atleast_1d(self.label_noise_)
        return np.column_stack(
            [log_noisy_step(z[:, k], noise) for k, noise in enumerate(label_noise)]
        )

    def decision_function(self, X):
        """Mean field in units of its posterior standard deviation.

        Two classes: ``z = <h> / sqrt(Var h)`` with ``<h> = X @ coef_.T +
        intercept_``; its sign is the Bayes prediction ``sign(<w> . x)``
        and :meth:`predict_proba` is an increasing function of it, so both
        rank the samples alike.  More classes: the log-odds of each
        one-vs-rest probability, ``log(p_k / (1 - p_k))`` with ``p_k =
        label_noise_k + (1 - 2 label_noise_k) Phi(z_k)``, so that its argmax
        is :meth:`predict` when the problems' label noises differ.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_samples,) for two classes (positive favours
        ``classes_[1]``), else (n_samples, n_classes).  float32 for float32
        inputs to a float32 fit (like the fitted coefficients), else float64.
        """
        mean, var, dtype = self._fields(X)
        z = self._standardised(mean, var)
        if z.shape[1] == 1:
            return z[:, 0].astype(dtype, copy=False)
        log_odds = self._log_positive(z) - self._log_positive(-z)
        return log_odds.astype(dtype, copy=False)

    def predict_proba(self, X):
        """Predictive probabilities, integrating over the field's posterior.

        ``p(y = +1 | x) = label_noise + (1 - 2 label_noise)
        Phi(<h> / sqrt(Var h))`` with the field's Gaussian posterior; more than
        two classes: the one-vs-rest probabilities, normalised.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_samples, n_classes)
        """
        mean, var, dtype = self._fields(X)
        return self._proba(mean, var).astype(dtype, copy=False)

    def predict_log_proba(self, X):
        """Logarithm of :meth:`predict_proba`, accurate in the tails.

        Computed from ``log(label_noise + (1 - 2 label_noise) Phi(z))`` (a
        log-sum-exp of ``log Phi``), not as the log of a probability: a
        sample 40 standard deviations on the wrong side gets ``log Phi(-40)
        = -804.6`` instead of ``log 0``.  With more than two classes, the
        one-vs-rest terms are normalised in log space.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_samples, n_classes)
        """
        mean, var, dtype = self._fields(X)
        z = self._standardised(mean, var)
        log_positive = self._log_positive(z)
        if z.shape[1] == 1:
            # 1 - kappa - (1 - 2 kappa) Phi(z) = kappa + (1 - 2 kappa) Phi(-z).
            log_proba = np.column_stack(
                [self._log_positive(-z)[:, 0], log_positive[:, 0]]
            )
        else:
            with np.errstate(divide="ignore"):
                total = logsumexp(log_positive, axis=1, keepdims=True)
            uniform = np.full_like(log_positive, -np.log(z.shape[1]))
            with np.errstate(invalid="ignore"):
                log_proba = np.where(np.isfinite(total), log_positive - total, uniform)
        return log_proba.astype(dtype, copy=False)

    def predict(self, X):
        """Bayes prediction: ``sign(<w> . x)``; one-vs-rest, the most probable.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        scores = self.decision_function(X)
        if scores.ndim == 1:
            return self.classes_[(scores > 0).astype(int)]
        return self.classes_[np.argmax(scores, axis=1)]


def _sites(X, Phi, y_index, weights):
    """The samples that get a site, the sites' weights and the merged
    identical samples (:class:`~sklearn_meanfield.tap._merging.MergedPoints` or
    None).

    A sample whose field is identically zero (all-zero inputs, no intercept)
    has a likelihood that does not depend on w: it is left out of the
    equations like a weight of zero (its site would have zero prior variance
    and no cavity).
    """
    informative = _row_norms_squared(Phi) > 0
    if not np.all(informative):
        if not np.any(informative):
            raise ValueError(
                "Every sample's inputs are zero and there is no intercept: "
                "the labels say nothing about the weights."
            )
        weights = np.ones(X.shape[0]) if weights is None else weights
        weights = np.where(informative, weights, 0.0)
        if not np.any(weights > 0):
            raise ValueError(
                "Every sample with nonzero inputs has weight zero: there "
                "is nothing to fit."
            )
    keep, site_weights = positive_site_weights(weights, X.shape[0])
    merged = merge_identical_points(X, y_index, keep, weights)
    if merged is not None:
        keep, site_weights = merged.rows, merged.site_weights
    return keep, site_weights, merged
