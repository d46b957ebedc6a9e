"""The sparse (FITC) binary fit of tap/_sparse_gpc.py against independent references.

References: the exact TAP classifier (``TAPGaussianProcessClassifier`` with
``optimizer=None``) when the inducing inputs are the training inputs (the
FITC prior is then the full prior), central differences of the FITC-EP
evidence for its analytic gradient, brute-force refits of the same sparse
model without a point for the leave-one-out predictions, and the fit itself
on one and two joblib workers.
"""

import warnings

import numpy as np
import pytest
from callback_helpers import TickDeadline
from dask_helpers import local_dask_client
from sklearn.gaussian_process.kernels import RBF
from sklearn.gaussian_process.kernels import ConstantKernel as C
from sklearn.utils.estimator_checks import parametrize_with_checks

from sklearn_meanfield.tap._binary_gpc import FitOptions
from sklearn_meanfield.tap._sparse_gpc import (
    InducingOptions,
    fit_sparse_binary,
    initial_inducing_points,
    log_evidence,
)
from sklearn_meanfield.tap.gpc import TAPGaussianProcessClassifier, _fmin_l_bfgs_b


def _data(n, seed, dim=2, noise=0.1):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, dim))
    f = np.sin(2 * X[:, 0]) + X[:, 1] ** 2 - 1.0
    flip = rng.uniform(size=n) < noise
    t = np.where((f > 0) ^ flip, 1.0, -1.0)
    return X, t


def _options(likelihood="probit", label_noise=0.0, optimizer=None, **kwargs):
    kwargs.setdefault("tol", 1e-10)
    return FitOptions(
        likelihood=likelihood,
        label_noise=None if label_noise == "auto" else label_noise,
        learns_label_noise=label_noise == "auto",
        method=kwargs.pop("method", "tap"),
        optimizer=optimizer,
        n_restarts_optimizer=kwargs.pop("n_restarts_optimizer", 0),
        max_iter=kwargs.pop("max_iter", 500),
        damping=0.8,
        **kwargs,
    )


def _five_evaluations(obj_func, initial_theta, bounds):
    """L-BFGS-B stopped after five evaluations: the Dask tests follow the
    search's path for a few steps (each evaluation is a few dozen rounds of
    block tasks, slow on an in-process cluster)."""
    from scipy.optimize import minimize

    result = minimize(
        obj_func,
        initial_theta,
        method="L-BFGS-B",
        jac=True,
        bounds=bounds,
        options={"maxfun": 5},
    )
    return result.x, float(result.fun)


@pytest.mark.parametrize(
    "likelihood, label_noise, method",
    [
        ("probit", 0.0, "tap"),
        ("logistic", 0.0, "tap"),
        ("probit", 0.1, "tap"),
        ("step", 0.1, "tap"),
        ("probit", 0.0, "naive"),
    ],
)
def test_inducing_points_at_the_data_equal_the_exact_classifier(
    likelihood, label_noise, method
):
    X, t = _data(40, 0)
    kernel = C(1.3) * RBF(0.8)
    exact = TAPGaussianProcessClassifier(
        kernel,
        likelihood=likelihood,
        label_noise=label_noise,
        method=method,
        optimizer=None,
        tol=1e-10,
        max_iter=500,
    ).fit(X, t)
    options = _options(likelihood, label_noise, method=method)
    fit = fit_sparse_binary(X, t, kernel, options, 0, 1, inducing=InducingOptions(40))
    np.testing.assert_array_equal(fit.inducing_points, X)  # m >= n: the data
    X_new = np.random.default_rng(1).uniform(-2.5, 2.5, size=(25, 2))
    mean, var = fit.latent(None, X_new)
    exact_mean, exact_var = exact.latent_mean_and_variance(X_new)
    np.testing.assert_allclose(mean, exact_mean, atol=1e-6)
    np.testing.assert_allclose(var, exact_var, atol=1e-6)
    proba = fit.likelihood.predictive_positive(mean, var)
    np.testing.assert_allclose(proba, exact.predict_proba(X_new)[:, 1], atol=1e-6)
    loo = fit.likelihood.predictive_positive(
        fit.solution.cavity_mean, fit.solution.cavity_var
    )
    np.testing.assert_allclose(loo, exact.loo_proba_[:, 1], atol=1e-6)
    assert fit.loo_valid
    if method == "tap":
        assert fit.log_evidence == pytest.approx(
            exact.log_marginal_likelihood_value_, abs=1e-6
        )
    # Only O(m^2) state is kept: the n x m whitened covariances are released.
    assert fit.solution.posterior.posterior is None


def _central_differences(function, x, h=1e-5):
    out = np.empty(len(x))
    for k in range(len(x)):
        step = np.zeros(len(x))
        step[k] = h
        out[k] = (function(x + step) - function(x - step)) / (2 * h)
    return out


@pytest.mark.parametrize(
    "label_noise, weighted", [(0.0, False), ("auto", False), (0.05, True)]
)
def test_evidence_gradient_in_kernel_noise_and_inducing_inputs(label_noise, weighted):
    X, t = _data(30, 2)
    Z = initial_inducing_points(X, InducingOptions(6), seed=0)
    kernel = C(1.5) * RBF([0.7, 1.1])
    inducing = InducingOptions(6, init=Z, learn=True)
    options = _options("probit", label_noise, tol=1e-12)
    weights = None
    if weighted:
        weights = np.random.default_rng(3).choice([0.5, 1.0, 2.0, 3.0], size=30)
    params = np.concatenate(
        [kernel.theta, [np.log(0.03)] if label_noise == "auto" else [], Z.ravel()]
    )

    def value(p):
        return log_evidence(p, X, t, kernel, options, inducing, Z, weights=weights)

    evidence, gradient = log_evidence(
        params, X, t, kernel, options, inducing, Z, eval_gradient=True, weights=weights
    )
    assert evidence == pytest.approx(value(params), abs=1e-12)
    numeric = _central_differences(value, params)
    np.testing.assert_allclose(gradient, numeric, rtol=1e-5, atol=1e-6)
    assert len(gradient) == 3 + (label_noise == "auto") + Z.size


def _sparse_proba(fit, X):
    return fit.likelihood.predictive_positive(*fit.latent(None, X))


def test_loo_is_close_to_refits_of_the_same_sparse_model():
    # The cavity is the sparse model refitted without point i with the other
    # sites frozen; a true refit (same kernel, same inducing inputs) moves
    # them, as for exact TAP: the bounds are those of its refit test.
    X, t = _data(60, 4)
    kernel = C(1.3) * RBF(0.8)
    Z = initial_inducing_points(X, InducingOptions(10), seed=1)
    inducing = InducingOptions(10, init=Z)
    options = _options()
    fit = fit_sparse_binary(X, t, kernel, options, 0, 1, inducing=inducing)
    loo = fit.likelihood.predictive_positive(
        fit.solution.cavity_mean, fit.solution.cavity_var
    )
    gaps = []
    for i in range(0, 60, 5):
        keep = np.arange(60) != i
        refit = fit_sparse_binary(
            X[keep], t[keep], kernel, options, 0, 1, inducing=inducing
        )
        gaps.append(abs(_sparse_proba(refit, X[[i]])[0] - loo[i]))
    assert np.max(gaps) < 0.01
    assert np.mean(gaps) < 0.004
    assert np.max(gaps) > 1e-5  # a real difference: the other sites move


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_restarts_are_independent_of_n_jobs_and_improve_the_evidence():
    X, t = _data(50, 5)
    kernel = C(1.0, (1e-2, 1e2)) * RBF(1.0, (1e-1, 1e1))
    inducing = InducingOptions(8, learn=True)
    options = _options(optimizer=_fmin_l_bfgs_b, n_restarts_optimizer=2, tol=1e-6)
    one = fit_sparse_binary(X, t, kernel, options, 7, 1, inducing=inducing)
    two = fit_sparse_binary(X, t, kernel, options, 7, 2, inducing=inducing)
    np.testing.assert_array_equal(one.kernel.theta, two.kernel.theta)
    np.testing.assert_array_equal(one.inducing_points, two.inducing_points)
    assert one.log_evidence == two.log_evidence
    # The optimum beats the start (kernel and k-means centres) it left.
    Z0 = initial(X)
    start = log_evidence(
        kernel.theta, X, t, kernel, _options(), InducingOptions(8, init=Z0), Z0
    )
    assert one.log_evidence > start + 1.0
    assert not np.allclose(one.inducing_points, initial(X))


def initial(X):
    """The k-means start of the restart test (its seed drawn from seed 7)."""
    seed = np.random.RandomState(7).randint(np.iinfo(np.int32).max)
    return initial_inducing_points(X, InducingOptions(8), seed)


def test_kmeans_centres_and_minibatch_above_the_threshold(monkeypatch):
    rng = np.random.default_rng(0)
    centres = np.array([[-3.0, 0.0], [0.0, 3.0], [3.0, 0.0]])
    X = np.repeat(centres, 200, axis=0) + 0.05 * rng.normal(size=(600, 2))
    Z = initial_inducing_points(X, InducingOptions(3), seed=0)
    order = np.argsort(Z[:, 0] + 0.1 * Z[:, 1])
    np.testing.assert_allclose(Z[order], centres, atol=0.02)
    import sklearn_meanfield.tap._sparse_gpc as module

    monkeypatch.setattr(module, "KMEANS_EXACT_MAX_SAMPLES", 100)
    Z = initial_inducing_points(X, InducingOptions(3), seed=0)
    order = np.argsort(Z[:, 0] + 0.1 * Z[:, 1])
    np.testing.assert_allclose(Z[order], centres, atol=0.02)


# ------------------------------------------------------ the estimator's sparse mode


def assert_same_sparse_model(remote, local, X):
    """Two sparse fits of ``X`` equal to rounding (sums in another order):
    kernel, inducing inputs, predictions and leave-one-out."""
    np.testing.assert_allclose(remote.kernel_.theta, local.kernel_.theta, rtol=1e-9)
    np.testing.assert_allclose(
        remote.inducing_points_, local.inducing_points_, rtol=1e-9, atol=1e-12
    )
    np.testing.assert_allclose(
        remote.predict_proba(X), local.predict_proba(X), rtol=1e-9, atol=1e-12
    )
    np.testing.assert_allclose(remote.loo_proba_, local.loo_proba_, rtol=1e-9)


def _labels(t):
    return (t > 0).astype(int)


@pytest.mark.parametrize(
    "multi_class, label_noise", [(None, 0.0), (None, 0.1), ("one_vs_rest", 0.0)]
)
def test_sparse_mode_with_inducing_points_at_the_data_equals_exact_mode(
    multi_class, label_noise
):
    X, t = _data(45, 6)
    y = _labels(t)
    if multi_class is not None:
        y = np.digitize(X[:, 0], [-0.7, 0.7])  # three classes
    params = dict(
        kernel=C(1.3) * RBF(0.8),
        optimizer=None,
        tol=1e-10,
        max_iter=500,
        label_noise=label_noise,
        multi_class=multi_class or "one_vs_rest",
    )
    exact = TAPGaussianProcessClassifier(**params).fit(X, y)
    sparse = TAPGaussianProcessClassifier(**params, n_inducing=len(X)).fit(X, y)
    assert exact.inducing_points_ is None
    points = sparse.inducing_points_
    for Z in points if isinstance(points, list) else [points]:
        np.testing.assert_array_equal(Z, X)
    X_new = np.random.default_rng(7).uniform(-2.5, 2.5, size=(30, 2))
    for method in ("predict_proba", "decision_function"):
        np.testing.assert_allclose(
            getattr(sparse, method)(X_new), getattr(exact, method)(X_new), atol=1e-6
        )
    np.testing.assert_array_equal(sparse.predict(X_new), exact.predict(X_new))
    np.testing.assert_allclose(sparse.loo_proba_, exact.loo_proba_, atol=1e-6)
    assert sparse.loo_error_ == exact.loo_error_
    theta = exact.kernel_.theta
    value, gradient = exact.log_marginal_likelihood(theta, eval_gradient=True)
    sparse_value, sparse_gradient = sparse.log_marginal_likelihood(
        theta, eval_gradient=True
    )
    assert sparse_value == pytest.approx(value, abs=1e-6)
    np.testing.assert_allclose(sparse_gradient, gradient, atol=1e-5)
    if multi_class is None:
        mean, var = sparse.latent_mean_and_variance(X_new)
        exact_mean, exact_var = exact.latent_mean_and_variance(X_new)
        np.testing.assert_allclose(mean, exact_mean, atol=1e-6)
        np.testing.assert_allclose(var, exact_var, atol=1e-6)


def test_a_weight_is_a_repeated_site_on_one_fitc_field():
    # In the sparse mode a weight w raises the site of one field to the power
    # w (power EP), as in the exact mode.  Repeated rows are another FITC
    # model: each copy gets its own independent diagonal correction d_i, so
    # the two agree only where d_i = 0, i.e. when the inducing inputs hold
    # the training inputs.  (Hence scikit-learn's sample-weight equivalence
    # check, which repeats rows, cannot hold in the sparse mode.)
    X, t = _data(30, 8)
    y = _labels(t)
    weights = np.random.default_rng(0).integers(1, 4, size=30)
    X_new = np.random.default_rng(1).uniform(-2, 2, size=(20, 2))

    def fit(Z, repeat):
        model = TAPGaussianProcessClassifier(
            C(1.3) * RBF(0.8), optimizer=None, tol=1e-11, inducing_points=Z
        )
        if repeat:
            return model.fit(np.repeat(X, weights, axis=0), np.repeat(y, weights))
        return model.fit(X, y, sample_weight=weights)

    weighted, repeated = fit(X, False), fit(X, True)
    np.testing.assert_allclose(
        weighted.predict_proba(X_new), repeated.predict_proba(X_new), atol=1e-6
    )
    assert weighted.log_marginal_likelihood_value_ == pytest.approx(
        repeated.log_marginal_likelihood_value_, abs=1e-5
    )
    exact = TAPGaussianProcessClassifier(C(1.3) * RBF(0.8), optimizer=None, tol=1e-11)
    exact.fit(X, y, sample_weight=weights)
    np.testing.assert_allclose(
        weighted.predict_proba(X_new), exact.predict_proba(X_new), atol=1e-6
    )
    # With d_i > 0 the models differ: by more than rounding, by less than a
    # different model of the data would.
    Z = X[::3] + 0.05
    gap = np.abs(fit(Z, False).predict_proba(X_new) - fit(Z, True).predict_proba(X_new))
    assert 0.005 < gap.max() < 0.1


def test_auto_is_exact_up_to_the_threshold_and_sparse_above(monkeypatch):
    import sklearn_meanfield.tap.gpc as gpc

    monkeypatch.setattr(gpc, "AUTO_EXACT_MAX_SAMPLES", 50)
    monkeypatch.setattr(gpc, "AUTO_N_INDUCING", 10)
    X, t = _data(60, 9)
    y = _labels(t)
    params = dict(kernel=C(1.3) * RBF(0.8), optimizer=None, random_state=0)
    auto = TAPGaussianProcessClassifier(**params, n_inducing="auto")
    sparse = TAPGaussianProcessClassifier(**params, n_inducing=10).fit(X, y)
    auto.fit(X, y)
    assert auto.inducing_points_.shape == (10, 2)
    np.testing.assert_array_equal(auto.inducing_points_, sparse.inducing_points_)
    np.testing.assert_array_equal(auto.predict_proba(X), sparse.predict_proba(X))
    exact = TAPGaussianProcessClassifier(**params).fit(X[:50], y[:50])
    auto.fit(X[:50], y[:50])
    assert auto.inducing_points_ is None
    np.testing.assert_array_equal(auto.predict_proba(X), exact.predict_proba(X))


def test_sparse_mode_parameter_errors():
    X, t = _data(20, 10)
    y = _labels(t)
    with pytest.raises(ValueError, match="needs an optimizer"):
        TAPGaussianProcessClassifier(
            n_inducing=5, optimizer=None, optimize_inducing_points=True
        ).fit(X, y)
    with pytest.raises(ValueError, match="3 features"):
        TAPGaussianProcessClassifier(inducing_points=np.zeros((4, 3))).fit(X, y)
    with pytest.raises(ValueError, match="n_inducing=5 but inducing_points has 4"):
        TAPGaussianProcessClassifier(
            n_inducing=5, inducing_points=np.zeros((4, 2))
        ).fit(X, y)
    with pytest.raises(ValueError, match="n_inducing"):
        TAPGaussianProcessClassifier(n_inducing=0).fit(X, y)


def test_sparse_mode_refuses_what_does_not_fit_in_memory(monkeypatch):
    from sklearn_meanfield import _memory

    monkeypatch.setattr(_memory, "available_memory_bytes", lambda: 2**26)
    X, t = _data(50_000, 11)
    model = TAPGaussianProcessClassifier(n_inducing=512)
    with pytest.raises(MemoryError, match="512 inducing points"):
        model.fit(X, _labels(t))
    assert not hasattr(model, "classes_")


def test_sparse_fit_and_predict_hold_no_n_by_n_array():
    # 20,000 rows: one n x n array would be 3.2 GB; the fit's traced peak
    # (numpy reports its allocations to tracemalloc) is that of a few n x m
    # arrays (n x m: 10 MB), so 100 MB leaves room for ten of them.
    import tracemalloc

    X, t = _data(20_000, 13)
    y = _labels(t)
    model = TAPGaussianProcessClassifier(n_inducing=64, optimizer=None)
    tracemalloc.start()
    try:
        model.fit(X, y)
        model.predict_proba(X)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 100e6
    assert model.loo_error_ < 0.2


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_sparse_mode_on_twenty_thousand_samples_beats_logistic_regression():
    # A non-linear boundary with 10% flipped labels (Bayes log-loss >= 0.325)
    # that a linear model cannot follow (LogisticRegression stays near
    # log 2).  0.42 leaves room above the Bayes log-loss for 64 inducing
    # inputs; the leave-one-out and held-out errors, near 0.11 on 20,000 and
    # 2000 points, agree to about four binomial standard deviations.
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import log_loss, zero_one_loss

    rng = np.random.default_rng(12)
    X = rng.normal(size=(22_000, 2))
    f = np.sin(2 * X[:, 0]) + 0.8 * X[:, 1] ** 2 - 0.8
    y = ((f > 0) ^ (rng.uniform(size=len(X)) < 0.1)).astype(int)
    X, y, X_test, y_test = X[:20_000], y[:20_000], X[20_000:], y[20_000:]
    model = TAPGaussianProcessClassifier(n_inducing=64, random_state=0).fit(X, y)
    assert model.inducing_points_.shape == (64, 2)
    loss = log_loss(y_test, model.predict_proba(X_test))
    linear = log_loss(y_test, LogisticRegression().fit(X, y).predict_proba(X_test))
    assert loss < 0.42 < 0.6 < linear
    error = zero_one_loss(y_test, model.predict(X_test))
    assert abs(model.loo_error_ - error) < 0.03


@parametrize_with_checks(
    [
        TAPGaussianProcessClassifier(
            optimizer=None, tol=1e-8, n_inducing=8, random_state=0
        )
    ],
    expected_failed_checks=lambda estimator: {
        "check_sample_weight_equivalence_on_dense_data": (
            "FITC model difference: repeated rows get independent FITC "
            "diagonal corrections, a weighted row one field (equal when the "
            "inducing inputs hold the rows: "
            "test_a_weight_is_a_repeated_site_on_one_fitc_field); k-means "
            "centres of repeated and weighted rows differ as well"
        ),
    },
)
def test_sparse_mode_passes_scikit_learns_estimator_checks(estimator, check):
    check(estimator)


@pytest.mark.parametrize(
    "likelihood, label_noise", [("step", "auto"), ("logistic", 0.0)]
)
def test_optimised_sparse_fit_at_the_data_equals_the_optimised_exact_fit(
    likelihood, label_noise
):
    # Same objective (to the nugget), same start, same search strategy: the
    # optimisers follow the same path, and agree to far below the tolerances
    # asked (1e-6): only the nugget and rounding separate them.
    X, t = _data(40, 3)
    y = _labels(t)
    params = dict(
        kernel=C(1.0) * RBF(1.0),
        likelihood=likelihood,
        label_noise=label_noise,
        tol=1e-9,
        max_iter=500,
    )
    exact = TAPGaussianProcessClassifier(**params).fit(X, y)
    sparse = TAPGaussianProcessClassifier(**params, inducing_points=X).fit(X, y)
    np.testing.assert_allclose(sparse.kernel_.theta, exact.kernel_.theta, atol=1e-6)
    assert sparse.label_noise_ == pytest.approx(exact.label_noise_, abs=1e-7)
    if label_noise == "auto":
        assert 0.01 < sparse.label_noise_ < 0.2  # learned, not at a bound
    np.testing.assert_allclose(
        sparse.predict_proba(X), exact.predict_proba(X), atol=1e-6
    )
    np.testing.assert_allclose(sparse.loo_proba_, exact.loo_proba_, atol=1e-6)


def test_predictions_by_row_blocks_equal_one_block(monkeypatch):
    import sklearn_meanfield.tap._sparse_gpc as module

    X, t = _data(80, 14)
    model = TAPGaussianProcessClassifier(
        C(1.3) * RBF(0.8), optimizer=None, n_inducing=10, random_state=0
    ).fit(X, _labels(t))
    X_new = np.random.default_rng(2).uniform(-2, 2, size=(37, 2))
    whole = model.latent_mean_and_variance(X_new)
    # Blocks of 4 rows (the default holds 8 MiB of cross-covariances).
    monkeypatch.setattr(module, "_PREDICT_BLOCK_BYTES", 8 * 10 * 4)
    blocks = model.latent_mean_and_variance(X_new)
    np.testing.assert_allclose(blocks[0], whole[0], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(blocks[1], whole[1], rtol=1e-12, atol=1e-14)
    # Positive sites only shrink the prior variance.
    assert np.all(blocks[1] <= model.kernel_.diag(X_new) + 1e-12)


def test_verbose_prints_the_kernel_not_the_inducing_inputs(capsys):
    X, t = _data(40, 15)
    TAPGaussianProcessClassifier(
        C(1.0) * RBF(1.0),
        n_inducing=5,
        optimize_inducing_points=True,
        random_state=0,
        verbose=1,
        tol=1e-4,
    ).fit(X, _labels(t))
    lines = [
        line for line in capsys.readouterr().out.splitlines() if "evaluation 1:" in line
    ]
    # The kernel's search from exp(theta) of C(1) * RBF(1), then the search
    # of the kernel and the 5 inducing inputs.
    assert len(lines) == 2
    assert "at theta [1, 1] (" in lines[0]
    assert "] and [5 inducing inputs] (" in lines[1]


def test_stop_during_the_sparse_search_keeps_its_best_point_so_far():
    pytest.importorskip("sklearn.callback")
    from scipy.optimize import minimize
    from sklearn.exceptions import ConvergenceWarning

    X, t = _data(60, 16)
    y = _labels(t)
    evaluations = []

    def recording_lbfgs(obj_func, initial_theta, bounds):
        def objective(params):
            value, gradient = obj_func(params)
            evaluations.append((np.array(params), value))
            return value, gradient

        result = minimize(
            objective, initial_theta, method="L-BFGS-B", jac=True, bounds=bounds
        )
        return result.x, result.fun

    # The kernel is searched first, at the starting inducing inputs: a stop
    # there keeps its best point so far and the start.
    params = dict(n_inducing=6, random_state=0)
    full = TAPGaussianProcessClassifier(optimizer=recording_lbfgs, **params)
    with warnings.catch_warnings():  # FITC's amplitude runs to its bound
        warnings.simplefilter("ignore", ConvergenceWarning)
        full.fit(X, y)
    assert len(evaluations) > 6
    stopped = TAPGaussianProcessClassifier(optimize_inducing_points=True, **params)
    stopped.set_callbacks(TickDeadline(6, task_name=None))  # the 6th task ends it
    with pytest.warns(ConvergenceWarning, match="callback asked the fit to stop"):
        stopped.fit(X, y)
    best, value = min(evaluations[:6], key=lambda e: e[1])
    # (the kernel's theta goes through exp and log: equal to a few ulps of
    # exp(theta), absolute in theta)
    np.testing.assert_allclose(stopped.kernel_.theta, best, rtol=1e-14, atol=1e-14)
    np.testing.assert_array_equal(stopped.inducing_points_, full.inducing_points_)
    assert stopped.log_marginal_likelihood_value_ == pytest.approx(-value, rel=1e-9)
    assert stopped.log_marginal_likelihood_value_ <= full.log_marginal_likelihood_value_
    assert np.isnan(stopped.loo_error_)
    assert np.all(np.isfinite(stopped.predict_proba(X)))


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_sparse_problems_and_restarts_on_a_dask_cluster_equal_the_local_fit():
    # The one-vs-rest problems and a binary fit's restarts under the dask
    # backend: their row blocks live on the workers, the problems and runs
    # take turns on the client; seeds (k-means's and the restarts') are drawn
    # before any work, so the model is the local one bit for bit (the same
    # block tasks, sums in block order).  Learned inducing inputs on the
    # cluster are the next test's.
    pytest.importorskip("distributed")
    from joblib import parallel_config

    X, _ = _data(90, 17)
    y = np.digitize(X[:, 0] + 0.3 * X[:, 1], [-0.7, 0.7])
    params = dict(
        kernel=C(1.0, (1e-2, 1e2)) * RBF(1.0, (1e-1, 1e1)),
        n_inducing=8,
        optimizer=_five_evaluations,
        n_restarts_optimizer=1,
        random_state=0,
        tol=1e-4,
    )
    local = TAPGaussianProcessClassifier(**params, n_jobs=1).fit(X, y)
    binary = TAPGaussianProcessClassifier(**params, n_jobs=1).fit(X, y == 1)
    with local_dask_client(), parallel_config(backend="dask"):
        remote = TAPGaussianProcessClassifier(**params).fit(X, y)
        remote_binary = TAPGaussianProcessClassifier(**params).fit(X, y == 1)
    for a, b in [(remote, local), (remote_binary, binary)]:
        np.testing.assert_array_equal(a.kernel_.theta, b.kernel_.theta)
        np.testing.assert_array_equal(
            np.concatenate(a.inducing_points_, axis=None),
            np.concatenate(b.inducing_points_, axis=None),
        )
        np.testing.assert_array_equal(a.predict_proba(X), b.predict_proba(X))
        np.testing.assert_array_equal(a.loo_proba_, b.loo_proba_)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_sparse_fit_under_the_dask_backend_keeps_its_row_blocks_on_the_workers(
    monkeypatch,
):
    # Scale-out: under joblib's dask backend every EP sweep and
    # evidence gradient of the search (kernel and inducing inputs learned)
    # and of the final solve maps over row blocks that live on the workers;
    # the model equals the local fit's (same partition, sums here in block
    # order).  Blocks of 64 rows (m = 10) give 5 of them for 300 samples.
    pytest.importorskip("distributed")
    from distributed import get_task_stream
    from joblib import parallel_config

    from sklearn_meanfield.tap import _sparse

    monkeypatch.setattr(_sparse, "_BLOCK_BYTES", 8 * 10 * 64)
    X, t = _data(300, 5)
    params = dict(
        kernel=C(1.0, (1e-2, 1e2)) * RBF(1.0, (1e-1, 1e1)),
        n_inducing=10,
        optimize_inducing_points=True,
        optimizer=_five_evaluations,
        random_state=0,
        tol=1e-6,
    )
    local = TAPGaussianProcessClassifier(**params, n_jobs=1).fit(X, t)
    with (
        local_dask_client(n_workers=2, threads_per_worker=1) as client,
        parallel_config(backend="dask"),
        get_task_stream(client) as stream,
    ):
        remote = TAPGaussianProcessClassifier(**params).fit(X, t)
    assert_same_sparse_model(remote, local, X)
    assert remote.log_marginal_likelihood_value_ == pytest.approx(
        local.log_marginal_likelihood_value_, rel=1e-10
    )
    counts, workers = {}, set()
    for task in stream.data:
        name = task["key"].split("-")[0]  # the function's name, then a uuid
        counts[name] = counts.get(name, 0) + 1
        workers.add(task["worker"])
    # One whitening a block per evaluation of the search and for the final
    # solve; a gradient task a block per evaluation; nothing else shipped
    # (the fit itself did not run in a worker).
    assert counts["_gradient_task"] % 5 == 0 and counts["_gradient_task"] >= 5 * 5
    assert counts["_whiten_task"] == counts["_gradient_task"] + 5
    assert counts["_statistics_task"] > counts["_whiten_task"]
    assert set(counts) <= {
        "_whiten_task",
        "_statistics_task",
        "_marginals_task",
        "_gradient_task",
        "_project_task",
        "_expand_task",
        "_prior_var_task",
    }
    assert len(workers) == 2


# Learning the inducing inputs: a search of the kernel and the inputs on all
# but a held-out share of the rows, which keeps the start unless a point
# lowers the held-out log-loss significantly.


def _kernel_then_start_only(evaluated):
    """L-BFGS-B for the kernel's search (two parameters); for the search of
    the kernel and the inducing inputs, the start only."""

    def optimizer(obj_func, initial_theta, bounds):
        if len(initial_theta) == 2:
            return _fmin_l_bfgs_b(obj_func, initial_theta, bounds)
        evaluated.append(np.array(initial_theta))
        value, _ = obj_func(initial_theta)
        return initial_theta, value

    return optimizer


def _check_the_learned_fit_is_the_fixed_one(X, y, params):
    """With an optimiser that evaluates only the start of the joint search,
    learning the inducing inputs gives the fit with them kept, bit for bit."""
    evaluated = []
    learned = TAPGaussianProcessClassifier(
        optimizer=_kernel_then_start_only(evaluated),
        optimize_inducing_points=True,
        **params,
    ).fit(X, y)
    fixed = TAPGaussianProcessClassifier(
        optimizer=_kernel_then_start_only([]), **params
    ).fit(X, y)
    # The joint search started at the kernel's optimum and the k-means inputs
    # (the kernel's theta goes through exp and log: equal to a few ulps of
    # exp(theta), absolute in theta).
    assert len(evaluated) == 1
    np.testing.assert_allclose(
        evaluated[0][:2], fixed.kernel_.theta, rtol=1e-14, atol=1e-14
    )
    np.testing.assert_array_equal(evaluated[0][2:], fixed.inducing_points_.ravel())
    np.testing.assert_array_equal(learned.kernel_.theta, fixed.kernel_.theta)
    np.testing.assert_array_equal(learned.inducing_points_, fixed.inducing_points_)
    np.testing.assert_array_equal(learned.predict_proba(X), fixed.predict_proba(X))
    np.testing.assert_array_equal(learned.loo_proba_, fixed.loo_proba_)
    assert (
        learned.log_marginal_likelihood_value_ == fixed.log_marginal_likelihood_value_
    )


def test_learned_inducing_inputs_fall_back_to_the_fixed_fit_exactly():
    # With no point but the start to compare, the fit is the fit with the
    # inputs kept at their start, bit for bit.
    X, t = _data(200, 21)
    _check_the_learned_fit_is_the_fixed_one(
        X, _labels(t), dict(n_inducing=8, random_state=0)
    )


def test_the_inducing_input_search_ends_after_its_patience(monkeypatch):
    # Points that only raise the held-out log-loss (a nearly constant model)
    # end the search VALIDATION_PATIENCE evaluations after the start.
    from sklearn_meanfield.tap import _sparse_gpc

    monkeypatch.setattr(_sparse_gpc, "VALIDATION_PATIENCE", 3)
    X, t = _data(200, 22)
    y = _labels(t)
    evaluated = []

    def wandering(obj_func, initial_theta, bounds):
        if len(initial_theta) == 2:
            return _fmin_l_bfgs_b(obj_func, initial_theta, bounds)
        for step in range(100):
            point = np.array(initial_theta)
            point[1] += np.log(100.0) + 0.1 * step  # ever longer length scales
            evaluated.append(point)
            obj_func(initial_theta if step == 0 else point)
        raise AssertionError("the search did not end")

    model = TAPGaussianProcessClassifier(
        n_inducing=8, optimizer=wandering, optimize_inducing_points=True, random_state=0
    ).fit(X, y)
    assert len(evaluated) == 1 + 3 + 1
    fixed = TAPGaussianProcessClassifier(
        n_inducing=8, optimizer=_fmin_l_bfgs_b, random_state=0
    ).fit(X, y)
    np.testing.assert_array_equal(model.inducing_points_, fixed.inducing_points_)
    np.testing.assert_array_equal(model.kernel_.theta, fixed.kernel_.theta)


@pytest.mark.parametrize("seed", [0, 1])
def test_learning_inducing_inputs_from_a_poor_start_lowers_the_test_loss(seed):
    # Ten inducing inputs started in one corner of the square: the fixed
    # fit cannot follow the boundary, the learned one moves them out.
    from sklearn.metrics import log_loss

    X, t = _data(600, 30 + seed)
    X_test, t_test = _data(4000, 40 + seed)
    start = np.random.default_rng(seed).uniform(-2.0, -1.5, size=(10, 2))
    losses = {}
    for learn in (False, True):
        model = TAPGaussianProcessClassifier(
            inducing_points=start, optimize_inducing_points=learn, random_state=seed
        ).fit(X, _labels(t))
        losses[learn] = log_loss(_labels(t_test), model.predict_proba(X_test))
    assert np.max(np.abs(model.inducing_points_ - start)) > 0.5
    assert losses[True] < losses[False]


def test_the_amplitude_cap_lowers_only_constant_kernels_upper_bounds():
    from sklearn_meanfield.tap._sparse_gpc import _amplitude_capped

    kernel = C(1.0, (1e-3, 1e3)) * RBF([1.0, 2.0], (1e-2, 1e2)) + C(0.5, (1e-4, 1e1))
    bounds = kernel.bounds
    theta = np.log([5.0, 0.3, 4.0, 0.2])
    capped = _amplitude_capped(bounds, theta, kernel)
    np.testing.assert_array_equal(capped[:, 0], bounds[:, 0])
    np.testing.assert_allclose(
        capped[:, 1], [np.log(5.0), *bounds[1:3, 1], np.log(0.2)]
    )
