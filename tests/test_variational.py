"""EnsembleLearningRegressor against independent references.

Predictive moments against Monte Carlo draws from Q (``sample_y``), the bound's
monotonicity across phases, the predictive band on 1-D data, test RMSE against
MLPRegressor on friedman1, and the built-in leave-one-out error against
brute-force refits.
"""

import warnings

import numpy as np
import pytest
from callback_helpers import TickDeadline
from scipy.special import erf
from sklearn.datasets import make_friedman1
from sklearn.exceptions import ConvergenceWarning
from sklearn.neural_network import MLPRegressor

from sklearn_meanfield import EnsembleLearningRegressor
from sklearn_meanfield.variational._erf_network import weight_groups

FAST = dict(n_restarts=1, max_iter=100, inner_max_iter=30, tol=1e-4, random_state=0)


def _fit(X, y, sample_weight=None, **params):
    settings = {**FAST, **params}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return EnsembleLearningRegressor(**settings).fit(
            X, y, sample_weight=sample_weight
        )


def _sine(n=40, seed=0):
    rng = np.random.RandomState(seed)
    X = rng.uniform(-1.5, 1.5, size=(n, 1))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=n)
    return X, y


def test_predictive_sd_grows_away_from_the_data():
    X, y = _sine()
    model = _fit(X, y, hidden_layer_size=4)
    grid = np.array([[-6.0], [-4.0], [0.0], [4.0], [6.0]])
    mean, std = model.predict(grid, return_std=True)
    noise_sd = model.alpha_[0] ** -0.5
    # Inside the data the band is close to the noise level; outside it widens.
    assert std[2] < 1.5 * noise_sd
    assert std[1] > 2 * std[2] and std[3] > 2 * std[2]
    assert std[0] >= std[1] * 0.99 and std[4] >= std[3] * 0.99
    assert model.score(X, y) > 0.95


def test_bound_never_decreases_across_phases():
    X, y = _sine(seed=1)
    for covariance in ("full", "lowrank", "diag"):
        model = _fit(
            X, y, hidden_layer_size=3, covariance=covariance, tol=0.0, max_iter=15
        )
        scores = model.scores_
        assert scores.shape == (model.n_iter_,)
        assert np.all(np.diff(scores) >= -1e-9 * np.abs(scores[1:])), covariance


def test_default_fit_converges_with_switched_off_inputs():
    # Five of the eight inputs are noise: their precisions grow towards the
    # cap, and the relative-change rule must stop the fit well before max_iter
    # (no ConvergenceWarning), the bound rising at every iteration.
    X, y = make_friedman1(n_samples=100, n_features=8, noise=0.5, random_state=1)
    X = X[:, [0, 1, 3, 4, 5, 6, 7, 2]]  # inputs 4-6 noise, and 7 (x3) weak
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        model = EnsembleLearningRegressor(
            hidden_layer_size=4, n_restarts=1, random_state=0
        ).fit(X, y)
    assert model.n_iter_ < model.max_iter
    scores = model.scores_
    assert np.all(np.diff(scores) >= -1e-9 * np.abs(scores[1:]))
    # The last iteration gained less than tol of the bound's scale, the bound
    # taken in standardised units (scores_ are in the units of y).
    standardised = scores[-1] + len(y) * np.log(np.std(y))
    assert scores[-1] - scores[-2] <= model.tol * max(abs(standardised), len(y))
    noise = model.lambda_[[4, 5, 6]]
    assert np.all(noise <= 1e6)
    assert np.min(noise) > 10 * np.max(model.lambda_[[0, 1, 2, 3]])


def test_predict_matches_monte_carlo_of_sample_y_multi_output():
    X, y = make_friedman1(n_samples=60, n_features=5, noise=0.3, random_state=0)
    Y = np.column_stack([y, np.sin(3 * X[:, 0])])
    model = _fit(X, Y, hidden_layer_size=3)
    mean, std = model.predict(X[:5], return_std=True)
    assert mean.shape == std.shape == (5, 2)
    n_draws = 200_000
    draws = model.sample_y(X[:5], n_samples=n_draws, random_state=1)
    assert draws.shape == (5, 2, n_draws)
    se = draws.std(axis=2) / np.sqrt(n_draws)
    assert np.all(np.abs(draws.mean(axis=2) - mean) <= 4 * se)
    # Standard error of a sample sd is about sd / sqrt(2 n).
    assert np.all(np.abs(draws.std(axis=2) - std) <= 4 * std / np.sqrt(2 * n_draws))
    # One-output fits return 1-D predictions and (n_X, n_samples) draws.
    single = _fit(X, y, hidden_layer_size=3)
    assert single.predict(X[:5]).shape == (5,)
    assert single.sample_y(X[:5], n_samples=3).shape == (5, 3)
    assert single.loo_prediction_.shape == y.shape


@pytest.mark.parametrize("n_samples", [0, -1, 2.7, "3"])
def test_sample_y_refuses_a_number_of_draws_that_is_no_positive_integer(n_samples):
    X, y = _sine(n=20)
    model = _fit(X, y, hidden_layer_size=2, max_iter=5)
    with pytest.raises(ValueError, match="'n_samples' parameter"):
        model.sample_y(X[:3], n_samples=n_samples)
    assert model.sample_y(X[:3], n_samples=np.int64(2)).shape == (3, 2)


def test_fitted_attributes_and_units():
    X, y = _sine(seed=2)
    model = _fit(X, 100 * y + 7, hidden_layer_size=3)
    k = 3 * (1 + 1) + 3
    assert model.mean_.shape == (k,)
    assert model.covariance_.shape == (k, k)
    np.testing.assert_allclose(model.covariance_, model.covariance_.T)
    assert np.all(np.linalg.eigvalsh(model.covariance_) > 0)
    assert model.lambda_.shape == (3,)
    # The noise precision is reported in the units of y: about 1 / (100 * 0.1)^2.
    assert 0.2 / 100 < model.alpha_[0] < 5 / 100
    # Targets are standardised internally, so rescaling y rescales the model;
    # round-off differences grow along the L-BFGS path, hence the tolerances.
    reference = _fit(X, y, hidden_layer_size=3)
    np.testing.assert_allclose(
        model.predict(X), 100 * reference.predict(X) + 7, atol=0.01 * 100
    )
    # Bound of the rescaled data = bound of the original minus n log(100).
    np.testing.assert_allclose(
        model.scores_, reference.scores_ - len(y) * np.log(100.0), rtol=1e-3
    )


def test_restarts_do_not_depend_on_n_jobs():
    X, y = _sine(n=30, seed=3)
    models = [
        _fit(X, y, hidden_layer_size=2, n_restarts=2, max_iter=2, n_jobs=n_jobs)
        for n_jobs in (1, 2)
    ]
    np.testing.assert_array_equal(models[0].predict(X), models[1].predict(X))
    np.testing.assert_array_equal(models[0].scores_, models[1].scores_)


def _blas_threads():
    from threadpoolctl import threadpool_info

    threads = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
    return max(threads, default=0)


@pytest.mark.parametrize("covariance", ["full", "diag"])
@pytest.mark.parametrize("policy", [1, 2])
def test_restart_runs_on_the_package_blas_policy(monkeypatch, covariance, policy):
    # One BLAS-thread policy for the package: a restart asks _parallel's
    # blas_threads_for_work for its largest factorisation (the k x k
    # precision for "full", none for "diag") and runs on that many threads,
    # never more than the caller has.  The policy is replaced by a constant
    # here, so that the test sees it followed.
    from sklearn_meanfield import _parallel
    from sklearn_meanfield.variational import regressor

    if _blas_threads() < 2:
        pytest.skip("needs a BLAS with at least two threads")
    asked, seen = [], []
    monkeypatch.setattr(
        _parallel, "blas_threads_for_work", lambda flops: asked.append(flops) or policy
    )
    real_fit_restart = regressor.fit_restart

    def recording(*args, **kwargs):
        seen.append(_blas_threads())
        return real_fit_restart(*args, **kwargs)

    monkeypatch.setattr(regressor, "fit_restart", recording)
    X, y = _sine(n=20, seed=2)
    model = _fit(X, y, hidden_layer_size=2, covariance=covariance, max_iter=2)
    k = model.mean_.size
    side = k if covariance == "full" else 0
    assert asked == [_parallel.factorisation_flops(side)]
    assert seen == [min(policy, _blas_threads())]


def test_verbose_reports_the_bound(capsys):
    X, y = _sine(n=20)
    _fit(X, y, hidden_layer_size=2, max_iter=2, verbose=1)
    out = capsys.readouterr().out
    assert "iteration 1: bound" in out and "iteration 2: bound" in out


def test_psis_leave_one_out_agrees_with_cavity_multi_output():
    X, y = make_friedman1(n_samples=60, n_features=5, noise=0.3, random_state=0)
    Y = np.column_stack([y, np.sin(3 * X[:, 0])])
    cavity = _fit(X, Y, hidden_layer_size=3)
    psis = _fit(X, Y, hidden_layer_size=3, loo="psis")
    assert psis.pareto_k_.shape == Y.shape
    assert not hasattr(cavity, "pareto_k_")
    # Same fit, two routes to the leave-one-out means: close to each other,
    # and both above the training error.
    np.testing.assert_array_equal(cavity.predict(X), psis.predict(X))
    train = np.mean((Y - cavity.predict(X)) ** 2)
    assert cavity.loo_error_ > train and psis.loo_error_ > train
    assert psis.loo_error_ == pytest.approx(cavity.loo_error_, rel=0.2)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.slow
def test_friedman1_beats_mlp_and_ard_finds_relevant_inputs():
    X, y = make_friedman1(n_samples=1200, noise=1.0, random_state=0)
    X_train, y_train, X_test, y_test = X[:200], y[:200], X[200:], y[200:]
    model = EnsembleLearningRegressor(hidden_layer_size=8, random_state=0)
    model.fit(X_train, y_train)
    mlp = MLPRegressor(random_state=0).fit(X_train, y_train)
    rmse = np.sqrt(np.mean((model.predict(X_test) - y_test) ** 2))
    mlp_rmse = np.sqrt(np.mean((mlp.predict(X_test) - y_test) ** 2))
    assert rmse < mlp_rmse
    # Inputs 5-9 are noise: their prior precisions exceed those of inputs 0, 1.
    relevant = model.lambda_[[0, 1]]
    assert np.min(model.lambda_[5:10]) > np.max(relevant)


@pytest.mark.slow
def test_leave_one_out_error_close_to_brute_force_refits():
    rng = np.random.RandomState(4)
    X = rng.uniform(-2, 2, size=(40, 2))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.2 * rng.normal(size=40)
    params = dict(hidden_layer_size=3)
    model = _fit(X, y, **params)
    refits = np.empty_like(y)
    for i in range(len(y)):
        keep = np.arange(len(y)) != i
        refits[i] = _fit(X[keep], y[keep], **params).predict(X[i : i + 1])[0]
    brute = np.mean((y - refits) ** 2)
    assert model.loo_error_ == pytest.approx(brute, rel=0.15)
    psis = _fit(X, y, loo="psis", **params)
    assert psis.loo_error_ == pytest.approx(brute, rel=0.15)


# ------------------------------------------ an honest bound on tiny data


def _network_outputs(X1, w, n_hidden):
    """Outputs of the erf network for a stack of weight vectors (one output)."""
    n_aug = X1.shape[1]
    U = w[:, : n_hidden * n_aug].reshape(len(w), n_hidden, n_aug)
    V = w[:, n_hidden * n_aug :].reshape(len(w), n_hidden)
    hidden = erf(np.einsum("np,shp->snh", X1, U) / np.sqrt(2.0))
    return np.einsum("snh,sh->sn", hidden, V)


def monte_carlo_bound(model, X, y, n_draws=200_000, seed=0, sample_weight=None):
    """The model's final bound (units of y) estimated by sampling Q.

    ``E_Q[log p(y | w) + log p(w)] + H[Q]`` with ``w`` drawn from
    ``N(mean_, covariance_)``, the network written out here, the entropy from
    ``slogdet``; returns the estimate and its standard error.
    """
    rng = np.random.RandomState(seed)
    weights = np.ones(len(y)) if sample_weight is None else sample_weight
    X1 = np.column_stack([model._x_scaler.transform(X), np.ones(len(X))])
    scale, centre = model._y_scaler.scale[0], model._y_scaler.mean[0]
    alpha = model.alpha_[0]  # units of y
    lam = model.lambda_[weight_groups(model._shape)]
    cov = model.covariance_
    factor = np.linalg.cholesky(cov + 1e-300 * np.eye(len(cov)))
    terms = []
    for _ in range(n_draws // 20_000):
        z = rng.standard_normal((20_000, len(cov)))
        w = model.mean_ + z @ factor.T
        f = centre + scale * _network_outputs(X1, w, model.hidden_layer_size)
        loglik = (
            weights * (0.5 * np.log(alpha / (2 * np.pi)) - 0.5 * alpha * (y - f) ** 2)
        ).sum(axis=1)
        logprior = np.sum(0.5 * np.log(lam / (2 * np.pi)) - 0.5 * lam * w * w, axis=1)
        terms.append(loglik + logprior)
    terms = np.concatenate(terms)
    sign, logdet = np.linalg.slogdet(cov)
    assert sign > 0
    entropy = 0.5 * logdet + 0.5 * len(cov) * (1 + np.log(2 * np.pi))
    return terms.mean() + entropy, terms.std() / np.sqrt(terms.size)


def _assert_honest_fit(model, X, y, n_draws=200_000):
    """Bound finite and within Monte Carlo error of its sampled value; the
    predictive sd that of sample_y; the noise no smaller than the residuals."""
    bound = model.scores_[-1]
    estimate, se = monte_carlo_bound(model, X, y, n_draws=n_draws)
    assert np.isfinite(bound)
    # The closed form must not exceed the sampled bound (nor fall below it).
    assert bound <= estimate + 4 * se + 1e-9 * abs(estimate), (bound, estimate, se)
    assert bound >= estimate - 4 * se - 1e-9 * abs(estimate), (bound, estimate, se)
    grid = np.linspace(X.min() - 10, X.max() + 10, 7)[:, None]
    mean, std = model.predict(grid, return_std=True)
    assert np.all(np.isfinite(std)) and np.all(std > 0)
    draws = model.sample_y(grid, n_samples=20_000, random_state=1)
    np.testing.assert_allclose(draws.std(axis=1), std, rtol=4 / np.sqrt(2 * 20_000))
    # 1 / alpha re-estimates <(y - f)^2> >= (y - <f>)^2 on average.
    mse = np.mean((y - model.predict(X)) ** 2)
    assert 1.0 / model.alpha_[0] > 0.5 * mse


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_six_point_fit_has_an_honest_bound():
    # On 6 points the mean weights shrink towards subnormal values, where
    # E[erf^2] and the bound must stay right: the closed-form bound within
    # Monte Carlo error of its sampled value, the predictive sd that of
    # sample_y, the noise no smaller than the residuals.
    X = np.array([[1.0], [3.0], [5.0], [6.0], [7.0], [8.0]])
    y = (X * np.sin(X)).ravel()
    model = EnsembleLearningRegressor(random_state=0).fit(X, y)
    _assert_honest_fit(model, X, y)
    assert model.scores_[-1] < 0
    # These points do not pin down a function: the noise takes the spread of y.
    assert 0.3 * np.std(y) < model.alpha_[0] ** -0.5 < 2 * np.std(y)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("n,seed", [(4, 0), (5, 1), (8, 2), (10, 3)])
def test_one_input_small_n_fits_have_honest_bounds(n, seed):
    rng = np.random.RandomState(seed)
    X = np.sort(rng.uniform(0, 10, size=(n, 1)), axis=0)
    y = (X * np.sin(X)).ravel() + 0.1 * rng.normal(size=n)
    model = EnsembleLearningRegressor(n_restarts=1, random_state=0).fit(X, y)
    _assert_honest_fit(model, X, y, n_draws=100_000)


# ------------------------------------------------------------- sample_weight


def _weighted_data(n=15, seed=0):
    rng = np.random.RandomState(seed)
    X = rng.uniform(-2, 2, size=(n, 2))
    y = np.sin(X[:, 0]) + 0.3 * X[:, 1] + 0.1 * rng.normal(size=n)
    sw = rng.randint(0, 4, size=n)
    return X, y, sw


@pytest.mark.parametrize("covariance", ["full", "diag"])
def test_integer_weights_equal_repeated_rows(covariance):
    X, y, sw = _weighted_data()
    params = dict(hidden_layer_size=3, covariance=covariance)
    weighted = _fit(X, y, sample_weight=sw, **params)
    repeated = _fit(X.repeat(sw, axis=0), y.repeat(sw), **params)
    assert weighted.n_iter_ == repeated.n_iter_
    np.testing.assert_allclose(weighted.scores_, repeated.scores_, rtol=1e-9)
    np.testing.assert_allclose(weighted.mean_, repeated.mean_, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(weighted.alpha_, repeated.alpha_, rtol=1e-6)
    np.testing.assert_allclose(weighted.lambda_, repeated.lambda_, rtol=1e-6)
    grid = np.random.RandomState(1).uniform(-3, 3, size=(20, 2))
    for a, b in zip(
        weighted.predict(grid, return_std=True), repeated.predict(grid, return_std=True)
    ):
        np.testing.assert_allclose(a, b, rtol=1e-7, atol=1e-9)


def test_zero_weight_equals_dropping_the_row():
    X, y, sw = _weighted_data(seed=1)
    sw = np.maximum(sw, 1)
    sw[[2, 7, 11]] = 0
    keep = sw > 0
    for loo in ("cavity", "psis"):
        weighted = _fit(X, y, sample_weight=sw, hidden_layer_size=3, loo=loo)
        dropped = _fit(X[keep], y[keep], sample_weight=sw[keep], hidden_layer_size=3)
        np.testing.assert_array_equal(weighted.scores_, dropped.scores_)
        np.testing.assert_array_equal(weighted.mean_, dropped.mean_)
        np.testing.assert_array_equal(weighted.predict(X), dropped.predict(X))
        if loo == "cavity":
            # The other rows' leave-one-out predictions and the weighted error
            # are those of the data without the zero-weight rows ...
            np.testing.assert_allclose(
                weighted.loo_prediction_[keep], dropped.loo_prediction_, rtol=1e-12
            )
            assert weighted.loo_error_ == pytest.approx(dropped.loo_error_, rel=1e-12)
            # ... and a zero-weight row, which the fit never saw, is predicted
            # by the full posterior.
            np.testing.assert_allclose(
                weighted.loo_prediction_[~keep], weighted.predict(X[~keep]), rtol=1e-12
            )


def test_weighted_cavity_removes_the_whole_row():
    # A row of weight k is k copies of one likelihood: leaving the row out
    # removes all k, a leverage of k alpha s^2.  The repeated-rows fit gives
    # <f>, s^2 and alpha independently of the weighted code path.
    X, y, sw = _weighted_data(seed=2)
    sw = np.maximum(sw, 1)
    params = dict(hidden_layer_size=3)
    weighted = _fit(X, y, sample_weight=sw, **params)
    repeated = _fit(X.repeat(sw, axis=0), y.repeat(sw), **params)
    mean, std = repeated.predict(X, return_std=True)
    alpha = repeated.alpha_[0]
    var_f = std**2 - 1.0 / alpha
    leverage = np.minimum(sw * alpha * var_f, 0.9)
    expected = y - (y - mean) / (1.0 - leverage)
    np.testing.assert_allclose(weighted.loo_prediction_, expected, rtol=1e-5)
    errors = (y - weighted.loo_prediction_) ** 2
    assert weighted.loo_error_ == pytest.approx(np.sum(sw * errors) / np.sum(sw))


@pytest.mark.slow
def test_weighted_leave_one_out_close_to_refits_without_the_row():
    rng = np.random.RandomState(4)
    X = rng.uniform(-2, 2, size=(40, 2))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.2 * rng.normal(size=40)
    sw = rng.randint(1, 4, size=40)
    params = dict(hidden_layer_size=3)
    model = _fit(X, y, sample_weight=sw, **params)
    refits = np.empty_like(y)
    for i in range(len(y)):
        w = sw.copy()
        w[i] = 0  # == dropping the row (tested above)
        refits[i] = _fit(X, y, sample_weight=w, **params).predict(X[i : i + 1])[0]
    brute = np.sum(sw * (y - refits) ** 2) / np.sum(sw)
    assert model.loo_error_ == pytest.approx(brute, rel=0.15)


def test_weighted_bound_equals_its_monte_carlo_estimate():
    X, y, sw = _weighted_data(seed=3)
    model = _fit(X, y, sample_weight=sw, hidden_layer_size=3)
    estimate, se = monte_carlo_bound(model, X, y, sample_weight=sw)
    assert abs(model.scores_[-1] - estimate) <= 4 * se + 1e-9 * abs(estimate)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("covariance", ["full", "diag"])
def test_scikit_learn_sample_weight_equivalence(covariance):
    # With test_common's settings (3 iterations).  Run to convergence, the
    # weighted and repeated fits differ by ~1e-6 in their predictions on
    # this check's data (30 inputs, 15 rows: a flat optimum that the
    # different rounding of the shuffled sums walks differently), within
    # the optimisation's tolerance but not the check's rtol of 1e-7.
    from sklearn.utils.estimator_checks import (
        check_sample_weight_equivalence_on_dense_data,
    )

    model = EnsembleLearningRegressor(
        hidden_layer_size=3,
        n_restarts=1,
        max_iter=3,
        inner_max_iter=30,
        random_state=0,
        covariance=covariance,
    )
    check_sample_weight_equivalence_on_dense_data("Ensemble", model)


# ------------------------------------------- constant, extreme and string y


@pytest.mark.parametrize("value", [1e-6, 1.0, -3e5, 1e300, 1e-140, 1e-300])
def test_constant_target_predicts_the_constant(value):
    # A constant column of any magnitude has no scale to standardise by: the
    # prediction must still be the constant, with a spread on its scale.
    X = np.random.RandomState(0).normal(size=(10, 2))
    y = np.full(10, value)
    model = _fit(X, y, hidden_layer_size=3)
    grid = np.random.RandomState(1).normal(scale=3, size=(5, 2))
    mean, std = model.predict(grid, return_std=True)
    # A constant's scale is its magnitude, kept above 1e-150 by the shell's
    # standardisation: the fit is exact to 1e-9 of that scale.
    unit = max(abs(value), 1e-150)
    np.testing.assert_allclose(mean, value, rtol=0, atol=1e-9 * unit)
    # The uncertainty is that of a constant: tiny next to it, and in its units
    # (BayesianRidge gives std < 0.01 |value| on these data).
    assert np.all(np.isfinite(std)) and np.all(std < 1e-2 * unit)
    np.testing.assert_allclose(model.loo_prediction_, value, rtol=0, atol=1e-9 * unit)
    assert np.sqrt(model.loo_error_) <= 1e-9 * unit
    draws = model.sample_y(grid, n_samples=3, random_state=0)
    np.testing.assert_allclose(draws, value, rtol=0, atol=1e-2 * unit)


@pytest.mark.parametrize("scale", [1e300, 1e200, 1e100, 1e-100, 1e-200, 1e-300])
def test_extreme_scales_are_finite_and_right_or_refused(scale):
    # Squares of such scales overflow or underflow a double.  Either the fit
    # is the unit-scale fit rescaled, or a ValueError names the problem;
    # never NaN/inf.
    X, y = _sine(n=20, seed=5)
    reference = _fit(X, y, hidden_layer_size=2)
    ref_mean, ref_std = reference.predict(X, return_std=True)
    for X_scale in (1.0, scale):
        try:
            model = _fit(X * X_scale, y * scale, hidden_layer_size=2)
        except ValueError as error:
            # Only a spread of y outside [1e-150, 1e150] is refused.
            assert "y has a standard deviation" in str(error)
            assert not 1e-150 <= scale <= 1e150
            continue
        mean, std = model.predict(X * X_scale, return_std=True)
        assert np.all(np.isfinite(mean)) and np.all(np.isfinite(std))
        np.testing.assert_allclose(mean / scale, ref_mean, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(std / scale, ref_std, rtol=1e-6)
        assert np.isfinite(model.loo_error_) and np.all(np.isfinite(model.scores_))
    outlier = y.copy()
    outlier[3] = 1e200
    try:
        model = _fit(X, outlier, hidden_layer_size=2)
    except ValueError as error:
        assert "standard deviation" in str(error)
    else:
        mean, std = model.predict(X, return_std=True)
        assert np.all(np.isfinite(mean)) and np.all(np.isfinite(std))


def test_numeric_string_targets_are_converted_or_refused_up_front():
    X, y = _sine(n=12, seed=6)
    as_strings = np.array([repr(float(v)) for v in y])
    np.testing.assert_array_equal(
        _fit(X, as_strings, hidden_layer_size=2).predict(X),
        _fit(X, y, hidden_layer_size=2).predict(X),
    )
    bad = as_strings.copy()
    bad[4] = "four"
    model = EnsembleLearningRegressor(hidden_layer_size=2, max_iter=10**6, n_restarts=1)
    with pytest.raises(ValueError, match="numeric"):
        model.fit(X, bad)  # refused before any work: max_iter would take hours
    assert not hasattr(model, "mean_")


# -------------------------------------------------------------- memory guard


def test_memory_guard_refuses_a_huge_fit_up_front():
    # 8 hidden units on 5000 inputs is one 12 GiB matrix per copy (40016
    # weights).  Refused before any large allocation, naming the size and
    # the families that would fit.
    import tracemalloc

    X = np.random.RandomState(0).normal(size=(20, 5000))
    y = X[:, 0]
    model = EnsembleLearningRegressor()
    tracemalloc.start()
    try:
        with pytest.raises(MemoryError) as error:
            model.fit(X, y)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    message = str(error.value)
    assert "40016 weights" in message and "GiB" in message
    assert "covariance='diag'" in message and "covariance='lowrank'" in message
    assert peak < 50 * 2**20
    assert not hasattr(model, "mean_")


def test_memory_guard_counts_concurrent_restarts(monkeypatch):
    from sklearn_meanfield import _memory
    from sklearn_meanfield.variational._erf_network import NetworkShape
    from sklearn_meanfield.variational._optimise import fit_memory_bytes

    X, y = _sine(n=30, seed=7)
    one = fit_memory_bytes(30, NetworkShape(1, 3, 1, "full"))
    # Room for one restart at a time, not for two.
    monkeypatch.setattr(_memory, "available_memory_bytes", lambda: 1.5 * one / 0.8)
    params = dict(hidden_layer_size=3, n_restarts=2, max_iter=2)
    with pytest.raises(MemoryError, match="2 restart"):
        _fit(X, y, n_jobs=2, **params)
    _fit(X, y, n_jobs=1, **params)


def _traced_peak(function):
    import tracemalloc

    tracemalloc.start()
    try:
        result = function()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_fit_memory_estimate_bounds_the_measured_peak():
    from sklearn_meanfield.variational._erf_network import NetworkShape
    from sklearn_meanfield.variational._optimise import fit_memory_bytes

    rng = np.random.RandomState(0)
    X = rng.normal(size=(20, 200))
    y = X[:, 0] + 0.1 * rng.normal(size=20)
    for covariance in ("full", "diag", "lowrank"):
        # Untraced first: lazy imports and caches are not the fit's memory.
        _fit(X[:, :3], y, hidden_layer_size=3, max_iter=2, covariance=covariance)
        _, peak = _traced_peak(
            lambda cov=covariance: _fit(
                X, y, hidden_layer_size=3, max_iter=2, inner_max_iter=2, covariance=cov
            )
        )
        estimate = fit_memory_bytes(20, NetworkShape(200, 3, 1, covariance))
        # An upper estimate, and not a wild one.
        assert peak <= estimate <= 4 * peak + 2**21, (covariance, peak, estimate)


@pytest.mark.parametrize("covariance", ["diag", "lowrank"])
def test_diag_and_lowrank_never_build_the_weight_matrix(covariance):
    # d = 2000, 3 hidden units: 6006 weights, one 6006^2 matrix is 289 MB.
    # Fit, predict (with std), sample_y and leave-one-out stay far below it.
    rng = np.random.RandomState(0)
    X = rng.normal(size=(20, 2000))
    y = X[:, 0] + 0.1 * rng.normal(size=20)
    k = 3 * 2001 + 3
    matrix = 8 * k * k

    def run():
        model = _fit(
            X,
            y,
            hidden_layer_size=3,
            max_iter=2,
            inner_max_iter=2,
            covariance=covariance,
        )
        model.predict(X, return_std=True)
        model.sample_y(X[:5], n_samples=10)
        return model

    model, peak = _traced_peak(run)
    assert model.mean_.shape == (k,)
    assert peak < 0.1 * matrix, peak / matrix
    assert np.isfinite(model.loo_error_)


# ---------------------------------------------------------------- time cap


@pytest.mark.filterwarnings(
    "ignore:EnsembleLearningRegressor did not converge:"
    "sklearn.exceptions.ConvergenceWarning"
)
@pytest.mark.parametrize("covariance", ["full", "diag", "lowrank"])
def test_a_deadline_keeps_the_best_iterate_so_far(covariance):
    pytest.importorskip("sklearn.callback")
    X, y = _sine(n=30, seed=8)
    params = dict(hidden_layer_size=3, covariance=covariance, tol=0.0)
    deadline = TickDeadline(3, task_name="iteration")
    stopped = EnsembleLearningRegressor(**{**FAST, **params, "max_iter": 200})
    stopped.set_callbacks(deadline)
    with pytest.warns(ConvergenceWarning, match="stopped by a callback"):
        stopped.fit(X, y)
    reference = EnsembleLearningRegressor(**{**FAST, **params, "max_iter": 3})
    reference.fit(X, y)  # three iterations: its warning is filtered
    # Stopped at the deadline, three iterations in, with the model those
    # iterations reached: the highest bound met, since it never decreases.
    assert deadline.ticks == 3 and stopped.n_iter_ == 3
    assert stopped.scores_[-1] == np.max(stopped.scores_)
    np.testing.assert_array_equal(stopped.scores_, reference.scores_)
    np.testing.assert_array_equal(stopped.predict(X), reference.predict(X))
    _, std = stopped.predict(X, return_std=True)
    assert np.all(np.isfinite(std)) and np.isfinite(stopped.loo_error_)


def _separate_optima_warnings(X, y, random_state, n_restarts):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = EnsembleLearningRegressor(
            hidden_layer_size=1, n_restarts=n_restarts, random_state=random_state
        ).fit(X, y)
    messages = [
        str(w.message)
        for w in caught
        if issubclass(w.category, ConvergenceWarning) and "n_restarts" in str(w.message)
    ]
    return model, messages


def test_restarts_in_separate_optima_warn():
    # One hidden unit against a bump of a steep left and a gentle right edge:
    # the unit fits one edge, which one depends on the signs of its initial
    # weights, and the two fits leave residual variances far apart (their
    # bounds differ by about twice the 0.05 nat per sample of the warning).
    # Each restart picks an edge with probability near one half, so among
    # ten fits of two restarts none disagrees with probability of order
    # 2**-10.
    rng = np.random.RandomState(0)
    x = rng.uniform(-3, 3, size=200)
    y = erf(4 * (x + 1)) - erf(1.5 * (x - 1)) + 0.1 * rng.normal(size=200)
    warned = []
    for random_state in range(10):
        model, messages = _separate_optima_warnings(x[:, None], y, random_state, 2)
        bounds = model.restart_bounds_
        assert bounds.shape == (2,) and model.scores_[-1] == bounds.max()
        # Two restarts: the best is found once whenever they disagree, so
        # the warning comes exactly when the gap exceeds the margin.
        gap = (bounds.max() - bounds.min()) / len(y)
        assert len(messages) == int(gap > 0.05), gap
        warned += messages
    assert warned
    assert all("increase n_restarts" in message for message in warned)


def test_restarts_in_one_optimum_do_not_warn():
    # A single erf unit fitted by a single unit: one optimum up to the
    # sign symmetry (u, v) -> (-u, -v), which leaves the bound unchanged, so
    # every restart ends at the same bound up to the stopping tolerance.
    rng = np.random.RandomState(1)
    X = rng.normal(size=(200, 3))
    y = 2 * erf(X @ [1.0, -0.5, 0.3]) + 0.1 * rng.normal(size=200)
    for random_state in range(4):
        model, messages = _separate_optima_warnings(X, y, random_state, 3)
        assert messages == []
        spread = np.ptp(model.restart_bounds_) / len(y)
        assert spread < 0.005
