"""Annealed importance sampling of log Z against exact enumeration.

References: exact enumeration of the hidden layer (``bethe/_exact.py``), the
closed form of uncoupled models, and the unbiasedness of AIS's importance
weights for any schedule (Neal 2001), checked by Monte Carlo.
"""

import warnings
from functools import cache

import numpy as np
import pytest
from joblib import parallel_config
from numpy.testing import assert_allclose, assert_array_equal
from scipy.sparse import csr_matrix
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.neural_network import BernoulliRBM

from sklearn_meanfield import BetheRBM
from sklearn_meanfield.bethe._ais import (
    ais_log_likelihood,
    ais_log_partition,
    ais_schedule,
    base_rate_visible_bias,
)
from sklearn_meanfield.bethe._exact import (
    exact_log_likelihood,
    exact_log_partition,
    free_energy,
)

# |AIS log Z - exact log Z| (= the error of the log-likelihood of every
# sample) within 0.05 nat: well below the differences between the models
# it ranks, and several standard errors of the defaults.
TOLERANCE = 0.05


@cache
def digits_split():
    X, _ = load_digits(return_X_y=True)
    X = (X > 7).astype(float)
    order = np.random.RandomState(0).permutation(len(X))
    return X[order[:1400]], X[order[1400:]]


@cache
def trained(cls_name, n_components, learning_rate, n_iter, n_train, seed):
    """Parameters ``(W, b, c)`` and training data of a model fitted on digits."""
    X_train, _ = digits_split()
    X = X_train[np.random.RandomState(seed).permutation(len(X_train))[:n_train]]
    cls = {"bernoulli": BernoulliRBM, "bethe": BetheRBM}[cls_name]
    model = cls(
        n_components=n_components,
        learning_rate=learning_rate,
        n_iter=n_iter,
        random_state=seed,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(X)
    params = (model.components_, model.intercept_visible_, model.intercept_hidden_)
    return tuple(np.asarray(p, dtype=float) for p in params), X


# (class, hidden units, learning rate, epochs, training digits, seed): the
# benchmark's 16-unit settings for both classes, and smaller models.
DEFAULT_MODELS = [
    ("bernoulli", 16, 0.05, 20, 1400, 0),
    ("bethe", 12, 0.05, 10, 500, 1),
]
SLOW_MODELS = [
    ("bethe", 16, 0.05, 20, 1400, 0),
    ("bernoulli", 20, 0.1, 30, 1400, 2),
    ("bernoulli", 8, 0.1, 10, 700, 3),
    ("bethe", 20, 0.1, 10, 1400, 4),
]


@cache
def default_ais(case):
    (W, b, c), X = trained(*case)
    base = base_rate_visible_bias(X)
    return ais_log_partition(W, b, c, base_visible_bias=base, random_state=0)


def _check_trained_model(case):
    (W, b, c), _ = trained(*case)
    result = default_ais(case)
    exact = exact_log_partition(W, b, c)
    assert abs(result.log_z - exact) < TOLERANCE
    # The reported standard error is of the size of the real error, and
    # well inside the target.
    assert result.std_error < TOLERANCE / 2
    assert abs(result.log_z - exact) < 5 * result.std_error + 0.01
    assert result.log_weights.shape == (100,)


@pytest.mark.parametrize("case", DEFAULT_MODELS, ids=str)
def test_trained_models_match_exact_enumeration(case):
    _check_trained_model(case)


@pytest.mark.slow
@pytest.mark.parametrize("case", SLOW_MODELS, ids=str)
def test_more_trained_models_match_exact_enumeration(case):
    _check_trained_model(case)


def test_more_hidden_than_visible_units():
    # 100 hidden units on 4 x 4 digits: exact enumeration runs over the 16
    # visible units, while AIS still sums the hidden units out.
    X, _ = load_digits(return_X_y=True)
    X = (X.reshape(-1, 4, 2, 4, 2).max(axis=(2, 4)).reshape(-1, 16) > 8).astype(float)
    model = BernoulliRBM(
        n_components=100, learning_rate=0.05, n_iter=20, random_state=0
    ).fit(X[:1000])
    params = (model.components_, model.intercept_visible_, model.intercept_hidden_)
    result = ais_log_partition(
        *params,
        base_visible_bias=base_rate_visible_bias(X[:1000]),
        n_temperatures=1000,
        random_state=0,
    )
    exact = exact_log_partition(*params)
    assert abs(result.log_z - exact) < TOLERANCE
    assert abs(result.log_z - exact) < 5 * result.std_error + 0.01


def test_log_likelihood_of_held_out_digits():
    (W, b, c), X_train = trained(*DEFAULT_MODELS[0])
    _, X_test = digits_split()
    result = ais_log_likelihood(
        X_test,
        W,
        b,
        c,
        base_visible_bias=base_rate_visible_bias(X_train),
        n_temperatures=2000,
        random_state=0,
    )
    exact = exact_log_likelihood(X_test, W, b, c)
    error = result.log_likelihood - exact
    # One log Z for all samples: the error is the same constant everywhere.
    assert_allclose(error, error[0], atol=1e-10)
    assert abs(error.mean()) < TOLERANCE
    assert result.std_error == result.partition.std_error
    assert_allclose(
        result.log_likelihood,
        -free_energy(X_test, W, b, c) - result.partition.log_z,
        rtol=0,
        atol=1e-10,
    )


def test_log_likelihood_base_rates_default_to_the_data():
    rng = np.random.RandomState(0)
    W, b, c = rng.normal(size=(3, 5)), rng.normal(size=5), rng.normal(size=3)
    X = (rng.uniform(size=(30, 5)) < 0.3).astype(float)
    kwargs = dict(n_chains=20, n_temperatures=50, random_state=1)
    by_default = ais_log_likelihood(X, W, b, c, **kwargs)
    explicit = ais_log_likelihood(
        X, W, b, c, base_visible_bias=base_rate_visible_bias(X), **kwargs
    )
    assert_array_equal(by_default.log_likelihood, explicit.log_likelihood)
    uniform = ais_log_likelihood(X, W, b, c, base_visible_bias=None, **kwargs)
    assert not np.array_equal(uniform.log_likelihood, by_default.log_likelihood)


def test_sparse_data_as_dense():
    rng = np.random.RandomState(0)
    W, b, c = rng.normal(size=(3, 5)), rng.normal(size=5), rng.normal(size=3)
    X = (rng.uniform(size=(30, 5)) < 0.3).astype(float)
    kwargs = dict(n_chains=20, n_temperatures=50, random_state=1)
    dense = ais_log_likelihood(X, W, b, c, **kwargs)
    sparse = ais_log_likelihood(csr_matrix(X), W, b, c, **kwargs)
    assert_allclose(sparse.log_likelihood, dense.log_likelihood, rtol=1e-12)
    assert_allclose(
        base_rate_visible_bias(csr_matrix(X)), base_rate_visible_bias(X), rtol=1e-12
    )


def test_standard_error_shrinks_with_more_temperatures():
    case = DEFAULT_MODELS[0]
    (W, b, c), X = trained(*case)
    base = base_rate_visible_bias(X)
    errors = [
        ais_log_partition(
            W, b, c, base_visible_bias=base, n_temperatures=k, random_state=0
        ).std_error
        for k in (100, 1000)
    ]
    errors.append(default_ais(case).std_error)  # 10000 temperatures
    # Var(log w) ~ 1/K for long schedules: a factor sqrt(10) = 3.2 per decade
    # in the standard error.  The ratio asked for, 1.5 per decade, allows
    # for the delta-method standard error's own sampling error and for
    # schedules of 100 temperatures not yet being in the 1/K regime.
    assert errors[0] > 1.5 * errors[1] > 1.5**2 * errors[2]


@pytest.mark.slow
def test_spread_over_seeds_shrinks_with_more_temperatures():
    (W, b, c), X = trained(*DEFAULT_MODELS[0])
    base = base_rate_visible_bias(X)
    exact = exact_log_partition(W, b, c)
    spreads, mean_std_errors, mean_errors = [], [], []
    for k in (100, 1000, 10000):
        results = [
            ais_log_partition(
                W, b, c, base_visible_bias=base, n_temperatures=k, random_state=s
            )
            for s in range(10)
        ]
        estimates = np.array([r.log_z for r in results])
        spreads.append(estimates.std(ddof=1))
        mean_std_errors.append(np.mean([r.std_error for r in results]))
        mean_errors.append(abs(estimates.mean() - exact))
    # The spread over seeds shrinks as the standard error, sqrt(10) per
    # decade; 10 seeds estimate a spread to about 25%, so a ratio of 1.5
    # per decade is within reach of two such errors compounding.
    assert spreads[0] > 1.5 * spreads[1] > 1.5**2 * spreads[2]
    assert mean_errors[2] < TOLERANCE / 2
    # The delta-method standard error is calibrated: it matches the spread
    # over seeds.  A standard deviation from 10 seeds has a relative sd of
    # 1/sqrt(2 * 9) = 0.24, so 0.4 to 2.5 is more than three of them either
    # side of 1.
    for spread, std_error in zip(spreads, mean_std_errors):
        assert 0.4 < spread / std_error < 2.5


def test_zero_couplings_give_the_closed_form_exactly():
    # With W = 0 and the base model's visible biases equal to the target's,
    # every intermediate distribution is the base one times a constant: all
    # importance weights are equal and the estimate is exact.
    rng = np.random.RandomState(0)
    b, c = rng.normal(size=7), 3 * rng.normal(size=4)
    result = ais_log_partition(
        np.zeros((4, 7)), b, c, base_visible_bias=b, n_temperatures=50, random_state=0
    )
    closed_form = np.logaddexp(0, b).sum() + np.logaddexp(0, c).sum()
    assert_allclose(result.log_weights, result.log_weights[0], rtol=0, atol=1e-12)
    assert_allclose(result.log_z, closed_form, rtol=0, atol=1e-12)
    assert result.std_error < 1e-12
    assert_allclose(result.log_z_base, np.logaddexp(0, b).sum() + 4 * np.log(2))


@pytest.mark.parametrize("n_temperatures", [1, 3, 10])
def test_importance_weights_are_unbiased_for_short_schedules(n_temperatures):
    # E[w] = Z / Z_base for any schedule (Neal 2001), however few the
    # temperatures, if and only if every transition leaves its intermediate
    # distribution invariant and the weights use the right temperatures.
    # Strong couplings make a wrong transition or weight show.
    rng = np.random.RandomState(1)
    W, b, c = 1.5 * rng.normal(size=(3, 5)), rng.normal(size=5), rng.normal(size=3)
    base = rng.normal(size=5)
    result = ais_log_partition(
        W,
        b,
        c,
        base_visible_bias=base,
        n_chains=20000,
        n_temperatures=n_temperatures,
        random_state=0,
    )
    exact = exact_log_partition(W, b, c)
    assert result.std_error < 0.05
    assert abs(result.log_z - exact) < 4 * result.std_error


def _one_and_two_jobs(backend):
    rng = np.random.RandomState(0)
    W, b, c = rng.normal(size=(6, 9)), rng.normal(size=9), rng.normal(size=6)
    kwargs = dict(n_chains=130, n_temperatures=200, random_state=3)
    one = ais_log_partition(W, b, c, n_jobs=1, **kwargs)
    with parallel_config(backend=backend):
        two = ais_log_partition(W, b, c, n_jobs=2, **kwargs)
    return one, two, (W, b, c), kwargs


@pytest.mark.slow
def test_same_result_with_worker_processes():
    one, two, _, _ = _one_and_two_jobs("loky")
    assert_array_equal(one.log_weights, two.log_weights)


def test_same_result_for_any_n_jobs():
    # Threads here (fast to start); processes in the slow test above.
    one, two, (W, b, c), kwargs = _one_and_two_jobs("threading")
    assert_array_equal(one.log_weights, two.log_weights)
    assert one.log_z == two.log_z
    other_seed = ais_log_partition(W, b, c, n_jobs=1, **{**kwargs, "random_state": 4})
    assert not np.array_equal(one.log_weights, other_seed.log_weights)


def test_bernoulli_rbm_float32_parameters():
    X, _ = digits_split()
    model = BernoulliRBM(n_components=6, n_iter=2, random_state=0)
    model.fit(X[:300].astype(np.float32))
    params = (model.components_, model.intercept_visible_, model.intercept_hidden_)
    assert params[0].dtype == np.float32
    result = ais_log_partition(
        *params,
        base_visible_bias=base_rate_visible_bias(X[:300]),
        n_temperatures=1000,
        random_state=0,
    )
    exact = exact_log_partition(*(p.astype(float) for p in params))
    assert abs(result.log_z - exact) < TOLERANCE


def test_schedules():
    assert_allclose(ais_schedule(5), [0, 0.2, 0.4, 0.6, 0.8, 1.0], rtol=0, atol=1e-15)
    betas = ais_schedule(14500, "salakhutdinov-murray")
    assert betas.shape == (14501,)
    assert betas[0] == 0 and betas[-1] == 1
    assert_allclose(betas[[500, 4500]], [0.5, 0.9])
    assert_allclose(np.diff(betas[:501]), 0.5 / 500)
    assert_allclose(np.diff(betas[500:4501]), 0.4 / 4000)
    assert_allclose(np.diff(betas[4500:]), 0.1 / 10000)
    for k in (3, 10, 999, 10000):
        betas = ais_schedule(k, "salakhutdinov-murray")
        assert betas.shape == (k + 1,)
        assert np.all(np.diff(betas) > 0)
        assert betas[0] == 0 and betas[-1] == 1


def test_base_rate_visible_bias_is_the_logit_of_clipped_means():
    X = np.array([[0, 1, 1, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 1, 1, 0]])
    bias = base_rate_visible_bias(X, eps=0.01)
    assert_allclose(1 / (1 + np.exp(-bias)), [0.25, 0.99, 0.75, 0.01])


def test_invalid_input():
    W, b, c = np.zeros((2, 3)), np.zeros(3), np.zeros(2)
    with pytest.raises(ValueError, match="hidden_bias of shape"):
        ais_log_partition(W, b, np.zeros(3))
    with pytest.raises(ValueError, match="base_visible_bias"):
        ais_log_partition(W, b, c, base_visible_bias=np.zeros(2))
    with pytest.raises(ValueError, match="n_chains"):
        ais_log_partition(W, b, c, n_chains=0)
    with pytest.raises(ValueError, match="from 0 to 1"):
        ais_log_partition(W, b, c, n_temperatures=[0.0, 0.5])
    with pytest.raises(ValueError, match="from 0 to 1"):
        ais_log_partition(W, b, c, n_temperatures=[0.0, 0.7, 0.5, 1.0])
    with pytest.raises(ValueError, match="at least 1"):
        ais_log_partition(W, b, c, n_temperatures=0)
    with pytest.raises(ValueError, match="at least 3"):
        ais_schedule(2, "salakhutdinov-murray")
    with pytest.raises(ValueError, match="spacing"):
        ais_schedule(10, "geometric")
    with pytest.raises(ValueError, match="finite"):
        ais_log_partition(W, np.array([0.0, np.nan, 0.0]), c)
    with pytest.raises(ValueError, match="eps"):
        base_rate_visible_bias(np.zeros((2, 3)), eps=0.5)
    with pytest.raises(ValueError, match="columns"):
        ais_log_likelihood(np.zeros((2, 4)), W, b, c)
