"""Single-precision leapfrog kicks: the gradient they use, and exact chains.

The kicks of ``gradient_dtype="float32"`` follow the gradient computed in
single precision; the Metropolis test uses the log posterior in double
precision.  The sampler-level exactness of such split targets (detailed
balance with a deliberately wrong force) is tested in test_hmc_adaptive.py.
"""

import warnings

import numpy as np
import pytest
from sklearn.utils.estimator_checks import (
    check_sample_weight_equivalence_on_dense_data,
)
from test_common import draw_for_draw, make_instance

from sklearn_meanfield import HMCNetworkRegressor
from sklearn_meanfield.hmc._network import (
    HyperPrior,
    NetworkLayout,
    augment,
    log_posterior,
    log_posterior_and_grad,
    log_posterior_gradient,
    prior_precision_vector,
)
from sklearn_meanfield.hmc._sampler import SplitTarget
from sklearn_meanfield.hmc._transition import NetworkPosterior


def _problem(ard, n_outputs, n_samples=500, seed=0):
    rng = np.random.default_rng(seed)
    layout = NetworkLayout(4, 6, n_outputs, ard)
    X = rng.normal(size=(n_samples, 4))
    Y = rng.normal(size=(n_samples, n_outputs))
    theta = rng.normal(size=(3, layout.n_params))
    noise = rng.gamma(2.0, 1.0, size=(3, n_outputs))
    groups = rng.gamma(2.0, 1.0, size=(3, layout.n_groups))
    weights = rng.uniform(0.0, 3.0, size=n_samples)
    return layout, X, Y, theta, noise, prior_precision_vector(groups, layout), weights


@pytest.mark.parametrize("ard,n_outputs", [(True, 2), (False, 1)])
@pytest.mark.parametrize("weighted", [False, True])
def test_single_precision_gradient_matches_the_double_precision_one(
    ard, n_outputs, weighted
):
    # log_posterior_and_grad's gradient is checked against finite differences
    # in test_hmc_network.py; the single-precision one agrees with it to the
    # accuracy of single-precision sums over 500 rows.
    layout, X, Y, theta, noise, precision, weights = _problem(ard, n_outputs)
    w = weights if weighted else None
    exact = log_posterior_and_grad(
        theta, X, Y, noise, precision, layout, sample_weight=w
    )[1]
    X_aug_T = augment(X)
    single = log_posterior_gradient(
        theta,
        Y.astype(np.float32),
        noise,
        precision,
        layout,
        X_aug_T.astype(np.float32),
        None if w is None else w.astype(np.float32),
    )
    assert single.dtype == np.float64
    scale = np.abs(exact).max(axis=1, keepdims=True)
    error = np.abs(single - exact) / scale
    assert error.max() < 1e-5
    assert error.max() > 1e-12  # it is single precision
    # In double precision it is the same computation, bit for bit.
    double = log_posterior_gradient(theta, Y, noise, precision, layout, X_aug_T, w)
    np.testing.assert_array_equal(double, exact)


def test_log_posterior_alone_is_the_log_posterior_of_the_pair():
    layout, X, Y, theta, noise, precision, weights = _problem(True, 2)
    for w in (None, weights):
        pair = log_posterior_and_grad(
            theta, X, Y, noise, precision, layout, sample_weight=w
        )[0]
        alone = log_posterior(theta, X, Y, noise, precision, layout, sample_weight=w)
        np.testing.assert_array_equal(alone, pair)


def _posterior(gradient_dtype, sample_weight=None):
    layout, X, Y, *_ = _problem(True, 2, n_samples=60)
    return NetworkPosterior(
        X, Y, layout, HyperPrior(), sample_weight, gradient_dtype=gradient_dtype
    )


def test_single_precision_posterior_splits_its_target():
    single, double = _posterior(np.float32), _posterior(np.float64)
    state = single.initial_state(np.random.default_rng(0), 3)
    noise, groups = state.noise_precision, state.group_precision
    target = single.target(noise, groups)
    reference = double.target(noise, groups)
    assert isinstance(target, SplitTarget)
    assert not isinstance(reference, SplitTarget)
    theta = state.theta + 0.1
    exact_log_prob, exact_grad = reference(theta)
    log_prob, grad = target(theta)
    # The Metropolis test sees the double-precision log posterior exactly.
    np.testing.assert_array_equal(log_prob, exact_log_prob)
    np.testing.assert_allclose(
        grad, exact_grad, rtol=0, atol=1e-5 * abs(exact_grad).max()
    )
    # The state's gradient is the kicks' force (the same field at both ends
    # of every trajectory keeps the leapfrog reversible).
    np.testing.assert_array_equal(state.grad, target.gradient(state.theta))
    # Tempering keeps the precision of the kicks and weights them alike.
    tempered = single.tempered(0.25)
    assert isinstance(tempered.target(noise, groups), SplitTarget)
    np.testing.assert_allclose(
        tempered.target(noise, groups).gradient(theta),
        double.tempered(0.25).target(noise, groups)(theta)[1],
        rtol=0,
        atol=1e-5 * abs(exact_grad).max(),
    )


def _one_dimensional(n, seed):
    rng = np.random.RandomState(seed)
    X = rng.uniform(-2, 2, size=(n, 1))
    return X, np.sin(2 * X[:, 0]) + rng.normal(0, 0.1, size=n)


def test_single_and_double_precision_chains_sample_the_same_posterior():
    # Different draws (the kicks differ by rounding, which the trajectories
    # amplify), the same distribution: the predictions agree within Monte
    # Carlo error (predictive sd about 0.05, over sqrt(ESS) about 0.01).
    X, y = _one_dimensional(40, seed=9)
    grid = np.linspace(-1.8, 1.8, 9)[:, None]
    params = dict(
        hidden_layer_size=4,
        n_samples=300,
        n_warmup=150,
        n_leapfrog=20,
        n_chains=2,
        random_state=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        single = HMCNetworkRegressor(gradient_dtype="float32", **params).fit(X, y)
        double = HMCNetworkRegressor(gradient_dtype="float64", **params).fit(X, y)
    assert not np.array_equal(single.parameter_draws_, double.parameter_draws_)
    mean_s, std_s = single.predict(grid, return_std=True)
    mean_d, std_d = double.predict(grid, return_std=True)
    np.testing.assert_allclose(mean_s, mean_d, atol=0.05)
    np.testing.assert_allclose(mean_s, np.sin(2 * grid[:, 0]), atol=0.15)
    np.testing.assert_allclose(std_s, std_d, rtol=0.2)
    assert single.noise_std_[0] == pytest.approx(double.noise_std_[0], rel=0.15)
    assert np.mean(single.acceptance_rate_) == pytest.approx(
        np.mean(double.acceptance_rate_), abs=0.1
    )


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_double_precision_passes_the_sample_weight_equivalence_check():
    # The check compares the fits with integer weights and with repeated rows
    # draw for draw, which holds with double-precision kicks (the default's
    # single-precision ones round the two sums apart: tests/test_common.py);
    # the instance is the common tests' one, in double precision.
    check_sample_weight_equivalence_on_dense_data(
        "HMCNetworkRegressor",
        draw_for_draw(make_instance(HMCNetworkRegressor)),
    )
