"""PSIS leave-one-out against closed forms and known distributions."""

import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp

from sklearn_meanfield._loo import gpd_fit, gpd_quantile, psis_loo, psis_smooth


@pytest.mark.parametrize("shape", [-0.2, 0.0, 0.3, 0.8])
def test_gpd_quantile_matches_scipy(shape):
    p = np.linspace(0.0, 0.999, 50)
    np.testing.assert_allclose(
        gpd_quantile(p, shape, 1.7),
        stats.genpareto(c=shape, scale=1.7).ppf(p),
        rtol=1e-10,
        atol=1e-12,
    )


@pytest.mark.parametrize("shape", [0.1, 0.5, 0.9])
def test_gpd_fit_recovers_shape_and_scale(shape):
    x = stats.genpareto(c=shape, scale=2.0).rvs(size=20000, random_state=1)
    k, sigma = gpd_fit(x)
    # Monte Carlo sd of the estimate is about (1 + k) / sqrt(n) < 0.014.
    assert k == pytest.approx(shape, abs=0.05)
    assert sigma == pytest.approx(2.0, rel=0.06)


def test_psis_weights_normalised_and_uniform_for_constant_ratios():
    log_weights = np.zeros((400, 3))
    smoothed, k = psis_smooth(log_weights)
    np.testing.assert_allclose(smoothed, -np.log(400))
    assert np.all(np.isinf(k))  # no tail to fit: reported, not smoothed


def test_psis_k_hat_tracks_tail_of_ratios():
    # Ratios whose density has a Pareto tail of index 1/k: PSIS reports ~k.
    rng = np.random.RandomState(0)
    columns = [
        stats.genpareto(c=c).rvs(size=8000, random_state=rng) for c in (0.2, 0.9)
    ]
    _, k = psis_smooth(np.log(np.column_stack(columns)))
    assert k[0] == pytest.approx(0.2, abs=0.15)
    assert k[1] == pytest.approx(0.9, abs=0.15)
    assert k[1] > 0.7


def test_psis_smoothing_reduces_error_of_heavy_tailed_mean():
    # E_q[w] = 1 for exact ratios; PSIS gives a lower-variance self-normalised
    # estimate of E_p[x] than raw importance sampling when the tail is heavy.
    rng = np.random.RandomState(3)
    target_sd, proposal_sd = 1.0, 0.6  # k = 1 - 0.36 ... heavy tail
    errors_raw, errors_psis = [], []
    for _ in range(60):
        x = rng.normal(0, proposal_sd, size=1000)
        lw = stats.norm(0, target_sd).logpdf(x) - stats.norm(0, proposal_sd).logpdf(x)
        raw = np.exp(lw - logsumexp(lw))
        smoothed, _ = psis_smooth(lw)
        errors_raw.append(np.sum(raw * x**2) - target_sd**2)
        errors_psis.append(np.sum(np.exp(smoothed) * x**2) - target_sd**2)
    assert np.sqrt(np.mean(np.square(errors_psis))) < np.sqrt(
        np.mean(np.square(errors_raw))
    )


def _bayes_linear_posterior(X, y, alpha, noise_var):
    precision = alpha * np.eye(X.shape[1]) + X.T @ X / noise_var
    cov = np.linalg.inv(precision)
    mean = cov @ X.T @ y / noise_var
    return mean, cov


def test_psis_loo_equals_closed_form_bayesian_linear_regression():
    rng = np.random.RandomState(0)
    n, d, alpha, noise_var = 40, 3, 1.0, 0.25
    X = rng.normal(size=(n, d))
    y = X @ np.array([1.0, -0.5, 0.25]) + rng.normal(0, np.sqrt(noise_var), n)
    y[7] += 2.5  # one outlier: the hardest point for importance sampling
    mean, cov = _bayes_linear_posterior(X, y, alpha, noise_var)
    draws = rng.multivariate_normal(mean, cov, size=8000)
    f = draws @ X.T  # (n_draws, n)
    loglik = stats.norm(f, np.sqrt(noise_var)).logpdf(y[None, :])
    result = psis_loo(loglik, predictions=f)

    # Reference: the exact posterior without point i, refitted n times.
    loo_density = np.empty(n)
    loo_mean = np.empty(n)
    for i in range(n):
        keep = np.arange(n) != i
        m_i, c_i = _bayes_linear_posterior(X[keep], y[keep], alpha, noise_var)
        loo_mean[i] = X[i] @ m_i
        var = noise_var + X[i] @ c_i @ X[i]
        loo_density[i] = stats.norm(loo_mean[i], np.sqrt(var)).logpdf(y[i])

    # Monte Carlo error of a self-normalised IS estimate with 8000 draws.
    np.testing.assert_allclose(result.log_density, loo_density, atol=0.03)
    np.testing.assert_allclose(result.prediction, loo_mean, atol=0.01)
    assert abs(result.log_density.sum() - loo_density.sum()) < 0.1
    # The full-data fit differs from the LOO one, most at the outlier.
    naive = f.mean(axis=0)
    assert abs(naive[7] - loo_mean[7]) > 10 * abs(result.prediction[7] - loo_mean[7])
    assert np.argmax(result.pareto_k) == 7
    assert np.all(result.pareto_k < 0.7)


def test_psis_r_eff_lengthens_tail():
    # A smaller r_eff means fewer effective draws: the tail must be longer, so
    # more draws change when the ratios have a heavy tail.
    rng = np.random.RandomState(0)
    lw = np.log(stats.genpareto(c=0.4).rvs(size=(2000, 1), random_state=rng))
    lowest = np.argmin(lw[:, 0])
    base = lw[:, 0] - lw[lowest, 0]
    changed = []
    for r_eff in (1.0, 0.1):
        smoothed, _ = psis_smooth(lw, r_eff=r_eff)
        # Normalisation shifts every weight alike; the body keeps its spacing.
        shifted = smoothed[:, 0] - smoothed[lowest, 0]
        changed.append(np.sum(~np.isclose(shifted, base, rtol=0, atol=1e-9)))
    # M = 3 sqrt(2000) = 135 draws against min(400, 3 sqrt(20000)) = 400.
    assert changed[0] <= 135 + 1 and changed[1] > 300


def _smooth_by_full_sort(log_weights, tail_length):
    """PSIS of one column the long way: a stable sort of every draw."""
    lw = log_weights - log_weights.max()
    order = np.argsort(lw, kind="stable")
    cutoff = lw[order[-tail_length - 1]]
    tail = [i for i in order[-tail_length:] if lw[i] > cutoff]
    exceed = np.exp(lw[tail]) - np.exp(cutoff)
    k, sigma = gpd_fit(exceed)
    m = len(tail)
    out = lw.copy()
    out[tail] = np.log(
        gpd_quantile((np.arange(m) + 0.5) / m, k, sigma) + np.exp(cutoff)
    )
    out = np.minimum(out, 0.0)
    return out - logsumexp(out), k


def test_psis_tail_equals_a_stable_sort_of_all_draws():
    # The tail is found by a partition and sorted alone; ties (repeated
    # draws of rejected MCMC proposals) inside the tail and at its cutoff
    # must land where a stable sort of all draws puts them.
    rng = np.random.RandomState(3)
    lw = np.round(rng.standard_t(3, size=(1000, 4)), 1)  # many ties
    lw[::7, 1] = lw[0, 1]
    tail_length = int(np.ceil(3 * np.sqrt(1000)))  # r_eff = 1
    smoothed, k = psis_smooth(lw)
    for j in range(lw.shape[1]):
        expected, expected_k = _smooth_by_full_sort(lw[:, j], tail_length)
        np.testing.assert_allclose(smoothed[:, j], expected, rtol=1e-12, atol=1e-12)
        assert k[j] == pytest.approx(expected_k, rel=1e-12)


def test_psis_input_validation():
    with pytest.raises(ValueError, match="finite"):
        psis_smooth(np.array([[0.0], [np.inf], [1.0]]))
    with pytest.raises(ValueError, match="at least 2 draws"):
        psis_smooth(np.zeros((1, 3)))
    with pytest.raises(ValueError, match="predictions"):
        psis_loo(np.zeros((10, 3)), predictions=np.zeros((10, 4)))
