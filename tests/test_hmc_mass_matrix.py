"""Diagonal mass-matrix (metric) adaptation of the HMC samplers.

Stan's windows against the manual's numbers, the adapted metric against the
known variances of a diagonal Gaussian, invariance of the target with the
frozen metric (moments within Monte Carlo error), the energy bookkeeping of a
trajectory with a metric, the network sampler's metric against a brute-force
recomputation from its own states, and independence of the batch / n_jobs.
"""

import functools

import numpy as np
import pytest
from hmc_targets import (
    assert_moments_within_monte_carlo_error,
    gaussian_target,
    small_network_posterior,
)
from joblib import parallel_config

from sklearn_meanfield import HMCNetworkRegressor
from sklearn_meanfield.hmc._chains import ChainRandom, ChainSettings, run_chains
from sklearn_meanfield.hmc._sampler import (
    adaptive_hmc,
    hmc_step,
    metric_windows,
    regularized_variance,
)


def test_metric_windows_are_stans():
    # Stan's reference manual: with 1000 warm-up iterations and its defaults
    # (initial buffer 75, first window 25, terminal buffer 50) the slow
    # windows are 25, 50, 100, 200 and 500 iterations long.
    windows = metric_windows(1000)
    assert [end - start for start, end in windows] == [25, 50, 100, 200, 500]
    assert windows[0][0] == 75 and windows[-1][1] == 950
    # Contiguous; a window whose doubled successor would not fit takes the
    # rest (Stan: 250 + 2 * 200 > 350 at 500 iterations, so the third
    # window ends at 350 rather than 250).
    assert metric_windows(400) == [(75, 100), (100, 150), (150, 350)]
    assert metric_windows(500) == [(75, 100), (100, 150), (150, 250), (250, 450)]
    # Short warm-ups: 15% initial buffer, 10% terminal buffer, one window;
    # below 20 iterations no metric is adapted.
    assert metric_windows(100) == [(15, 90)]
    assert metric_windows(19) == []
    # The network sampler runs them after its fixed-precision fifth.
    settings = ChainSettings(10, 500, 10, 0.1, adapt_mass_matrix=True)
    assert settings.metric_windows() == [(175, 200), (200, 250), (250, 450)]
    assert ChainSettings(10, 500, 10, 0.1).metric_windows() is None


VARIANCES = np.logspace(-2, 4, 5)  # sds from 0.1 to 100


@pytest.fixture(scope="module")
def spread_gaussian_run():
    """Fixed-length HMC with metric adaptation on a diagonal Gaussian whose
    variances span six orders of magnitude, 60 chains started from exact
    draws (so the windows see the target, not a transient)."""
    n_chains = 60
    start = np.random.default_rng(0).normal(size=(n_chains, 5)) * np.sqrt(VARIANCES)
    return adaptive_hmc(
        gaussian_target(np.zeros(5), np.diag(VARIANCES)),
        start,
        ChainRandom(range(n_chains)),
        n_warmup=500,
        n_samples=100,
        step_size=0.1,
        n_leapfrog=10,
        adapt_mass_matrix="variance",
    )


def test_adapted_metric_recovers_known_variances(spread_gaussian_run):
    # The last window of a 500-iteration warm-up holds n = 200 draws; the
    # metric's square is Stan's regularised variance estimate, whose
    # expectation is (n / (n + 5)) var + 5 / (n + 5).
    n = 200
    expected = regularized_variance(VARIANCES, n)
    ratio = spread_gaussian_run.metric**2 / expected  # (n_chains, 5)
    # A variance from n_eff independent draws has relative sd sqrt(2 /
    # n_eff); these chains give n_eff of about n / 2 (relative sd 0.14-0.2
    # across chains), so every chain is within 0.8 (about 5.7 sd) ...
    assert np.all(np.abs(ratio - 1) < 0.8)
    assert np.all(ratio.std(axis=0) < 2 * np.sqrt(2 / (n / 2)))
    # ... and the 60 chains' average within 4 of its standard errors and 6%.
    error = ratio.std(axis=0, ddof=1) / np.sqrt(len(ratio))
    assert np.all(np.abs(ratio.mean(axis=0) - 1) < np.minimum(4 * error, 0.06))
    # Without adaptation the metric would be ones: 1e-4 .. 1e2 off.
    assert np.all(np.ptp(np.log10(spread_gaussian_run.metric), axis=1) > 2)


@functools.cache
def _correlated_gaussian_metric(estimator, seed=1, n_chains=480):
    """The frozen metric of ``n_chains`` chains on a correlated Gaussian, as
    ratios to ``estimator``'s expectation (n_chains, 3), with the expectation
    and that of the other estimator.

    sds 0.1, 10 and 1, the first two correlated 0.9. Stan's estimator takes
    the marginal variance Sigma_ii; the Fisher-divergence one the geometric
    mean of the marginal and the conditional variance 1 / (Sigma^-1)_ii,
    here a factor 1 / sqrt(1 - 0.9^2) = 2.3 apart. The chains start from
    exact draws; the last window of the 500 warm-up iterations holds n = 200
    of them.
    """
    sd = np.array([0.1, 10.0, 1.0])
    corr = np.array([[1.0, 0.9, 0.0], [0.9, 1.0, 0.0], [0.0, 0.0, 1.0]])
    cov = corr * np.outer(sd, sd)
    n = 200
    start = np.random.default_rng(seed).multivariate_normal(np.zeros(3), cov, n_chains)
    out = adaptive_hmc(
        gaussian_target(np.zeros(3), cov),
        start,
        ChainRandom(np.random.SeedSequence(seed).spawn(n_chains)),
        n_warmup=500,
        n_samples=1,
        step_size=0.1,
        n_leapfrog=10,
        adapt_mass_matrix=estimator,
    )
    marginal = regularized_variance(np.diag(cov), n)
    conditional = 1.0 / np.diag(np.linalg.inv(cov))
    fisher = np.sqrt(marginal / regularized_variance(1.0 / conditional, n))
    expected, other = (
        (marginal, fisher) if estimator == "variance" else (fisher, marginal)
    )
    return out.metric**2 / expected, expected, other


@pytest.mark.parametrize("estimator", ["variance", "fisher"])
def test_metric_estimators_on_a_correlated_gaussian(estimator):
    ratio, expected, other = _correlated_gaussian_metric(estimator)
    mean = ratio.mean(axis=0)
    error = ratio.std(axis=0, ddof=1) / np.sqrt(len(ratio))  # 0.2-1.0%
    # Each estimator finds its own expectation, not the other's: they are a
    # factor 2.7 or more apart on the correlated pair.
    assert np.all(np.abs(np.log(mean * expected / other))[:2] > 0.9)
    # Near it: within 4 standard errors of the chains' average plus 5% for
    # the bias of an estimate from one window of warm-up draws (the step
    # size adapts on them).  Measured over 10 seeds of 480 chains, with AVX2
    # and with AVX-512 numpy kernels alike: "variance" -1.0% and -2.9%
    # (+-0.07%, +-0.3%), "fisher" +4.5% and +1.8% (+-0.14%), every seed
    # within this bound by 3.8 standard errors or more; see
    # test_fisher_metric_is_within_one_percent_of_its_expectation.
    assert np.all(np.abs(mean - 1) <= 0.05 + 4 * error)
    if estimator == "fisher":
        # For the independent unit coordinate the gradient is -q: the Fisher
        # estimate is exactly 1 in every chain.
        np.testing.assert_array_equal(ratio[:, 2], 1.0)


@pytest.mark.xfail(
    strict=True,
    reason="known bias: the gradient variances of the warm-up window are "
    "6.5% low (the step-size adaptation under-samples the narrow direction; "
    "frozen chains are exact), so the Fisher metric squared is 4.5% and 1.8% "
    "high on the correlated pair",
)
def test_fisher_metric_is_within_one_percent_of_its_expectation():
    # The ratio of two variance estimates from n_eff ~ 60 draws is biased by
    # their relative variance, about 1% (measured: the average of the
    # chains' ratios is 1.3% above the ratio of their averages).  What
    # fails: the window's gradient variances average 0.934 and 0.940 of
    # (Sigma^-1)_ii, the positions' 0.99-1.0 of Sigma_ii (1.00 for both
    # from frozen chains); with the step size alone adapting on a fixed
    # metric, warm-up draws give 0.93 at target_accept 0.8 and 1.01 at 0.95.
    ratio, _, _ = _correlated_gaussian_metric("fisher")
    mean = ratio.mean(axis=0)
    error = ratio.std(axis=0, ddof=1) / np.sqrt(len(ratio))  # 0.45%
    assert np.all(np.abs(mean - 1) <= 0.01 + 4 * error)


def test_frozen_metric_leaves_the_target_invariant(spread_gaussian_run):
    out = spread_gaussian_run
    assert_moments_within_monte_carlo_error(out.draws, np.zeros(5), VARIANCES)
    # With the metric the steps are about isotropic in the scaled
    # coordinates: one step size serves sds from 0.1 to 100.
    assert np.mean(out.accept_prob) > 0.8
    assert np.all(out.step_size > 0.2)


def test_adaptive_lengths_with_a_metric_leave_the_target_invariant():
    # ChEES trajectory lengths and the metric adapted together, from a
    # start away from the target; the frozen kernel samples it.
    variances = np.array([0.1, 1.0, 10.0, 100.0])
    n_chains = 30
    out = adaptive_hmc(
        gaussian_target(np.ones(4), np.diag(variances)),
        np.zeros((n_chains, 4)),
        ChainRandom(range(n_chains)),
        n_warmup=300,
        n_samples=100,
        step_size=0.3,
        adapt_mass_matrix=True,
    )
    assert_moments_within_monte_carlo_error(out.draws, np.ones(4), variances + 1)
    # The metric follows the sds (a factor of about 30 between the extremes).
    spread = out.metric[:, -1] / out.metric[:, 0]
    assert np.all((spread > 10) & (spread < 60))
    assert np.mean(out.accept_prob) > 0.7


def test_momentum_and_kinetic_energy_use_the_metric():
    # Diagonal Gaussian, sds 0.1 .. 100, metric = the sds: in the scaled
    # coordinates every coordinate is a unit harmonic oscillator, so a
    # trajectory of duration pi ends at -q for all of them, which requires
    # the leapfrog's position and momentum updates and the momentum's
    # distribution to use the same metric.
    sd = np.sqrt(VARIANCES)
    target = gaussian_target(np.zeros(5), np.diag(VARIANCES))
    q = np.random.default_rng(0).normal(size=(8, 5)) * sd
    log_prob, grad = target(q)
    n_steps = 200
    eps = np.pi / n_steps
    step = hmc_step(q, log_prob, grad, target, eps * sd, n_steps, ChainRandom(range(8)))
    np.testing.assert_allclose(step.proposal / sd, -q / sd, atol=2e-3)
    assert np.all(step.accepted)
    # The energy error is the change of -log p + |p|^2 / 2 with p the
    # standard-normal momentum of the scaled coordinates (kinetic energy
    # P' M^-1 P / 2 for the physical momentum P = p / (eps sd), mass
    # M = 1 / (eps sd)^2), drawn first from each chain's generator.
    p0 = ChainRandom(range(8)).standard_normal(q.shape)
    physical = p0 / (eps * sd)
    kinetic = 0.5 * np.sum(physical**2 * (eps * sd) ** 2, axis=1)
    end_log_prob, _ = target(step.proposal)
    dH = (-end_log_prob + 0.5 * np.sum(step.proposal_momentum**2, axis=1)) - (
        -log_prob + kinetic
    )
    np.testing.assert_allclose(step.energy_error, dH, rtol=1e-10, atol=1e-12)
    assert np.max(np.abs(step.energy_error)) < 1e-3
    # With the unit metric at the same step the wide coordinates barely
    # move: the same test fails.
    unit = hmc_step(q, log_prob, grad, target, eps, n_steps, ChainRandom(range(8)))
    assert np.max(np.abs(unit.proposal / sd + q / sd)) > 1


@pytest.mark.parametrize(
    "sampler, estimator",
    [("hmc", "variance"), ("chees", "variance"), ("hmc", "fisher")],
)
def test_network_metric_is_the_regularised_spread_of_the_scaled_weights(
    sampler, estimator
):
    # The metric of each chain, recomputed by brute force from the states
    # the chain visited: in every window the variance (ddof 1) of the
    # weights divided by the step scales of their precisions, regularised
    # as Stan does; the last window's survives.
    posterior = small_network_posterior(40)
    settings = ChainSettings(
        n_samples=6,
        n_warmup=100,
        n_leapfrog=8,
        step_size=0.2,
        sampler=sampler,
        adapt_mass_matrix=estimator,
    )
    scaled, gradients = [], []

    def record(iteration, state, info):
        scaled.append(state.theta / state.scales)
        gradients.append(state.grad * state.scales)
        return False

    out = run_chains(posterior, [3, 4], settings, on_iteration=record)
    start, end = settings.metric_windows()[-1]
    n = end - start
    variance = regularized_variance(np.var(scaled[start:end], axis=0, ddof=1), n)
    if estimator == "variance":
        expected = np.sqrt(variance)
    else:
        grad_variance = np.var(gradients[start:end], axis=0, ddof=1)
        expected = (variance / regularized_variance(grad_variance, n)) ** 0.25
    np.testing.assert_allclose(out.metric, expected, rtol=1e-10)
    assert np.ptp(np.log(out.metric)) > 1  # not a constant factor
    # Each chain's metric and draws depend on its own seed only.
    alone = run_chains(posterior, [4], settings)
    np.testing.assert_array_equal(out.metric[1], alone.metric[0])
    np.testing.assert_array_equal(out.theta[:, 1], alone.theta[:, 0])


SMALL = dict(hidden_layer_size=3, n_samples=12, n_warmup=60, n_leapfrog=6, n_chains=3)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("sampler", ["hmc", "chees"])
def test_fit_stores_the_metric_and_does_not_depend_on_n_jobs(sampler):
    rng = np.random.RandomState(3)
    X = rng.uniform(-2, 2, size=(40, 2))
    y = np.tanh(X[:, 0]) + 0.1 * rng.normal(size=40)
    params = dict(sampler=sampler, adapt_mass_matrix=True, random_state=7, **SMALL)
    one = HMCNetworkRegressor(n_jobs=1, **params).fit(X, y)
    with parallel_config(backend="threading"):
        two = HMCNetworkRegressor(n_jobs=2, **params).fit(X, y)
    n_params = 2 * 3 + 3 + 3 + 1
    assert one.step_scale_factors_.shape == (3, n_params)
    assert one.parameter_draws_.shape[1] == n_params
    np.testing.assert_array_equal(one.step_scale_factors_, two.step_scale_factors_)
    np.testing.assert_array_equal(one.parameter_draws_, two.parameter_draws_)
    np.testing.assert_array_equal(one.step_size_, two.step_size_)
    # Adapted: the factors differ between weights and chains.
    assert np.ptp(np.log(one.step_scale_factors_)) > 0.5
    # Without the option the metric is Neal's scales alone (factors one),
    # and the draws differ.
    plain = HMCNetworkRegressor(n_jobs=1, sampler=sampler, random_state=7, **SMALL).fit(
        X, y
    )
    np.testing.assert_array_equal(plain.step_scale_factors_, 1.0)
    assert not np.array_equal(plain.parameter_draws_, one.parameter_draws_)
