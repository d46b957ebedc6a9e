"""Peer tests: BayesianRidge's and GaussianProcessRegressor's API tests, ported.

scikit-learn's ``linear_model/tests/test_bayes.py`` and
``gaussian_process/tests/test_gpr.py`` check what any Bayesian regressor owes
its users: predictive standard deviations of the right shape and size,
``sample_y`` draws with the predictive moments, multi-output targets, constant
targets, sample weights, predictions at the training points, inputs left
untouched and dtypes.  Each test below is rewritten for the package's two
network regressors, run on both with small settings; a number that belongs to
one model (a GP kernel, a linear fit) is replaced by what the network model
implies, and a remaining difference is a strict xfail that names the model
difference.
"""

import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.linear_model import BayesianRidge

from sklearn_meanfield import EnsembleLearningRegressor, HMCNetworkRegressor

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")

REGRESSORS = [
    HMCNetworkRegressor(
        hidden_layer_size=4,
        n_samples=100,
        n_warmup=100,
        n_leapfrog=20,
        n_chains=2,
        random_state=0,
    ),
    EnsembleLearningRegressor(hidden_layer_size=4, n_restarts=1, random_state=0),
]


def _ids(estimator):
    return type(estimator).__name__


def _is_hmc(estimator):
    return isinstance(estimator, HMCNetworkRegressor)


def _fit(estimator, X, y, **fit_params):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return clone(estimator).fit(X, y, **fit_params)


def _smooth_data(n=40, noise=0.1, seed=0, n_features=1):
    rng = np.random.RandomState(seed)
    X = rng.uniform(-2, 2, size=(n, n_features))
    return X, np.sin(X[:, 0]) + 0.5 * X[:, -1] + noise * rng.normal(size=n)


# ------------------------------------------------ return_std: shapes, values


@pytest.mark.parametrize("n_targets", [None, 1, 2])
@pytest.mark.parametrize("estimator", REGRESSORS, ids=_ids)
def test_predict_shapes(estimator, n_targets):
    # Ported from test_gpr.py::test_predict_shapes: the shapes
    # GaussianProcessRegressor gives, checked against the peer itself.
    X, y = _smooth_data(n=20)
    if n_targets is not None:
        y = np.column_stack([y + k for k in range(n_targets)])
    X_test = X[:7]
    model = _fit(estimator, X, y)
    peer = GaussianProcessRegressor().fit(X, y)
    mean, std = model.predict(X_test, return_std=True)
    peer_mean, peer_std = peer.predict(X_test, return_std=True)
    assert mean.shape == peer_mean.shape
    assert std.shape == peer_std.shape
    assert isinstance(model.predict(X_test), np.ndarray)  # not a tuple
    np.testing.assert_array_equal(model.predict(X_test), mean)


@pytest.mark.parametrize("n_targets", [None, 1, 2])
@pytest.mark.parametrize("estimator", REGRESSORS, ids=_ids)
def test_sample_y_shapes(estimator, n_targets):
    # Ported from test_gpr.py::test_sample_y_shapes.
    X, y = _smooth_data(n=20)
    if n_targets is not None:
        y = np.column_stack([y + k for k in range(n_targets)])
    model = _fit(estimator, X, y)
    peer = GaussianProcessRegressor().fit(X, y)
    for n_samples in (1, 5):
        ours = model.sample_y(X[:3], n_samples=n_samples, random_state=0)
        assert ours.shape == peer.sample_y(X[:3], n_samples=n_samples).shape


@pytest.mark.parametrize("estimator", REGRESSORS, ids=_ids)
def test_sample_statistics(estimator):
    # Ported from test_gpr.py::test_sample_statistics: the mean and variance
    # of sample_y's draws are predict's mean and std**2 (300,000 draws there,
    # 20,000 here: the Monte Carlo sd of the mean is 0.007 std).
    X, y = _smooth_data()
    model = _fit(estimator, X, y)
    X_test = np.array([[-1.5], [0.0], [1.0], [3.0]])
    mean, std = model.predict(X_test, return_std=True)
    samples = model.sample_y(X_test, n_samples=20000, random_state=1)
    np.testing.assert_allclose(samples.mean(axis=1), mean, atol=0.04 * std.max())
    np.testing.assert_allclose(samples.std(axis=1), std, rtol=0.04)


@pytest.mark.parametrize("noise", [1.0, 0.1, 0.01])
@pytest.mark.parametrize("estimator", REGRESSORS, ids=_ids)
def test_return_std_is_the_noise_level(estimator, noise):
    # Ported from test_bayes.py::test_return_std: inside the data, the
    # predictive sd of a well-specified model is about the noise sd.  The
    # target is linear in 5 inputs, as there; the peers' tolerance is one
    # decimal per tenfold less noise, here 30% of the noise.
    rng = np.random.RandomState(0)
    w = np.array([1.0, 0.0, 1.0, -1.0, 0.0])
    X = rng.random_sample((50, 5))
    y = X @ w + 1.0 + noise * rng.randn(50)
    X_test = rng.random_sample((10, 5))
    if _is_hmc(estimator) and noise >= 0.05:
        # A predictive sd from n draws has a relative Monte Carlo sd of about
        # 1/sqrt(2 n_eff); with 100 correlated draws of two chains one of ten
        # test points strays beyond the 35% below, with 400 draws it stays
        # within a few such sds.
        estimator = clone(estimator).set_params(n_samples=400, n_warmup=200)
    model = _fit(estimator, X, y)
    _, std = model.predict(X_test, return_std=True)
    _, peer_std = BayesianRidge().fit(X, y).predict(X_test, return_std=True)
    if _is_hmc(estimator) and noise < 0.05:
        # Two chains of 100 draws do not converge on this sharp posterior
        # (R-hat well above 1), and a test point's sd then depends on where
        # the chains sit, so no single point is checked.  What holds whatever
        # the chains: the noise level learnt from 50 residuals, whose
        # relative sampling sd is 1/sqrt(2 * 44) = 0.11 (this data set's
        # least-squares estimate is 0.86 of the truth), within 0.15; the
        # median predictive sd, at least the noise sd less that error and at
        # most the noise plus a function sd of the same size; and, since the
        # network's function is uncertain where the linear model's is not,
        # a median sd at least BayesianRidge's and within 75% of it.
        assert model.noise_std_[0] == pytest.approx(noise, rel=0.15)
        assert 0.9 < np.median(std) / noise < 1.55
        assert 1.0 < np.median(std) / np.median(peer_std) < 1.75
        return
    np.testing.assert_allclose(std, noise, rtol=0.3)
    # BayesianRidge, the reference model for linear data, agrees.
    np.testing.assert_allclose(std, peer_std, rtol=0.35)


@pytest.mark.parametrize("estimator", REGRESSORS, ids=_ids)
def test_std_is_smallest_at_the_centre_of_non_centred_data(estimator):
    # Ported from test_bayes.py::test_std_bayesian_ridge_noncentered: data
    # far from the origin; the sd is smaller inside them than at the origin.
    rng = np.random.RandomState(0)
    X = np.linspace(80, 100, 8).reshape(-1, 1)
    y = X[:, 0] + 10 * rng.standard_normal(8)
    if _is_hmc(estimator):
        # 100 draws of two chains leave one chain's wandering in the sd (at
        # 90: 11.4-12.4 over seven seeds, 19.1 in one); with 400 the sd is
        # 11.3-12.2 inside the data and 13.6-32.6 at the origin, for eight
        # seeds in single and in double precision.
        estimator = clone(estimator).set_params(n_samples=400, n_warmup=200)
    _, std = _fit(estimator, X, y).predict(np.array([[0.0], [90.0]]), True)
    assert std[1] < std[0]


# ----------------------------------------------------------- multi-output y


@pytest.mark.parametrize("estimator", REGRESSORS, ids=_ids)
def test_y_multioutput(estimator):
    # Ported from test_gpr.py::test_y_multioutput: a two-column y gives
    # two-column predictions, sds and draws, each column fitting its target.
    X, y = _smooth_data(n=40)
    Y = np.column_stack([y, -2 * y + 3])
    model = _fit(estimator, X, Y)
    mean, std = model.predict(X, return_std=True)
    assert mean.shape == std.shape == (40, 2)
    assert model.sample_y(X[:3], 4).shape == (3, 2, 4)
    assert model.loo_prediction_.shape == (40, 2)
    for k in range(2):
        residual = Y[:, k] - mean[:, k]
        assert np.sqrt(np.mean(residual**2)) < 0.2 * np.std(Y[:, k])
    # The second column is the first one scaled by two: so is its sd.
    np.testing.assert_allclose(np.median(std[:, 1] / std[:, 0]), 2.0, rtol=0.3)


@pytest.mark.xfail(
    strict=True,
    reason="model difference: the network's outputs share its hidden units "
    "and weight priors, so a two-output fit is one joint model; a "
    "GaussianProcessRegressor fits every column independently with the same "
    "kernel, giving each column the single-output prediction",
)
@pytest.mark.parametrize("estimator", REGRESSORS, ids=_ids)
def test_y_multioutput_columns_equal_single_output_fits(estimator):
    X, y = _smooth_data(n=40)
    single = _fit(estimator, X, y).predict(X)
    double = _fit(estimator, X, np.column_stack([y, y])).predict(X)
    np.testing.assert_allclose(double[:, 0], single, rtol=1e-6)


# ----------------------------------------------------------- constant target


@pytest.mark.parametrize("estimator", REGRESSORS, ids=_ids)
def test_constant_target(estimator):
    # Ported from test_bayes.py::test_prediction_bayesian_ridge_ard_with_
    # constant_input and ::test_std_..._with_constant_input, and from
    # test_gpr.py::test_constant_target (with a second, varying column).
    rng = np.random.RandomState(0)
    constant = rng.rand()
    X = rng.random_sample((10, 5))
    model = _fit(estimator, X, np.full(10, constant))
    mean, std = model.predict(X, return_std=True)
    # HMC: exact (the posterior is symmetric about a constant); the ensemble
    # to its optimiser's tolerance, relative to the constant.
    np.testing.assert_allclose(mean, constant, rtol=0 if _is_hmc(estimator) else 1e-3)
    assert np.all(std < 0.01) and np.all(std > 0)
    Y = np.column_stack([rng.normal(size=10), np.full(10, 2.0)])
    mean, std = _fit(estimator, X, Y).predict(X, return_std=True)
    assert mean.shape == (10, 2)
    np.testing.assert_allclose(mean[:, 1], 2.0, rtol=0 if _is_hmc(estimator) else 1e-3)
    assert np.all(std[:, 1] < 0.01 * 2.0 * 10)


# ------------------------------------------------------------- sample_weight


@pytest.mark.parametrize("estimator", REGRESSORS, ids=_ids)
def test_sample_weight_is_repetition(estimator):
    # Ported from test_bayes.py::test_bayesian_sample_weights, which checks
    # the weighted fit against the weighted Ridge solution of the same
    # problem; for a network the reference is the fit on repeated rows (the
    # meaning of an integer weight), within Monte Carlo or optimiser error.
    X, y = _smooth_data(n=30, seed=3)
    w = np.random.RandomState(1).randint(1, 4, size=30)
    weighted = _fit(estimator, X, y, sample_weight=w)
    repeated = _fit(estimator, np.repeat(X, w, axis=0), np.repeat(y, w))
    grid = np.linspace(-1.8, 1.8, 9)[:, None]
    mean_w, std_w = weighted.predict(grid, return_std=True)
    mean_r, std_r = repeated.predict(grid, return_std=True)
    np.testing.assert_allclose(mean_w, mean_r, atol=0.1)
    np.testing.assert_allclose(std_w, std_r, rtol=0.3)


@pytest.mark.parametrize("estimator", REGRESSORS, ids=_ids)
def test_sample_weight_is_validated(estimator):
    X, y = _smooth_data(n=10)
    with pytest.raises(ValueError, match="(?i)negative"):
        _fit(estimator, X, y, sample_weight=-np.ones(10))
    with pytest.raises(ValueError, match="sample_weight"):
        _fit(estimator, X, y, sample_weight=np.ones(3))


# --------------------------------------------------- prediction at training points


@pytest.mark.parametrize("estimator", REGRESSORS, ids=_ids)
def test_toy_identity_function(estimator):
    # Ported from test_bayes.py::test_toy_bayesian_ridge_object: five points
    # of y = x; the identity is learnt, to 0.05 inside the data (BayesianRidge
    # reaches 0.005 with a linear model, the network's prior admits curvature
    # that five points cannot rule out).
    X = np.array([[1.0], [2.0], [6.0], [8.0], [10.0]])
    model = _fit(estimator, X, X[:, 0])
    np.testing.assert_allclose(
        model.predict([[1.0], [3.0], [4.0]]), [1, 3, 4], atol=0.5
    )
    np.testing.assert_allclose(model.predict(X), X[:, 0], atol=0.05 * 9)


@pytest.mark.parametrize("estimator", REGRESSORS, ids=_ids)
def test_prediction_at_training_points(estimator):
    # Ported from test_gpr.py::test_gpr_interpolation: noise-free data are
    # fitted at the training points, with a small sd there.  A GP without a
    # noise term interpolates exactly (sd 0); these models learn a noise
    # level, so the fit is as close as the learnt noise, and the sd about it.
    X = np.atleast_2d([1.0, 3.0, 5.0, 6.0, 7.0, 8.0, 4.0, 2.0, 2.5, 5.5]).T
    y = X[:, 0] * np.sin(X[:, 0])
    model = _fit(estimator, X, y)
    mean, std = model.predict(X, return_std=True)
    scale = np.std(y)
    assert np.sqrt(np.mean((mean - y) ** 2)) < 0.15 * scale
    assert np.median(std) < 0.25 * scale


@pytest.mark.xfail(
    strict=True,
    reason="model difference: a GaussianProcessRegressor without a noise "
    "term interpolates noise-free data exactly (sd 0 at the training points); "
    "the network models carry a Gaussian noise whose precision has a proper "
    "prior, so their sd at the training points is never 0",
)
@pytest.mark.parametrize("estimator", REGRESSORS, ids=_ids)
def test_exact_interpolation(estimator):
    X = np.atleast_2d([1.0, 3.0, 5.0, 6.0, 7.0, 8.0]).T
    y = X[:, 0] * np.sin(X[:, 0])
    mean, std = _fit(estimator, X, y).predict(X, return_std=True)
    np.testing.assert_allclose(mean, y, atol=1e-8)
    np.testing.assert_allclose(std, 0.0, atol=1e-5)


@pytest.mark.parametrize("estimator", REGRESSORS, ids=_ids)
def test_duplicate_input(estimator):
    # Ported from test_gpr.py::test_duplicate_input: two different targets at
    # the same input are fine; the prediction there lies between them and is
    # the same whichever order the rows come in.
    X, y = _smooth_data(n=20)
    X2 = np.vstack([X, X[:1]])
    y2 = np.append(y, y[0] + 1.0)
    model = _fit(estimator, X2, y2)
    mean = model.predict(X[:1])[0]
    assert y[0] - 0.3 < mean < y[0] + 1.3
    assert np.all(np.isfinite(model.predict(X2, return_std=True)[1]))


# ------------------------------------------------------------ inputs and dtypes


@pytest.mark.parametrize("estimator", REGRESSORS, ids=_ids)
def test_predict_input_not_modified(estimator):
    # Ported from test_gpr.py::test_gpr_predict_input_not_modified, with fit
    # and sample_y added.
    X, y = _smooth_data(n=20)
    X_fit, y_fit = X.copy(), y.copy()
    model = _fit(estimator, X_fit, y_fit)
    np.testing.assert_array_equal(X_fit, X)
    np.testing.assert_array_equal(y_fit, y)
    X_test = X[:5].copy()
    model.predict(X_test, return_std=True)
    model.sample_y(X_test, 3, random_state=0)
    np.testing.assert_array_equal(X_test, X[:5])


@pytest.mark.parametrize("estimator", REGRESSORS, ids=_ids)
def test_dtype_correctness(estimator):
    # Ported from test_bayes.py::test_dtype_correctness and ::test_dtype_match:
    # float32 data give the model of their float64 values.  The outputs are
    # float64 whatever the input, as GaussianProcessRegressor's (the network
    # cores work in float64; BayesianRidge keeps float32).
    X, y = _smooth_data(n=20)
    X32 = X.astype(np.float32)
    a = _fit(estimator, X32, y.astype(np.float32))
    b = _fit(estimator, X32.astype(np.float64), y.astype(np.float32).astype(float))
    mean, std = a.predict(X32, return_std=True)
    np.testing.assert_array_equal(mean, b.predict(X32.astype(np.float64)))
    peer_mean, peer_std = GaussianProcessRegressor().fit(X32, y).predict(X32, True)
    assert mean.dtype == peer_mean.dtype == np.float64
    assert std.dtype == peer_std.dtype == np.float64
    # Integer inputs and targets are numbers too.
    Xi, yi = np.round(X * 10).astype(int), np.round(y * 10).astype(int)
    c = _fit(estimator, Xi, yi)
    d = _fit(estimator, Xi.astype(float), yi.astype(float))
    np.testing.assert_array_equal(c.predict(Xi), d.predict(Xi.astype(float)))


@pytest.mark.parametrize("estimator", REGRESSORS, ids=_ids)
def test_y_normalisation(estimator):
    # Ported from test_gpr.py::test_y_normalization and ::test_large_variance_y:
    # targets are standardised internally, so a change of y's units gives the
    # same model in the new units.  A power-of-two factor changes no bit of
    # the standardised data: the fits are identical.
    X, y = _smooth_data(n=30)
    base = _fit(estimator, X, y)
    mean, std = base.predict(X[:5], return_std=True)
    scaled = _fit(estimator, X, 2.0**20 * y)
    mean_s, std_s = scaled.predict(X[:5], return_std=True)
    np.testing.assert_allclose(mean_s, 2.0**20 * mean, rtol=1e-12)
    np.testing.assert_allclose(std_s, 2.0**20 * std, rtol=1e-12)
    # An offset and a factor of 1e4 change the standardised targets by
    # rounding: the optimiser's result moves by as little, a chain's draws
    # become other draws of the same posterior (Monte Carlo error: up to a
    # few tenths of the predictive sd for 200 draws of short chains).
    moved = _fit(estimator, X, 1e4 * y + 5e4)
    mean_m, std_m = moved.predict(X[:5], return_std=True)
    if _is_hmc(estimator):
        np.testing.assert_allclose(mean_m, 1e4 * mean + 5e4, atol=0.3 * 1e4 * std.max())
        np.testing.assert_allclose(std_m, 1e4 * std, rtol=0.3)
    else:
        np.testing.assert_allclose(mean_m, 1e4 * mean + 5e4, rtol=1e-6)
        np.testing.assert_allclose(std_m, 1e4 * std, rtol=1e-5)
