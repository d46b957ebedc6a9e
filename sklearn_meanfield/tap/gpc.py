"""Gaussian-process classification by TAP mean-field theory (Opper & Winther)."""

import warnings
from dataclasses import replace
from functools import partial
from numbers import Integral, Real

import numpy as np
from joblib import effective_n_jobs
from scipy.optimize import minimize
from sklearn.base import BaseEstimator, ClassifierMixin, _fit_context
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF, CompoundKernel, Kernel
from sklearn.gaussian_process.kernels import ConstantKernel as C
from sklearn.utils import _safe_indexing, check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import (
    _check_sample_weight,
    _num_samples,
    check_array,
    check_is_fitted,
    validate_data,
)

from .._base import atomic_fit
from .._parallel import N_JOBS_CONSTRAINT, dask_client, draw_seeds, run_parallel
from .._progress import CallbackSupportMixin, fit_progress
from ._binary_gpc import (
    LABEL_NOISE_BOUNDS,
    BinaryProblem,
    FitOptions,
    contradicted_points,
    fit_binary,
    log_evidence,
)
from ._footprint import check_gp_fit_memory
from ._kernels import default_kernel
from ._multiclass import (
    ProblemKernels,
    class_sample_weights,
    encode_classes,
    one_vs_one_pairs,
    one_vs_one_votes,
    one_vs_rest_targets,
    pairwise_coupling,
    positive_to_proba,
    warn_if_no_better_than_majority,
)
from ._multinomial_gpc import (
    SparsePrior,
    check_multinomial_memory,
    check_sparse_multinomial_memory,
    fit_multinomial,
    multinomial_log_evidence,
)
from ._sparse_gpc import (
    InducingOptions,
    check_sparse_fit_memory,
    fit_sparse_binary,
    row_blocks,
)
from ._sparse_gpc import log_evidence as sparse_log_evidence
from ._weights import positive_site_weights, weighted_error_rate

# LABEL_NOISE_BOUNDS and contradicted_points are documented under this
# module's name (user guide, warnings).
__all__ = ["LABEL_NOISE_BOUNDS", "TAPGaussianProcessClassifier", "contradicted_points"]


PREFIX = "TAPGaussianProcessClassifier"

# ``n_inducing="auto"``: exact up to this many samples, AUTO_N_INDUCING
# inducing inputs above.  An exact fit's cost grows as n^3 (the optimiser
# repeats it at every evaluation) and it holds about ten n x n arrays, while
# 256 inducing inputs stay close to the exact model (within 0.005 of its
# held-out log-loss at 2000 samples).
AUTO_EXACT_MAX_SAMPLES = 4000
AUTO_N_INDUCING = 256


def _fmin_l_bfgs_b(obj_func, initial_theta, bounds):
    """``optimizer="fmin_l_bfgs_b"``: scikit-learn's optimiser signature, a
    ConvergenceWarning when L-BFGS-B stops early (its best point is used)."""
    result = minimize(
        obj_func, initial_theta, method="L-BFGS-B", jac=True, bounds=bounds
    )
    if not result.success:
        warnings.warn(
            "L-BFGS-B stopped before convergence while maximising the "
            f"TAP evidence ({result.message}); the best point found is "
            "used.",
            ConvergenceWarning,
        )
    return result.x, float(result.fun)


def _take(X, rows):
    """Rows ``rows`` of ``X`` (all of them for None)."""
    return X if rows is None else _safe_indexing(X, rows)


class TAPGaussianProcessClassifier(
    CallbackSupportMixin, ClassifierMixin, BaseEstimator
):
    """Gaussian-process classification by adaptive TAP mean-field theory.

    The posterior over the latent function is approximated by Opper and
    Winther's adaptive TAP equations, whose fixed point is that of expectation
    propagation: a Gaussian site per training point, solved with damped
    parallel updates and one Cholesky factorisation per sweep.  Unlike the
    Laplace approximation of :class:`~sklearn.gaussian_process.
    GaussianProcessClassifier`, the Gaussian is matched to the posterior's
    moments, which gives better-calibrated probabilities and an accurate
    approximation of the evidence, maximised over the kernel hyperparameters
    with its analytic gradient.  The cavity distributions of the converged
    solution are leave-one-out predictive distributions, so ``loo_error_`` and
    ``loo_proba_`` come with every fit, without refitting.

    The parameters, attributes and methods of scikit-learn's
    ``GaussianProcessClassifier`` are all here with the same meaning
    (``multi_class``, ``copy_X_train``, ``latent_mean_and_variance``,
    ``log_marginal_likelihood(theta, eval_gradient, clone_kernel)``), except
    ``max_iter_predict`` and ``warm_start`` (the Laplace approximation's
    Newton iterations; here ``max_iter`` and the optimiser's own warm starts).
    More than two classes are handled one-vs-rest (default) or one-vs-one,
    the binary problems fitted in parallel, or by one multinomial probit
    model for all classes, solved by nested EP.

    Parameters
    ----------
    kernel : kernel instance, default=None
        Any :mod:`sklearn.gaussian_process.kernels` kernel except a
        ``CompoundKernel``.  None means ``ConstantKernel(1.0, (1e-5, 1e3)) *
        RBF(ell)``, ``ell`` the median distance between the training inputs,
        free within a factor 1000 of it: a start on the data's scale; a
        binary problem's amplitude goes on up to 1e5 when its evidence still
        climbs steeply at 1e3.  The hyperparameters are optimised unless
        ``optimizer=None``; a run that ends at a constant kernel is repeated
        from the data's length scale.
    likelihood : {"probit", "step", "logistic"}, default="probit"
        ``"step"``: ``label_noise + (1 - 2 label_noise) Theta(y h)``, the
        paper's model; ``"probit"``: the step with ``Phi(y h)``, i.e. unit
        Gaussian noise on the field; ``"logistic"``: ``1 / (1 + exp(-y h))``,
        the model of scikit-learn's GP classifier.  The logistic's heavier tails
        forgive mislabelled points more than the probit does; its cavity
        averages are computed by quadrature, so its fits take somewhat longer.
    label_noise : float in [0, 0.5) or "auto", default=0.0
        Probability that a training label was flipped; some site precisions
        are then negative (kept, not clipped).  ``"auto"`` learns it with the
        kernel's hyperparameters by maximising the TAP evidence within
        ``LABEL_NOISE_BOUNDS`` (``(1e-4, 0.4)``), per binary problem; it needs
        an ``optimizer`` and costs a few times the fit time, for
        better-calibrated probabilities on data with flipped labels.
    method : {"tap", "naive"}, default="tap"
        ``"tap"``: adaptive TAP (with the Onsager reaction term); ``"naive"``:
        naive mean field, whose cavity variance is the prior variance.  The
        hyperparameters are always chosen by the TAP evidence; ``method``
        selects the equations used for predictions and leave-one-out.
    optimizer : "auto", "fmin_l_bfgs_b", "stochastic", callable or None, \
            default="auto"
        Maximises the TAP log evidence over the kernel's log-hyperparameters:
        ``"fmin_l_bfgs_b"`` (L-BFGS-B, EP over all rows at every evaluation),
        ``"stochastic"`` (sparse mode: minibatch stochastic EP, then EP over
        all rows at the learned point, see :ref:`stochastic EP <stochastic_ep>`)
        or ``"auto"`` (stochastic in the sparse mode above
        ``STOCHASTIC_MIN_SAMPLES`` = 50,000 rows, else L-BFGS-B).  A callable
        has scikit-learn's signature ``optimizer(obj_func, initial_theta,
        bounds)``; None keeps the kernel fixed.
    n_restarts_optimizer : int, default=0
        Extra optimiser runs from log-uniform draws within the kernel bounds,
        run in parallel with ``n_jobs``; the largest evidence wins.
    max_iter : int, default=200
        Maximum number of mean-field sweeps per solve, and of epochs (a
        sweep over the sites by minibatches) of the stochastic search.
    tol : float, default=1e-5
        Convergence tolerance on the posterior marginals (in posterior
        standard deviations); the multinomial model's, on its inner
        factors' updates (in their directions' standard deviations).  The
        final solve then goes on to 1e-9, a few sweeps more (a fit with the
        kernel fixed takes up to twice as long for it), so that fits of one
        model agree to 1e-7: weighted rows and their repeats, any row order.
        The multinomial model stops short of it where its factors' rounding
        does (near 1e-8 at a kernel amplitude of 1000).
    damping : float in (0, 1], default=0.8
        Initial fraction of each parallel site update that is taken; reduced
        automatically when the updates oscillate.
    multi_class : {"one_vs_rest", "one_vs_one", "multinomial"}, default="one_vs_rest"
        ``"one_vs_rest"``: one binary problem per class, probabilities
        normalised to sum to one.  ``"one_vs_one"``: one problem per pair of
        classes, probabilities coupled (Wu, Lin and Weng); ``predict`` votes
        as :class:`sklearn.svm.SVC` does.  ``"multinomial"``: one model, a
        latent function per class with a shared kernel and the multinomial
        probit likelihood, by nested EP: better-calibrated probabilities for
        two to four times one-vs-rest's time (in the sparse mode the work
        grows as the square of the number of classes); probit only.  See
        :ref:`the user guide <multinomial_gpc>`.
    class_weight : dict, "balanced" or None, default=None
        Weights of the classes, multiplying ``sample_weight`` (see
        :meth:`fit`): ``{label: weight}`` (1 for a class not named), or
        ``"balanced"`` for ``sum(w) / (n_classes * sum(w[y == label]))`` with
        the sample weights ``w``, as
        :func:`sklearn.utils.class_weight.compute_class_weight` computes it.
        A binary problem weighs each sample by its own class's weight.
    copy_X_train : bool, default=True
        Store a copy of the training inputs in ``X_train_``.  False stores a
        reference when the validated input is the caller's array, so that
        changing that array later changes the model's predictions.
    n_inducing : int, "auto" or None, default="auto"
        Number ``m`` of inducing inputs of the sparse (FITC) approximation:
        ``O(n m^2)`` time a sweep and ``O(n m)`` memory, no ``n x n`` array.
        None fits the exact model, whose cost grows as ``n^3``; ``"auto"`` is
        exact up to 4000 samples (``AUTO_EXACT_MAX_SAMPLES``) and uses 256
        inducing inputs (``AUTO_N_INDUCING``) above.  More inducing inputs
        approach the exact model; every option works in both modes.  See
        :ref:`sparse_gpc` for how to choose ``m``.
    inducing_points : "kmeans" or array-like of shape (m, n_features), default="kmeans"
        Where the inducing inputs start: the k-means centres of each binary
        problem's inputs (Lloyd's k-means up to 10,000 samples, mini-batch
        k-means above, seeded from ``random_state``), or these inputs (which
        select the sparse mode with ``m`` rows whatever ``n_inducing``, unless
        it is an int that differs).
    optimize_inducing_points : bool, default=False
        Sparse mode: after learning the kernel at the starting inducing
        inputs, learn both on 90% of the rows (by the optimizer's search of
        the evidence), keeping the point whose Brier score on the other 10%
        beats the start's significantly (FITC's evidence alone over-fits the
        inputs), else the start; ``m * n_features`` more parameters and
        several times the fit time.  Needs an ``optimizer``.  The
        multinomial model scores the held-out rows by the multi-class Brier
        score of its predictive probabilities.  See :ref:`sparse_gpc`.
    n_jobs : int, default=None
        Workers for the multi-class problems (or, for two classes and the
        multinomial model, restarts);
        None defers to :func:`joblib.parallel_config`.  In the sparse mode
        under ``joblib.parallel_config(backend="dask")`` the rows are split
        into blocks that stay on the Dask workers and every sweep maps over
        them, only ``m x m`` statistics travelling; the model equals the local
        fit's to rounding.  See :ref:`parallel`.
    random_state : int, RandomState instance or None, default=None
        Draws the restarts' starting points.  The same value gives the same
        model for any ``n_jobs`` and backend.
    verbose : int, default=0
        1 prints a line per evidence evaluation of the optimiser, the best run
        and the final solve; 2 also every sweep of every solve.  With
        scikit-learn >= 1.9, ``set_callbacks`` (e.g.
        ``sklearn.callback.ProgressBar()``) follows the fit, one subtask per
        binary problem; a callback's request to stop ends the search at its
        best point so far and the solve at its best iterate, with a
        ``ConvergenceWarning``.  See :ref:`progress`.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    n_classes_ : int
        Number of classes.
    label_noise_ : float or ndarray of shape (n_problems,)
        The label noise of the fitted model: ``label_noise``, or the learned
        value(s) with ``"auto"`` (one per binary problem for more than two
        classes).
    kernel_ : kernel instance
        The fitted kernel (shared by the classes of the multinomial model);
        one-vs-rest and one-vs-one with more than two classes, a
        :class:`~sklearn.gaussian_process.kernels.CompoundKernel` of the
        binary problems' kernels (one per class, or one per pair of classes
        in the order of :class:`~sklearn.multiclass.OneVsOneClassifier`),
        whose repr lists each problem's kernel on its own line, named by its
        class or pair of classes.
    log_marginal_likelihood_value_ : numpy.float64
        TAP log evidence of the fitted kernel (mean over the binary problems;
        the multinomial model's own).
    loo_error_ : float
        Leave-one-out misclassification rate of ``predict``'s rule, from the
        cavity distributions, weighted by the sample weights when given.
        NaN (with a ``ConvergenceWarning``) when a binary problem's final
        solve did not converge or was stopped by a callback (its cavities are
        not those of a fixed point), or when the fitted model is degenerate:
        its predictions on the training points contradict its leave-one-out
        predictions, which no fixed point allows (typically the noise-free
        step likelihood on data the kernel separates only with huge fields).
    loo_proba_ : ndarray of shape (n_samples, n_classes)
        Leave-one-out predictive probabilities (as ``predict_proba`` of the
        model fitted without the sample); for a sample of zero weight, the
        model's own predictive probabilities.  All NaN when ``loo_error_``
        is.
    n_iter_ : int
        Mean-field sweeps of the final solve (largest over the binary
        problems).
    X_train_ : ndarray or list of object
        The training inputs (a copy unless ``copy_X_train=False``).
    inducing_points_ : ndarray of shape (m, n_features), list of them, or None
        Sparse mode: the fitted inducing inputs (a list with one array per
        binary problem for more than two classes); None in the exact mode.
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (n_features_in_,)

    See Also
    --------
    sklearn.gaussian_process.GaussianProcessClassifier : Laplace approximation.
    TAPPerceptronClassifier : the linear-kernel special case, in weight space.

    Notes
    -----
    In the exact mode one evaluation of the evidence costs ``O(n^3)`` per
    sweep (a Cholesky factorisation and a triangular solve) and stores a few
    ``n x n`` arrays; problems that would not fit in memory are refused
    before any work (``n_inducing`` gives the sparse mode, ``O(n m^2)`` and
    ``O(n m)``).

    ``decision_function`` is not the latent field's posterior mean (which
    :meth:`latent_mean_and_variance` gives) but the log-odds of
    ``predict_proba``: ranking by the mean ignores the field's posterior
    variance, which differs from point to point, so scorers that prefer
    ``decision_function`` (``"roc_auc"``, ``"average_precision"``) would
    score another ranking than the model's probabilities.

    References
    ----------
    .. [1] M. Opper and O. Winther, "Mean field methods for classification
       with Gaussian processes", Advances in Neural Information Processing
       Systems 11, 1998.
    .. [2] M. Opper and O. Winther, "Gaussian processes for classification:
       mean-field algorithms", Neural Computation 12, 2000.
    .. [3] C. E. Rasmussen and C. K. I. Williams, "Gaussian Processes for
       Machine Learning", MIT Press, 2006, section 3.6.
    .. [4] T. Minka, "Power EP", Microsoft Research technical report
       MSR-TR-2004-149, 2004.
    .. [5] T.-F. Wu, C.-J. Lin and R. C. Weng, "Probability estimates for
       multi-class classification by pairwise coupling", Journal of Machine
       Learning Research 5, 2004.
    .. [6] L. Csato and M. Opper, "Sparse on-line Gaussian processes", Neural
       Computation 14(3), 641-668, 2002.
    .. [7] A. Naish-Guzman and S. Holden, "The generalized FITC
       approximation", Advances in Neural Information Processing Systems 20,
       2008.
    .. [8] J. Riihimaki, P. Jylanki and A. Vehtari, "Nested expectation
       propagation for Gaussian process classification with a multinomial
       probit likelihood", Journal of Machine Learning Research 14, 75-109,
       2013.

    Examples
    --------
    >>> from sklearn.datasets import make_moons
    >>> from sklearn_meanfield import TAPGaussianProcessClassifier
    >>> X, y = make_moons(n_samples=80, noise=0.2, random_state=0)
    >>> clf = TAPGaussianProcessClassifier(random_state=0).fit(X, y)
    >>> clf.score(X, y) > 0.9
    True
    >>> bool(abs(clf.loo_error_ - 0.1) < 0.1)
    True
    >>> clf.predict_proba(X[:2]).shape
    (2, 2)
    """

    _parameter_constraints: dict = {
        "kernel": [None, Kernel],
        "likelihood": [StrOptions({"probit", "step", "logistic"})],
        "label_noise": [Interval(Real, 0, 0.5, closed="left"), StrOptions({"auto"})],
        "method": [StrOptions({"tap", "naive"})],
        "optimizer": [
            StrOptions({"auto", "fmin_l_bfgs_b", "stochastic"}),
            callable,
            None,
        ],
        "n_restarts_optimizer": [Interval(Integral, 0, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="neither")],
        "damping": [Interval(Real, 0, 1, closed="right")],
        "multi_class": [StrOptions({"one_vs_rest", "one_vs_one", "multinomial"})],
        "class_weight": [dict, StrOptions({"balanced"}), None],
        "copy_X_train": ["boolean"],
        "n_inducing": [
            Interval(Integral, 1, None, closed="left"),
            StrOptions({"auto"}),
            None,
        ],
        "inducing_points": [StrOptions({"kmeans"}), "array-like"],
        "optimize_inducing_points": ["boolean"],
        "n_jobs": N_JOBS_CONSTRAINT,
        "random_state": ["random_state"],
        "verbose": ["verbose"],
    }

    def __init__(
        self,
        kernel=None,
        *,
        likelihood="probit",
        label_noise=0.0,
        method="tap",
        optimizer="auto",
        n_restarts_optimizer=0,
        max_iter=200,
        tol=1e-5,
        damping=0.8,
        multi_class="one_vs_rest",
        class_weight=None,
        copy_X_train=True,
        n_inducing="auto",
        inducing_points="kmeans",
        optimize_inducing_points=False,
        n_jobs=None,
        random_state=None,
        verbose=0,
    ):
        self.kernel = kernel
        self.likelihood = likelihood
        self.label_noise = label_noise
        self.method = method
        self.optimizer = optimizer
        self.n_restarts_optimizer = n_restarts_optimizer
        self.max_iter = max_iter
        self.tol = tol
        self.damping = damping
        self.multi_class = multi_class
        self.class_weight = class_weight
        self.copy_X_train = copy_X_train
        self.n_inducing = n_inducing
        self.inducing_points = inducing_points
        self.optimize_inducing_points = optimize_inducing_points
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose

    def _options(self):
        """The :class:`FitOptions` of the (validated) parameters."""
        learned = self.label_noise == "auto"
        optimizer = self.optimizer
        stochastic = {"auto": "auto", "stochastic": True}.get(optimizer, False)
        if isinstance(optimizer, str):
            optimizer = _fmin_l_bfgs_b
        return FitOptions(
            likelihood=self.likelihood,
            label_noise=None if learned else self.label_noise,
            learns_label_noise=learned,
            method=self.method,
            optimizer=optimizer,
            n_restarts_optimizer=self.n_restarts_optimizer,
            max_iter=self.max_iter,
            tol=self.tol,
            damping=self.damping,
            verbose=self.verbose,
            default_kernel=self.kernel is None,
            stochastic=stochastic,
        )

    def _base_kernel(self):
        if self.kernel is None:
            return C(1.0) * RBF(1.0)
        return self.kernel

    def _requires_vector_input(self):
        try:
            return bool(self._base_kernel().requires_vector_input)
        except (TypeError, AttributeError):  # e.g. an empty CompoundKernel
            return True

    def _validation_kwargs(self):
        vector = self._requires_vector_input()
        return dict(ensure_2d=vector, dtype="numeric" if vector else None)

    def _validate_X(self, X):
        return validate_data(self, X, reset=False, **self._validation_kwargs())

    def _problem_specs(self, y_index, sample_weight):
        """Rows, +-1 targets and site weights of each binary problem.

        Rows of zero weight are left out (a zero weight is a missing sample);
        the weights are None when every kept row weighs one.
        """
        n_classes = len(self.classes_)
        n = len(y_index)
        if n_classes == 2 or self.multi_class == "one_vs_rest":
            specs = [(None, t) for t in one_vs_rest_targets(y_index, n_classes)]
        else:
            specs = []
            for i, j in one_vs_one_pairs(n_classes):
                rows = np.flatnonzero((y_index == i) | (y_index == j))
                specs.append((rows, np.where(y_index[rows] == j, 1.0, -1.0)))
        keep, _ = positive_site_weights(sample_weight, n)
        problems = []
        for rows, t in specs:
            rows_all = np.arange(n) if rows is None else rows
            kept = np.isin(rows_all, keep)
            rows_kept = rows_all[kept]
            if not kept.any():
                raise ValueError(
                    "Every sample of a one-vs-one pair of classes has zero weight: "
                    "give some weight to at least all but one of the classes."
                )
            if rows is None and kept.all():
                rows_kept = None
            weights = None
            if sample_weight is not None:
                w = sample_weight[rows_all[kept]]
                weights = None if np.all(w == 1.0) else w
            problems.append(BinaryProblem(rows_kept, t[kept], weights))
        return problems

    @_fit_context(prefer_skip_nested_validation=True)
    @atomic_fit
    def fit(self, X, y, sample_weight=None):
        """Fit the TAP mean-field Gaussian-process classifier.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or list of object
            Training inputs.
        y : array-like of shape (n_samples,)
            Target labels.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weights, with scikit-learn's meaning: an integer
            weight is the sample repeated that many times, zero a sample
            left out.  A weighted sample's site stands for its likelihood
            raised to the weight (power EP: its cavity removes one copy of
            the site, its tilted distribution holds the likelihood once), so
            integer weights give the fixed point, evidence and predictions of
            the repeated data; zero-weight samples are dropped before EP.
            For light samples (weight below ``AUTO_TEMPERED_BELOW``, 0.7,
            or below one with the step likelihood) the binary problems
            temper the likelihood instead (plain EP on its power); below one
            the multinomial model tempers each probit factor of the sample's
            nested likelihood, its cavity removing the whole site.
            Multiplied by the ``class_weight`` of each sample's class.

        Returns
        -------
        self : object
            The fitted estimator.

        Raises
        ------
        ValueError
            If ``kernel`` is a ``CompoundKernel``, if ``y`` holds a single
            class (there is nothing to classify), if every weight is zero, or
            if ``X`` or ``y`` is invalid (NaN, infinity, wrong shape).
        MemoryError
            Before any work, if the n x n kernel matrices would not fit in
            memory; the message gives the size.
        """
        if isinstance(self.kernel, CompoundKernel):
            raise ValueError(
                "kernel cannot be a CompoundKernel: multi-class problems get a "
                "copy of the kernel each, and the fitted kernel_ is a "
                "CompoundKernel of them."
            )
        if self.multi_class == "multinomial":
            self._check_multinomial_options()
        if self.label_noise == "auto" and self.optimizer is None:
            raise ValueError(
                "label_noise='auto' learns the label noise with the optimizer; "
                "with optimizer=None give the label noise as a number."
            )
        X, y = validate_data(self, X, y, **self._validation_kwargs())
        self.classes_, y_index = encode_classes(y, type(self).__name__)
        self.n_classes_ = len(self.classes_)
        sample_weight = self._sample_weight(X, y, sample_weight)
        kernel = (
            default_kernel(X, sample_weight) if self.kernel is None else self.kernel
        )
        rng = check_random_state(self.random_state)
        options = self._options()

        if self._multinomial():
            self.X_train_ = np.copy(X) if self.copy_X_train else X
            self._fit_multinomial(X, y, y_index, kernel, sample_weight, rng)
            return self
        inducing = self._inducing_options(X)
        if inducing is None and self.optimizer == "stochastic":
            raise ValueError(
                "optimizer='stochastic' searches the sparse mode (an integer "
                "n_inducing, or 'auto' above AUTO_EXACT_MAX_SAMPLES samples); the "
                "exact model's evidence needs every row at once: use 'auto' or "
                "'fmin_l_bfgs_b'."
            )
        self.X_train_ = np.copy(X) if self.copy_X_train else X
        problems = self._problem_specs(y_index, sample_weight)
        # Sparse mode under joblib's Dask backend: the row blocks live on the
        # workers, the problems take turns here.
        client = None if inducing is None else dask_client()
        if client is None:
            self._check_memory(X, kernel, len(problems), inducing)
        fit_problem = fit_binary
        if inducing is not None:
            fit_problem = partial(fit_sparse_binary, inducing=inducing, client=client)
        seeds = draw_seeds(rng, len(problems))
        with fit_progress(
            self, self.verbose, max_steps=len(problems), X=X, y=y
        ) as reporter:
            tasks = reporter.task.subtasks(len(problems), "problem", max_steps=None)
            single = len(problems) == 1
            calls = [
                (
                    _take(self.X_train_, problem.rows),
                    problem.t,
                    kernel,
                    options if single else replace(options, prefix=f"{PREFIX} {name}"),
                    int(seed),
                    self.n_jobs if single else 1,
                    task,
                    problem.weights,
                )
                for problem, seed, task, name in zip(
                    problems, seeds, tasks, self._problem_names()
                )
            ]
            if single or client is not None:
                fits = [fit_problem(*call) for call in calls]
            else:
                fits = run_parallel(fit_problem, calls, n_jobs=self.n_jobs)
        self._problems, self._fits = problems, fits
        self._store(X, y, sample_weight)
        return self

    def _multinomial(self):
        """Whether the fitted (or to be fitted) model is the coupled one; two
        classes are the binary probit model, which it reduces to."""
        return self.multi_class == "multinomial" and self.n_classes_ > 2

    def _check_multinomial_options(self):
        """Refuse the options the multinomial probit model does not have."""
        if self.likelihood != "probit" or self.label_noise != 0.0:
            raise ValueError(
                "multi_class='multinomial' is the multinomial probit model: "
                "likelihood='probit' with label_noise=0.0 (got likelihood="
                f"{self.likelihood!r}, label_noise={self.label_noise!r})."
            )
        if self.optimizer == "stochastic":
            raise ValueError(
                "optimizer='stochastic' is the binary problems' minibatch "
                "search; multi_class='multinomial' learns its kernel from the "
                "full-batch evidence: use 'auto' or 'fmin_l_bfgs_b'."
            )
        if self.method != "tap":
            raise ValueError(
                "multi_class='multinomial' is solved by nested EP, the adaptive "
                "TAP fixed point: method='tap' (got method='naive')."
            )

    def _fit_multinomial(self, X, y, y_index, kernel, sample_weight, rng):
        """Fit the coupled model on the rows of positive weight and store it."""
        keep, weights = positive_site_weights(sample_weight, len(y_index))
        rows = None if len(keep) == len(y_index) else keep
        X_kept = _take(self.X_train_, rows)
        inducing = self._inducing_options(X)
        # Sparse mode under joblib's Dask backend: the row blocks live on the
        # workers, the restarts take turns here.
        client = None if inducing is None else dask_client()
        if client is None:
            self._check_memory(X_kept, kernel, 1, inducing)
        labels = y_index if rows is None else y_index[rows]
        with fit_progress(self, self.verbose, max_steps=1, X=X, y=y) as reporter:
            fit = fit_multinomial(
                X_kept,
                labels,
                self.n_classes_,
                kernel,
                self._options(),
                int(draw_seeds(rng, 1)[0]),
                self.n_jobs,
                # One problem, as each binary one: its optimiser runs and its
                # solve are the problem's subtasks.
                reporter.task.subtask("problem", max_steps=None),
                weights,
                inducing=inducing,
                client=client,
            )
        self._multinomial_rows, self._multinomial_fit = rows, fit
        self.kernel_ = fit.kernel
        self.log_marginal_likelihood_value_ = np.float64(fit.log_evidence)
        self.n_iter_ = int(fit.solution.n_iter)
        self.label_noise_ = 0.0
        self.inducing_points_ = fit.inducing_points
        proba = self._loo_positive(_num_samples(X)) if fit.loo_valid else None
        decided = None if proba is None else np.argmax(proba, axis=1)
        self._store_loo(_num_samples(X), y, sample_weight, proba, decided)

    def _store(self, X, y, sample_weight):
        """The fitted attributes of the binary problems' fits."""
        fits = self._fits
        kernels = [fit.kernel.clone_with_theta(fit.kernel.theta) for fit in fits]
        self.kernel_ = (
            kernels[0]
            if len(kernels) == 1
            else ProblemKernels(kernels, self._problem_names())
        )
        self.log_marginal_likelihood_value_ = np.mean(
            [fit.log_evidence for fit in fits]
        )
        self.n_iter_ = int(max(fit.solution.n_iter for fit in fits))
        noise = np.array([fit.label_noise for fit in fits], dtype=float)
        self.label_noise_ = float(noise[0]) if len(noise) == 1 else noise
        inducing = [getattr(fit, "inducing_points", None) for fit in fits]
        self.inducing_points_ = inducing[0] if len(inducing) == 1 else inducing
        if inducing[0] is None:
            self.inducing_points_ = None

        proba = decided = None
        if all(fit.loo_valid for fit in fits):
            positive = self._loo_positive(_num_samples(X))
            proba, decided = self._proba(positive), self._decide(positive)
        self._store_loo(_num_samples(X), y, sample_weight, proba, decided)

    def _store_loo(self, n_samples, y, sample_weight, proba, decided):
        """``loo_proba_`` and ``loo_error_`` from the leave-one-out class
        probabilities and decided class indices; NaN when ``proba`` is None
        (the fit warned why)."""
        if proba is None:
            self.loo_proba_ = np.full((n_samples, self.n_classes_), np.nan)
            self.loo_error_ = float("nan")
            return
        self.loo_proba_ = proba
        self.loo_error_ = weighted_error_rate(y, self.classes_[decided], sample_weight)
        warn_if_no_better_than_majority(
            self.loo_error_,
            y,
            sample_weight,
            f"The fitted kernel is {self.kernel_}. If the classes depend on "
            "X, standardise the features, raise n_restarts_optimizer or pass "
            "a kernel on the data's scale.",
        )

    def _problem_names(self):
        """Names of the binary problems, for ``kernel_``'s repr."""
        labels = [repr(c.item() if hasattr(c, "item") else c) for c in self.classes_]
        if self._one_vs_one():
            return [
                f"{labels[i]} vs {labels[j]}"
                for i, j in one_vs_one_pairs(self.n_classes_)
            ]
        return [f"class {label}" for label in labels]

    def _sample_weight(self, X, y, sample_weight):
        """The validated sample weights times the class weights (or None)."""
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
            raise ValueError("Every sample weight is zero: there is nothing to fit.")
        return sample_weight

    def _inducing_options(self, X):
        """The sparse mode's :class:`InducingOptions`, or None (exact)."""
        n_inducing, points = self.n_inducing, self.inducing_points
        given = not isinstance(points, str)
        if not given and n_inducing is None:
            return None
        vector = self._requires_vector_input()
        if not given and n_inducing == "auto":
            if _num_samples(X) <= AUTO_EXACT_MAX_SAMPLES or not vector:
                return None
            n_inducing = AUTO_N_INDUCING
        if not vector:
            raise ValueError(
                "The sparse mode (n_inducing, inducing_points) needs numeric "
                "vector inputs; use n_inducing=None for this kernel."
            )
        if self.optimize_inducing_points and self.optimizer is None:
            raise ValueError(
                "optimize_inducing_points=True needs an optimizer; with "
                "optimizer=None the inducing inputs stay where they start."
            )
        if given:
            points = check_array(points, dtype=np.float64, input_name="inducing_points")
            if points.shape[1] != self.n_features_in_:
                raise ValueError(
                    f"inducing_points has {points.shape[1]} features; X has "
                    f"{self.n_features_in_}."
                )
            if isinstance(n_inducing, Integral) and n_inducing != len(points):
                raise ValueError(
                    f"n_inducing={n_inducing} but inducing_points has "
                    f"{len(points)} rows; give one of them (or equal ones)."
                )
            n_inducing = len(points)
        return InducingOptions(
            n_inducing, init=points, learn=bool(self.optimize_inducing_points)
        )

    def _check_memory(self, X, kernel, n_problems, inducing=None):
        """Refuse, before any work, a fit whose arrays cannot fit.

        Exact mode: counts the kernel's own temporaries, the EP work, the
        factors kept by finished problems and every concurrent worker
        (:func:`~sklearn_meanfield.tap._footprint.gp_fit_peak_bytes`);
        sparse mode: the ``n x m`` arrays of every concurrent worker
        (:func:`~sklearn_meanfield.tap._sparse_gpc.sparse_fit_peak_bytes`).
        The multinomial model's one problem: its ``n x n`` arrays a class, or
        its ``n x m`` and ``C m x C m`` ones
        (:mod:`~sklearn_meanfield.tap._multinomial_gpc`).
        """
        optimise = self.optimizer is not None
        parallel_tasks = (
            n_problems if n_problems > 1 else 1 + self.n_restarts_optimizer * optimise
        )
        n_concurrent = max(1, min(effective_n_jobs(self.n_jobs), parallel_tasks))
        if self._multinomial():
            n = _num_samples(X)
            if inducing is None:
                check_multinomial_memory(
                    n, self.n_classes_, kernel.n_dims, optimise, n_concurrent
                )
            else:
                check_sparse_multinomial_memory(
                    n, inducing.n_inducing, self.n_classes_, n_concurrent
                )
            return
        if inducing is not None:
            check_sparse_fit_memory(
                _num_samples(X),
                inducing.n_inducing,
                self.n_features_in_,
                kernel.n_dims,
                n_concurrent,
            )
            return
        check_gp_fit_memory(
            kernel,
            X,
            optimise=optimise,
            n_problems=n_problems,
            n_concurrent=n_concurrent,
            method=self.method,
            likelihood=self.likelihood,
        )

    def _problem_latent(self, k, X):
        """Predictive mean and variance of problem ``k``'s field at ``X``."""
        return self._fits[k].latent(_take(self.X_train_, self._problems[k].rows), X)

    def _positive(self, X):
        """Each problem's predictive probability of its positive class (the
        multinomial model: the class probabilities)."""
        if self._multinomial():
            return self._multinomial_fit.proba(
                _take(self.X_train_, self._multinomial_rows), X
            )
        columns = []
        for k, fit in enumerate(self._fits):
            mean, var = self._problem_latent(k, X)
            columns.append(fit.likelihood.predictive_positive(mean, var))
        return np.column_stack(columns)

    def _loo_positive(self, n_samples):
        """Leave-one-out probability of each problem's positive class.

        A sample a problem was fitted on gets its cavity's prediction (the
        problem refitted without it); any other sample (of another pair of
        classes, or of zero weight) the problem's plain prediction, since
        leaving it out changes nothing.  The multinomial model: the class
        probabilities of its C-dimensional cavities.
        """
        if self._multinomial():
            rows = self._multinomial_rows
            proba = self._multinomial_fit.solution.loo_proba()
            if rows is None:
                return proba
            out = np.empty((n_samples, self.n_classes_))
            out[rows] = proba
            others = np.setdiff1d(np.arange(n_samples), rows)
            if others.size:
                out[others] = self._positive(_safe_indexing(self.X_train_, others))
            return out
        columns = []
        for k, (problem, fit) in enumerate(zip(self._problems, self._fits)):
            likelihood, solution = fit.likelihood, fit.solution
            column = np.empty(n_samples)
            rows = problem.rows
            rows = np.arange(n_samples) if rows is None else rows
            column[rows] = likelihood.predictive_positive(
                solution.cavity_mean, solution.cavity_var
            )
            others = np.setdiff1d(np.arange(n_samples), rows)
            if others.size:
                mean, var = self._problem_latent(
                    k, _safe_indexing(self.X_train_, others)
                )
                column[others] = likelihood.predictive_positive(mean, var)
            columns.append(column)
        return np.column_stack(columns)

    def _one_vs_one(self):
        return self.n_classes_ > 2 and self.multi_class == "one_vs_one"

    def _proba(self, positive):
        if self._multinomial():
            return positive
        if self._one_vs_one():
            return pairwise_coupling(positive, self.n_classes_)
        return positive_to_proba(positive)

    def _decision(self, positive):
        if self._one_vs_one():
            return one_vs_one_votes(positive, self.n_classes_)
        log_proba = np.log(np.maximum(self._proba(positive), np.finfo(float).tiny))
        if self.n_classes_ == 2:
            return log_proba[:, 1] - log_proba[:, 0]
        return log_proba

    def _decide(self, positive):
        """Index of the predicted class of each row of ``positive``."""
        if self._one_vs_one():
            return np.argmax(one_vs_one_votes(positive, self.n_classes_), axis=1)
        return np.argmax(self._proba(positive), axis=1)

    def decision_function(self, X):
        """Confidence scores ordered as ``predict_proba``; argmax is ``predict``.

        For two classes, the log-odds ``log(p / (1 - p))`` of the predictive
        probability ``p`` of ``classes_[1]``: positive favours it, and it
        ranks samples exactly as ``predict_proba(X)[:, 1]`` does, which is
        what a scorer such as ``"roc_auc"`` (which prefers this method)
        should see.  It is not the latent field's posterior mean: the
        probability also depends on the field's posterior variance, which
        differs from point to point (:meth:`latent_mean_and_variance` gives
        both).  For more than two classes one-vs-rest, the log of
        ``predict_proba``; one-vs-one, the votes of the pairwise problems
        plus their summed probabilities squashed into ``(-1/3, 1/3)``, as
        :class:`sklearn.multiclass.OneVsOneClassifier` computes them.
        Probabilities below the smallest normal float count as that float,
        so the scores are finite.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or list of object

        Returns
        -------
        ndarray of shape (n_samples,) for two classes, else
        (n_samples, n_classes)
        """
        check_is_fitted(self)
        X = self._validate_X(X)
        return self._decision(self._positive(X))

    def predict_proba(self, X):
        """Predictive class probabilities.

        The likelihood is integrated over the Gaussian predictive distribution
        of the latent field (not evaluated at its mean).  For more than two
        classes the binary problems' probabilities are normalised to sum to
        one (one-vs-rest) or coupled (one-vs-one, see ``multi_class``); the
        multinomial model's are the nested-EP normalisers of each class
        under the classes' joint predictive Gaussian, which sum to one to
        within nested EP's accuracy (about 1%) and are divided by their
        sum.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or list of object

        Returns
        -------
        ndarray of shape (n_samples, n_classes)
            Columns in the order of ``classes_``; rows sum to one.
        """
        check_is_fitted(self)
        X = self._validate_X(X)
        return self._proba(self._positive(X))

    def predict(self, X):
        """Predicted class: the most probable one (one-vs-one: the most voted).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or list of object

        Returns
        -------
        ndarray of shape (n_samples,)
            Equal to ``classes_[argmax(decision_function(X))]``.
        """
        check_is_fitted(self)
        X = self._validate_X(X)
        return self.classes_[self._decide(self._positive(X))]

    def latent_mean_and_variance(self, X):
        """Posterior mean and variance of the latent function at ``X``.

        The Gaussian approximation of the field's posterior given the
        training labels (the converged sites), as scikit-learn's
        ``GaussianProcessClassifier.latent_mean_and_variance`` returns its
        Laplace approximation's.  Only for two classes, as there.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or list of object

        Returns
        -------
        latent_mean : ndarray of shape (n_samples,)
        latent_var : ndarray of shape (n_samples,)

        Raises
        ------
        ValueError
            For more than two classes.
        """
        check_is_fitted(self)
        if self.n_classes_ > 2:
            raise ValueError(
                "Returning the mean and variance of the latent function f is "
                "only supported for binary classification, received "
                f"{self.n_classes_} classes."
            )
        X = self._validate_X(X)
        return self._problem_latent(0, X)

    def log_marginal_likelihood(
        self, theta=None, eval_gradient=False, clone_kernel=True
    ):
        """TAP (EP) approximation of the log marginal likelihood.

        In the sparse mode (``inducing_points_`` not None), the FITC-EP
        evidence at the fitted inducing inputs, which stay fixed: ``theta``
        and the gradient cover the kernel (and label noise) only.

        Parameters
        ----------
        theta : array-like or None, default=None
            Log-hyperparameters at which the evidence is evaluated; None
            returns ``log_marginal_likelihood_value_``.  For more than two
            classes, either one kernel's (every binary problem gets them) or
            the compound kernel's, ``kernel_.theta`` (each problem its own
            block), and the mean over the problems is returned.  With
            ``label_noise="auto"`` each block may hold ``log(label_noise)``
            as one more entry, last (the optimiser's search space, and the
            gradient's layout); without it the fitted label noise is used.
        eval_gradient : bool, default=False
            Also return the gradient with respect to ``theta`` (also for
            several classes, where scikit-learn's GP classifier has none).
        clone_kernel : bool, default=True
            False sets ``kernel_.theta`` to ``theta`` (its kernel part), as
            scikit-learn's GP classifier does; the fitted model's predictions
            are unchanged (they use the kernel it was fitted with).

        Returns
        -------
        log_likelihood : numpy.float64
        log_likelihood_gradient : ndarray of the shape of ``theta``
            Only when ``eval_gradient`` is True.
        """
        check_is_fitted(self)
        if theta is None:
            if eval_gradient:
                raise ValueError("Gradient can only be evaluated for theta!=None")
            return self.log_marginal_likelihood_value_
        theta = np.asarray(theta, dtype=float)
        if theta.ndim != 1 or not np.all(np.isfinite(theta)):
            raise ValueError(
                "theta must be a one-dimensional array of finite "
                f"log-hyperparameters (like kernel_.theta); got {theta!r}."
            )
        if self._multinomial():
            return self._multinomial_log_marginal_likelihood(
                theta, eval_gradient, clone_kernel
            )
        n_problems = len(self._problems)
        n_dims = self._fits[0].kernel.n_dims
        options = self._options()
        thetas, shared = self._problem_thetas(theta, options.learns_label_noise)
        values, gradients = [], []
        for problem, fit, theta_k in zip(self._problems, self._fits, thetas):
            problem_options = options
            if len(theta_k) == n_dims:
                problem_options = replace(
                    options, label_noise=fit.label_noise, learns_label_noise=False
                )
            X_k = _take(self.X_train_, problem.rows)
            Z = getattr(fit, "inducing_points", None)
            if Z is None:
                result = log_evidence(
                    theta_k,
                    X_k,
                    problem.t,
                    self._fits[0].kernel,
                    problem_options,
                    eval_gradient=eval_gradient,
                    weights=problem.weights,
                )
            else:  # at the fitted inducing inputs
                result = sparse_log_evidence(
                    theta_k,
                    np.asarray(X_k, dtype=float),
                    problem.t,
                    self._fits[0].kernel,
                    problem_options,
                    InducingOptions(len(Z), init=Z),
                    Z,
                    eval_gradient=eval_gradient,
                    weights=problem.weights,
                )
            values.append(result[0] if eval_gradient else result)
            if eval_gradient:
                gradients.append(result[1])
        if not clone_kernel:
            # (CompoundKernel's own theta setter is broken: set each kernel.)
            kernels = getattr(self.kernel_, "kernels", [self.kernel_])
            for kernel, theta_k in zip(kernels, thetas):
                kernel.theta = theta_k[:n_dims]
        value = np.mean(np.asarray(values, dtype=np.float64))
        if not eval_gradient:
            return value
        if shared:
            return value, np.mean(gradients, axis=0)
        return value, np.concatenate(gradients) / n_problems

    def _multinomial_log_marginal_likelihood(self, theta, eval_gradient, clone_kernel):
        """Nested EP's evidence of the multinomial model at ``theta``."""
        fit = self._multinomial_fit
        if len(theta) != fit.kernel.n_dims:
            raise ValueError(
                f"theta has {len(theta)} entries; expected {fit.kernel.n_dims} "
                "(the shared kernel's log-hyperparameters, like kernel_.theta)."
            )
        X = _take(self.X_train_, self._multinomial_rows)
        sparse = None
        Z = fit.inducing_points
        if Z is not None:  # at the fitted inducing inputs
            X = np.asarray(X, dtype=float)
            jitter = InducingOptions(len(Z), init=Z).jitter
            sparse = SparsePrior(Z, jitter, row_blocks(len(X), len(Z)))
        result = multinomial_log_evidence(
            theta,
            X,
            fit.solution.labels,
            self.n_classes_,
            fit.kernel,
            self._options(),
            eval_gradient=eval_gradient,
            weights=fit.solution.weights,
            sparse=sparse,
        )
        if not clone_kernel:
            self.kernel_.theta = theta
        if eval_gradient:
            return np.float64(result[0]), result[1]
        return np.float64(result)

    def _problem_thetas(self, theta, learned):
        """Each binary problem's block of ``theta`` and whether they share one.

        A block holds the kernel's log-hyperparameters, with ``log(label_noise)``
        last when it is learned (optional even then); ``theta`` is one block for
        every problem or the problems' blocks stacked.
        """
        n_problems = len(self._problems)
        n_dims = self._fits[0].kernel.n_dims
        blocks = [n_dims, n_dims + 1] if learned else [n_dims]
        if len(theta) in blocks:
            return [theta] * n_problems, True
        if len(theta) in [b * n_problems for b in blocks]:
            return np.split(theta, n_problems), False
        expected = " or ".join(
            str(b) for b in sorted({*blocks, *(b * n_problems for b in blocks)})
        )
        raise ValueError(
            f"theta has {len(theta)} entries; expected {expected} (the "
            "kernel's log-hyperparameters"
            + (", with log(label_noise) last" if learned else "")
            + (
                ", for one kernel or stacked for every binary problem"
                if n_problems > 1
                else ""
            )
            + ")."
        )

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        vector = self._requires_vector_input()
        tags.input_tags.two_d_array = vector
        tags.input_tags.string = not vector
        return tags
