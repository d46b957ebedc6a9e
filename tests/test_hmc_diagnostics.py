"""Split R-hat and effective sample size against processes of known behaviour."""

import numpy as np
import pytest
from scipy import special, stats

from sklearn_meanfield.hmc._diagnostics import (
    _RANK_BLOCK,
    _ranked,
    effective_sample_size,
    rank_normalize,
    rhat_and_bulk_ess,
    split_chains,
    split_rhat,
)


def ar1(rho, n_chains, n_draws, n_quantities=1, seed=0):
    """Stationary Gaussian AR(1) chains with unit marginal variance."""
    rng = np.random.RandomState(seed)
    x = np.empty((n_chains, n_draws, n_quantities))
    x[:, 0] = rng.normal(size=(n_chains, n_quantities))
    innovation = np.sqrt(1 - rho**2)
    for t in range(1, n_draws):
        x[:, t] = rho * x[:, t - 1] + innovation * rng.normal(
            size=(n_chains, n_quantities)
        )
    return x


def test_iid_draws_have_rhat_one_and_full_ess():
    draws = np.random.RandomState(0).normal(size=(4, 2000, 3))
    assert np.all(np.abs(split_rhat(draws) - 1) < 0.01)
    # The ESS estimate of 8000 iid draws has a sd of a few percent.
    np.testing.assert_allclose(effective_sample_size(draws), 8000, rtol=0.1)


@pytest.mark.parametrize("rho", [0.5, 0.9])
def test_ess_of_ar1_matches_closed_form(rho):
    # For AR(1), tau = (1 + rho) / (1 - rho); the rank transform of a Gaussian
    # process barely changes it.
    draws = ar1(rho, 4, 5000, n_quantities=4)
    expected = 20000 * (1 - rho) / (1 + rho)
    for method in ("bulk", "basic"):
        ess = effective_sample_size(draws, method=method)
        np.testing.assert_allclose(ess, expected, rtol=0.15)


def test_rhat_detects_chains_with_different_locations():
    # Two of the 8 half-chains 2 sd away: the Gaussian-theory value is
    # sqrt(1 + (8/7) (1/4)(3/4) 2^2) = 1.36; ranks compress it a little.
    draws = ar1(0.5, 4, 1000)
    draws[0] += 2.0
    assert split_rhat(draws)[0] > 1.2


def test_rhat_detects_drift_within_a_chain():
    # One chain that drifts: the split halves disagree even though every chain
    # has the same overall mean.
    draws = ar1(0.3, 2, 1000)
    draws[:, :, 0] += np.linspace(-1, 1, 1000)
    assert split_rhat(draws)[0] > 1.1


def test_folded_rhat_detects_different_scales():
    # Same location, one chain 3 times wider: only the folded (tail) part of
    # the rank-normalised R-hat can see it.
    draws = np.random.RandomState(1).normal(size=(4, 1000, 1))
    draws[0] *= 3.0
    assert split_rhat(draws)[0] > 1.05


def test_rank_normalisation_makes_rhat_invariant_to_monotone_maps():
    draws = ar1(0.5, 4, 500, seed=2)
    draws[1] += 0.3
    np.testing.assert_allclose(split_rhat(np.exp(3 * draws)), split_rhat(draws))
    # Heavy tails do not break it: Cauchy chains still get R-hat near 1.
    cauchy = stats.cauchy.rvs(size=(4, 2000, 1), random_state=3)
    assert split_rhat(cauchy)[0] < 1.01


def test_rank_normalize_gives_normal_scores():
    z = rank_normalize(np.random.RandomState(4).exponential(size=(2, 5000, 1)))
    assert abs(z.mean()) < 1e-12
    assert z.std() == pytest.approx(1.0, abs=0.01)


def test_rank_normalize_is_the_normal_score_of_scipys_average_ranks():
    # Eq. 14 of Vehtari et al. (2021) with scipy's ranks, ties (repeated
    # draws of rejected proposals) and a column with a NaN included.
    rng = np.random.RandomState(5)
    draws = rng.normal(size=(3, 40, 4))
    draws[:, ::3, 1] = 0.25
    draws[:, :, 2] = np.round(draws[:, :, 2])
    draws[1, 7, 3] = np.nan
    pooled = draws.reshape(120, 4)
    ranks = stats.rankdata(pooled, axis=0, nan_policy="omit")
    expected = special.ndtri((ranks - 0.375) / (120 + 0.25)).reshape(draws.shape)
    expected[:, :, 3] = np.nan
    np.testing.assert_array_equal(rank_normalize(draws), expected)


def test_constant_draws_do_not_produce_nan():
    draws = np.ones((3, 50, 2))
    draws[:, :, 1] = np.arange(3)[:, None]  # constant but different per chain
    rhat = split_rhat(draws)
    assert rhat[0] == pytest.approx(1.0) and rhat[1] > 1.05
    assert np.all(np.isfinite(effective_sample_size(draws[:, :, :1])))


def pooled_ranks(values):
    """Average ranks (ties sharing their mean rank) down every column, from
    the ranking that :func:`rank_normalize` uses."""
    return _ranked(values, lambda first_plus_last: 0.5 * first_plus_last + 1.0)


def test_pooled_ranks_are_scipys_average_ranks():
    # MCMC draws repeat (rejected proposals) and may round to ties; more
    # columns than one block, and a column with NaN, which is all NaN.
    rng = np.random.default_rng(0)
    values = rng.normal(size=(300, _RANK_BLOCK + 7))
    repeated = rng.integers(1, 300, size=60)
    values[repeated] = values[repeated - 1]
    values[:, :40] = np.round(values[:, :40], 1)
    values[5, 3], values[7:9, 4] = np.nan, np.inf
    expected = stats.rankdata(values, axis=0)
    np.testing.assert_array_equal(pooled_ranks(values), expected)
    assert np.isnan(expected[:, 3]).all()
    # One row, one column.
    np.testing.assert_array_equal(
        pooled_ranks(values[:1]), np.ones((1, values.shape[1]))
    )
    np.testing.assert_array_equal(
        pooled_ranks(values[:, 10:11]), stats.rankdata(values[:, 10:11], axis=0)
    )


def _direct_ess(x):
    """ESS of one quantity's (n_chains, n) draws from lag sums, term by term."""
    n_chains, n = x.shape
    centred = x - x.mean(axis=1, keepdims=True)
    acov = np.array(
        [[np.dot(c[: n - t], c[t:]) / n for t in range(n)] for c in centred]
    )
    within = np.mean(acov[:, 0] * n / (n - 1))
    pooled = (n - 1) / n * within + x.mean(axis=1).var(ddof=1)
    if not pooled > 0:
        return float(n_chains * n)
    rho = 1.0 - (within - acov.mean(axis=0)) / pooled
    rho[0] = 1.0
    tau, smallest = -1.0, np.inf
    for t in range(n // 2):
        pair = rho[2 * t] + rho[2 * t + 1]
        if pair < 0:
            break
        smallest = min(smallest, pair)
        tau += 2.0 * smallest
    total = n_chains * n
    return total / max(tau, 1.0 / np.log10(total))


@pytest.mark.parametrize("block_bytes", [None, 1])
def test_ess_of_many_quantities_matches_the_direct_sums(monkeypatch, block_bytes):
    # All quantities at once (in blocks, or one by one) against the lag sums
    # of each: positively and negatively correlated chains, chains of
    # different means, and a constant quantity.
    from sklearn_meanfield.hmc import _diagnostics

    if block_bytes is not None:
        monkeypatch.setattr(_diagnostics, "_ESS_BLOCK_BYTES", block_bytes)
    rng = np.random.RandomState(1)
    draws = np.concatenate(
        [
            ar1(0.8, 3, 61, n_quantities=2),
            ar1(-0.6, 3, 61, n_quantities=2, seed=2),
            rng.normal(size=(3, 61, 2)) + np.arange(3)[:, None, None],
            np.full((3, 61, 1), 2.5),
        ],
        axis=2,
    )
    expected = [_direct_ess(draws[:, :, j]) for j in range(draws.shape[2])]
    ess = effective_sample_size(draws, method="basic")
    np.testing.assert_allclose(ess, expected, rtol=1e-10)
    assert ess[-1] == 3 * 61 and ess[2] > 3 * 61  # constant; antithetic
    scores = rank_normalize(split_chains(draws))
    expected = [_direct_ess(scores[:, :, j]) for j in range(draws.shape[2])]
    np.testing.assert_allclose(effective_sample_size(draws), expected, rtol=1e-10)


def test_rhat_and_bulk_ess_equal_the_separate_diagnostics():
    draws = ar1(0.7, 4, 200, n_quantities=5) + np.arange(4)[:, None, None] * 0.1
    rhat, ess = rhat_and_bulk_ess(draws)
    np.testing.assert_array_equal(rhat, split_rhat(draws))
    np.testing.assert_array_equal(ess, effective_sample_size(draws))
