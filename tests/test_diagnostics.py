"""The public diagnostics module against independent references.

MCMC: R-hat against a plain re-implementation of Vehtari et al. (2021)'s
definitions and against Gaussian theory, ESS against the closed form of AR(1)
chains.  PSIS: k-hat against the known shape of Pareto ratios, weighted means
against a closed-form target mean, leave-one-out densities against the exact
Gaussian predictive.  RBMs: log Z, log p(v) and moments against brute-force
enumeration of every joint state (v, h), written here, for a fitted BetheRBM
and a fitted scikit-learn BernoulliRBM (whose own transform and
score_samples pin down the shared sign and scale conventions), and the Bethe
estimate against the cases where it is exact (no couplings, a tree).
"""

import inspect
import itertools
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from numpydoc.docscrape import ClassDoc, FunctionDoc
from numpydoc.validate import validate
from scipy.optimize import brentq
from scipy.special import expit, logsumexp
from scipy.stats import norm, rankdata
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning, NotFittedError
from sklearn.linear_model import LinearRegression
from sklearn.neural_network import BernoulliRBM

from sklearn_meanfield import BetheRBM, diagnostics
from sklearn_meanfield.bethe import _log_partition
from sklearn_meanfield.bethe._multistate import (
    clamped_log_partition,
    multistate_log_partition,
)
from sklearn_meanfield.diagnostics import (
    MAX_ENUMERATED_UNITS,
    effective_sample_size,
    psis_log_weights,
    psis_loo,
    rbm_bethe_solve,
    rbm_exact_moments,
    rbm_free_energy,
    rbm_gibbs_moments,
    rbm_log_likelihood,
    rbm_log_partition,
    split_rhat,
)

# ---------------------------------------------------------------- MCMC


def _ar1(rho, n_chains, n_draws, n_quantities=1, seed=0):
    """Stationary Gaussian AR(1) chains of unit marginal variance."""
    rng = np.random.RandomState(seed)
    noise = rng.normal(size=(n_chains, n_draws, n_quantities))
    x = np.empty_like(noise)
    x[:, 0] = noise[:, 0]
    scale = np.sqrt(1.0 - rho**2)
    for t in range(1, n_draws):
        x[:, t] = rho * x[:, t - 1] + scale * noise[:, t]
    return x


def _reference_rhat(chains):
    """Vehtari et al. (2021) R-hat of one quantity, (n_chains, n_draws), by the
    paper's definitions written out plainly: split, rank-normalise, classic
    R-hat; the same on folded draws; the larger."""
    half = chains.shape[1] // 2
    split = [c[:half] for c in chains] + [c[chains.shape[1] - half :] for c in chains]
    split = np.array(split)

    def rank_normal(x):
        r = rankdata(x.ravel()).reshape(x.shape)
        return norm.ppf((r - 3 / 8) / (x.size - 2 * 3 / 8 + 1))

    def classic(x):
        m, n = x.shape
        w = np.mean([np.var(c, ddof=1) for c in x])
        b = n / (m - 1) * np.sum((x.mean(axis=1) - x.mean()) ** 2)
        return np.sqrt(((n - 1) / n * w + b / n) / w)

    bulk = classic(rank_normal(split))
    tail = classic(rank_normal(np.abs(split - np.median(split))))
    return max(bulk, tail)


def test_iid_draws_rhat_one_ess_full():
    draws = np.random.RandomState(1).normal(size=(4, 1500, 3))
    rhat = split_rhat(draws)
    assert rhat.shape == (3,)
    np.testing.assert_allclose(rhat, 1.0, atol=0.01)
    for method in ("bulk", "basic"):
        np.testing.assert_allclose(
            effective_sample_size(draws, method=method), 6000, rtol=0.1
        )


def test_rhat_equals_the_papers_definition():
    # Heavy-tailed draws (Cauchy) with one chain shifted: defined thanks to
    # the ranks, and equal to the plain re-implementation.
    rng = np.random.RandomState(2)
    draws = rng.standard_cauchy(size=(3, 401))
    draws[1] += 1.5
    assert split_rhat(draws) == pytest.approx(_reference_rhat(draws), rel=1e-12)
    draws = _ar1(0.6, 4, 300)[:, :, 0]
    draws[0] *= 3.0  # a chain with a wider spread: the tail R-hat sees it
    assert split_rhat(draws) == pytest.approx(_reference_rhat(draws), rel=1e-12)


def _rank_normal_rhat_of_shifted_chain(shift, n_half=2000):
    """Large-sample R-hat of 4 unit-Gaussian chains, chain 0 shifted, by
    quadrature: rank-normalising maps a draw x to Phi^-1(F(x)), F the
    mixture's CDF 3/4 Phi(x) + 1/4 Phi(x - shift); folding maps it to
    Phi^-1(G(|x - median|)), G the CDF of the folded mixture.  The 8 half
    chains are 6 unshifted and 2 shifted ones."""
    x = np.linspace(-12.0, 12.0 + shift, 200001)
    dx = x[1] - x[0]

    def mixture_cdf(t):
        return 0.75 * norm.cdf(t) + 0.25 * norm.cdf(t - shift)

    median = brentq(lambda t: mixture_cdf(t) - 0.5, -10.0, 10.0 + shift)
    folded = np.abs(x - median)
    values = []
    for score in (
        norm.ppf(mixture_cdf(x)),
        norm.ppf(mixture_cdf(median + folded) - mixture_cdf(median - folded)),
    ):
        score = np.clip(score, -40, 40)
        means, variances = [], []
        for location in (0.0, shift):
            p = norm.pdf(x - location) * dx
            means.append(p @ score)
            variances.append(p @ (score - means[-1]) ** 2)
        within = (6 * variances[0] + 2 * variances[1]) / 8
        between = (8 / 7) * (6 / 8) * (2 / 8) * (means[1] - means[0]) ** 2
        pooled = (n_half - 1) / n_half * within + between
        values.append(np.sqrt(pooled / within))
    return max(values)


@pytest.mark.parametrize("shift", [0.5, 1.0, 3.0])
def test_rhat_of_shifted_chains_matches_theory(shift):
    # Theory by quadrature: 1.026, 1.101 and 1.473 (Gaussian scores without
    # the rank transform would give sqrt(1 + 0.214 shift^2) = 1.03, 1.10,
    # 1.71: the ranks compress large shifts).
    draws = np.random.RandomState(3).normal(size=(4, 4000))
    draws[0] += shift
    rhat = split_rhat(draws)
    assert rhat == pytest.approx(_rank_normal_rhat_of_shifted_chain(shift), rel=0.01)
    assert rhat > 1.01  # flagged at Vehtari et al.'s threshold


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_ess_of_ar1_matches_closed_form(rho):
    draws = _ar1(rho, 4, 4000, n_quantities=3, seed=4)
    expected = draws.shape[0] * draws.shape[1] * (1 - rho) / (1 + rho)
    for method in ("bulk", "basic"):
        np.testing.assert_allclose(
            effective_sample_size(draws, method=method), expected, rtol=0.15
        )


def test_trailing_axes_and_two_dimensional_draws():
    draws = _ar1(0.3, 2, 200, n_quantities=6, seed=5)
    as_grid = draws.reshape(2, 200, 2, 3)
    np.testing.assert_array_equal(split_rhat(as_grid), split_rhat(draws).reshape(2, 3))
    np.testing.assert_array_equal(
        effective_sample_size(as_grid), effective_sample_size(draws).reshape(2, 3)
    )
    single = split_rhat(draws[:, :, 0])
    assert isinstance(single, float) and single == split_rhat(draws)[0]
    ess = effective_sample_size(draws[:, :, 0], method="basic")
    assert isinstance(ess, float)
    assert ess == effective_sample_size(draws, method="basic")[0]


def test_no_quantities():
    draws = np.zeros((2, 10, 0, 3))
    assert split_rhat(draws).shape == (0, 3)
    assert effective_sample_size(draws).shape == (0, 3)


def test_constant_quantities():
    same = np.ones((3, 10))
    assert split_rhat(same) == 1.0
    apart = np.repeat(np.arange(3.0)[:, None], 10, axis=1)
    assert split_rhat(apart) == np.inf


@pytest.mark.parametrize(
    "draws, match",
    [
        (np.zeros(10), "shape"),
        (np.zeros((2, 3)), "at least 4 draws"),
        (np.zeros((0, 10)), "at least 1 chain"),
        (np.array([[0.0, 1.0, np.nan, 2.0]]), "finite"),
    ],
)
def test_bad_draws_are_refused(draws, match):
    with pytest.raises(ValueError, match=match):
        split_rhat(draws)
    with pytest.raises(ValueError, match=match):
        effective_sample_size(draws)


def test_bad_ess_method():
    with pytest.raises(ValueError, match="'bulk' or 'basic'"):
        effective_sample_size(np.zeros((2, 10)), method="tail")


# ---------------------------------------------------------------- PSIS


def test_pareto_k_light_and_heavy_tails():
    rng = np.random.RandomState(6)
    n = 4000
    light = rng.normal(scale=0.3, size=n)
    # Ratios U^(-k) are generalised Pareto (sigma = k, shifted by 1) with
    # shape k: the tail the estimate should recover.
    heavy_k = 0.9
    heavy = -heavy_k * np.log(rng.uniform(size=n))
    log_w, k = psis_log_weights(np.column_stack([light, heavy]))
    assert log_w.shape == (n, 2) and k.shape == (2,)
    np.testing.assert_allclose(np.exp(log_w).sum(axis=0), 1.0, rtol=1e-12)
    assert k[0] < 0.5
    assert k[1] > 0.7
    assert k[1] == pytest.approx(heavy_k, abs=0.15)


def test_psis_weights_estimate_the_target_mean():
    # Proposal N(0, 1), target N(0.4, 1): log ratio 0.4 x - 0.08, E_p[x] = 0.4.
    x = np.random.RandomState(7).normal(size=20000)
    log_w, k = psis_log_weights(0.4 * x - 0.08)
    assert isinstance(k, float) and k < 0.5
    assert np.exp(log_w) @ x == pytest.approx(0.4, abs=0.03)


def test_psis_loo_matches_exact_gaussian_predictive():
    # Posterior of a Gaussian mean (unit noise, flat prior) given n points:
    # the exact leave-one-out predictive of y_i is N(mean of the others,
    # 1 + 1 / (n - 1)).
    rng = np.random.RandomState(8)
    n = 12
    y = rng.normal(size=n)
    mu = rng.normal(y.mean(), np.sqrt(1 / n), size=40000)
    loglik = norm.logpdf(y[None, :] - mu[:, None])
    result = psis_loo(loglik, predictions=np.repeat(mu[:, None], n, axis=1))
    others = (y.sum() - y) / (n - 1)
    exact = norm.logpdf(y, others, np.sqrt(1 + 1 / (n - 1)))
    np.testing.assert_allclose(result.log_density, exact, atol=0.01)
    # The leave-one-out posterior mean of mu is the mean of the others.
    np.testing.assert_allclose(result.prediction, others, atol=0.01)
    assert np.all(result.pareto_k < 0.5)


@pytest.mark.parametrize(
    "r_eff, match",
    [(np.ones(3), "shape"), (0.0, "positive"), (np.inf, "finite")],
)
def test_bad_r_eff(r_eff, match):
    log_ratios = np.random.RandomState(0).normal(size=(100, 2))
    with pytest.raises(ValueError, match=match):
        psis_log_weights(log_ratios, r_eff=r_eff)
    with pytest.raises(ValueError, match=match):
        psis_loo(log_ratios, r_eff=r_eff)


def test_bad_log_ratios():
    with pytest.raises(ValueError, match="shape"):
        psis_log_weights(np.zeros((10, 2, 2)))
    with pytest.raises(ValueError, match="finite"):
        psis_log_weights(np.array([0.0, np.inf, 1.0]))
    with pytest.raises(ValueError, match="shape"):
        psis_loo(np.zeros(10))


# ---------------------------------------------------------------- RBMs


def _all_states(n):
    return np.array(list(itertools.product([0.0, 1.0], repeat=n)))


def _brute_force(weights, visible_bias, hidden_bias):
    """log Z, log p(v) of every visible state, and the moments, by summing
    exp(-E(v, h)) over every joint state with E = -b.v - c.h - h.W.v."""
    V = _all_states(weights.shape[1])
    H = _all_states(weights.shape[0])
    neg_energy = (
        (V @ visible_bias)[:, None]
        + (H @ hidden_bias)[None, :]
        + np.einsum("ha,ab,vb->vh", H, weights, V)
    )
    log_z = logsumexp(neg_energy)
    p = np.exp(neg_energy - log_z)  # (n_v_states, n_h_states)
    log_pv = logsumexp(neg_energy, axis=1) - log_z
    return {
        "V": V,
        "log_z": log_z,
        "log_pv": log_pv,
        "mean_visible": p.sum(axis=1) @ V,
        "mean_hidden": p.sum(axis=0) @ H,
        "mean_hidden_visible": H.T @ p.T @ V,
    }


def _tiny_data():
    rng = np.random.RandomState(9)
    prototypes = np.array([[1, 1, 0, 0, 1], [0, 0, 1, 1, 0]], dtype=float)
    X = prototypes[rng.randint(2, size=40)]
    flips = rng.uniform(size=X.shape) < 0.1
    return np.abs(X - flips)


def _fitted(kind):
    X = _tiny_data()
    params = dict(n_components=3, learning_rate=0.1, n_iter=20, random_state=0)
    model = (BetheRBM if kind == "bethe" else BernoulliRBM)(**params).fit(X)
    return model, X


def _params(model):
    return model.components_, model.intercept_visible_, model.intercept_hidden_


@pytest.mark.parametrize("kind", ["bethe", "bernoulli"])
def test_exact_log_partition_and_likelihood_of_fitted_rbms(kind):
    model, X = _fitted(kind)
    # Training moved the weights well away from zero.
    assert np.abs(model.components_).max() > 0.3
    reference = _brute_force(*_params(model))
    assert rbm_log_partition(model) == pytest.approx(reference["log_z"], rel=1e-12)
    # F(v) = -log sum_h exp(-E(v, h)) = -(log p(v) + log Z).
    np.testing.assert_allclose(
        rbm_free_energy(model, reference["V"]),
        -(reference["log_pv"] + reference["log_z"]),
        rtol=1e-12,
    )
    log_lik = rbm_log_likelihood(model, reference["V"])
    np.testing.assert_allclose(log_lik, reference["log_pv"], rtol=1e-12, atol=1e-12)
    # The tuple form gives the same numbers.
    np.testing.assert_array_equal(
        rbm_log_likelihood(_params(model), reference["V"]), log_lik
    )
    # Per sample, in the order of the rows; sparse input gives the same.
    rows = rbm_log_likelihood(model, X)
    index = (X @ (2 ** np.arange(X.shape[1])[::-1])).astype(int)
    np.testing.assert_allclose(rows, reference["log_pv"][index], rtol=1e-12)
    np.testing.assert_allclose(
        rbm_log_likelihood(model, sp.csr_matrix(X)), rows, rtol=1e-12
    )


@pytest.mark.parametrize("kind", ["bethe", "bernoulli"])
def test_conventions_are_the_estimators_own(kind):
    # Our E = -b.v - c.h - h.W.v, enumerated above, is the model each
    # estimator computes with: p(h = 1 | v) from the enumeration equals its
    # transform, and its score_samples agrees with our log p(v).
    model, X = _fitted(kind)
    W, b, c = _params(model)
    ref = _brute_force(W, b, c)
    V, H = ref["V"], _all_states(W.shape[0])
    neg_energy = (
        (V @ b)[:, None] + (H @ c)[None, :] + np.einsum("ha,ab,vb->vh", H, W, V)
    )
    p_h_given_v = np.exp(neg_energy - logsumexp(neg_energy, axis=1, keepdims=True))
    np.testing.assert_allclose(model.transform(V), p_h_given_v @ H, rtol=1e-6)
    log_pv = rbm_log_likelihood(model, V)
    if kind == "bethe":
        # log p(v) with the Bethe log Z: differs from ours by log Z only.
        bethe = model.score_samples(V) + model.log_partition_function()
        np.testing.assert_allclose(bethe, log_pv + ref["log_z"], rtol=1e-10)
    else:
        # BernoulliRBM's pseudo-likelihood: n_features log p(v_i | v_-i) for
        # one random unit i per sample; it must be one of the n_features
        # values our log p(v) gives.
        n = V.shape[1]
        index = (V @ (2 ** np.arange(n)[::-1])).astype(int)
        candidates = np.empty((len(V), n))
        for i in range(n):
            flipped = index ^ (1 << (n - 1 - i))
            candidates[:, i] = n * (log_pv - np.logaddexp(log_pv, log_pv[flipped]))
        pseudo = model.score_samples(V)
        gaps = np.min(np.abs(candidates - pseudo[:, None]), axis=1)
        np.testing.assert_array_less(gaps, 1e-8)


def test_bethe_is_exact_without_couplings():
    rng = np.random.RandomState(10)
    b, c = rng.normal(size=6), rng.normal(size=4)
    params = (np.zeros((4, 6)), b, c)
    independent = np.logaddexp(0, b).sum() + np.logaddexp(0, c).sum()
    for form in ("bipartite", "gaussian", "relaxed"):
        value = rbm_log_partition(params, method="bethe", bethe_form=form)
        assert value == pytest.approx(independent, rel=1e-12)
    assert rbm_log_partition(params) == pytest.approx(independent, rel=1e-12)
    result = rbm_bethe_solve(params)
    np.testing.assert_allclose(result.mean_visible, expit(b), rtol=1e-12)
    np.testing.assert_allclose(result.mean_hidden, expit(c), rtol=1e-12)


def test_bethe_is_exact_on_a_tree():
    # One hidden unit: the factor graph is a star (a tree).
    rng = np.random.RandomState(11)
    params = (rng.normal(0, 1.5, (1, 6)), rng.normal(size=6), rng.normal(size=1))
    ref = _brute_force(*params)
    result = rbm_bethe_solve(params, tol=1e-12)
    assert result.converged and result.stability < 1
    assert result.log_z == pytest.approx(ref["log_z"], abs=1e-9)
    for name in ("mean_visible", "mean_hidden", "mean_hidden_visible"):
        np.testing.assert_allclose(getattr(result, name), ref[name], atol=1e-9)


@pytest.mark.parametrize("form", ["bipartite", "gaussian", "relaxed"])
def test_bethe_close_at_weak_coupling(form):
    # Loops, weak couplings: the Bethe error is of order W^4 per loop.
    rng = np.random.RandomState(12)
    params = (rng.normal(0, 0.2, (4, 6)), rng.normal(size=6), rng.normal(size=4))
    exact = _brute_force(*params)["log_z"]
    bethe = rbm_log_partition(params, method="bethe", bethe_form=form)
    assert bethe == pytest.approx(exact, abs=1e-3)
    assert bethe != pytest.approx(exact, abs=1e-12)  # an approximation


def test_bethe_of_a_fitted_betherbm_is_its_own_estimate():
    # method="bethe" is the bipartite message passing, which a BetheRBM
    # fitted with method="bipartite" and log_partition="single" runs too
    # (warm-started).
    X = _tiny_data()
    model = BetheRBM(
        n_components=3,
        learning_rate=0.1,
        n_iter=20,
        random_state=0,
        method="bipartite",
        log_partition="single",
    ).fit(X)
    assert rbm_log_partition(model, method="bethe") == pytest.approx(
        model.log_partition_function(), abs=1e-6
    )
    np.testing.assert_allclose(
        rbm_log_likelihood(model, X, method="bethe"),
        model.score_samples(X),
        atol=1e-6,
    )


def test_relaxed_form_of_a_fitted_relaxed_betherbm_is_its_own_estimate():
    # bethe_form="relaxed" solves the TAP equations from cold means; a model
    # trained with method="relaxed" on weakly coupled data sits at the same
    # (unique) fixed point, warm-started.
    X = _tiny_data()
    model = BetheRBM(
        n_components=3,
        learning_rate=0.1,
        n_iter=20,
        random_state=0,
        method="relaxed",
        log_partition="single",
    ).fit(X)
    result = rbm_bethe_solve(model, bethe_form="relaxed", tol=1e-10)
    assert result.converged
    assert result.log_z == pytest.approx(model.log_partition_function(), abs=1e-6)
    assert result.stability == pytest.approx(model.stability_, rel=1e-3)
    np.testing.assert_allclose(
        rbm_log_likelihood(model, X, method="bethe", bethe_form="relaxed"),
        model.score_samples(X),
        atol=1e-6,
    )


@pytest.mark.parametrize("kind", ["bethe", "bernoulli"])
def test_ais_close_to_enumeration(kind):
    # Annealed importance sampling from the training data's base rates: a
    # stochastic estimate, within a few hundredths of a nat at 1000
    # temperatures on this tiny model, reproducible for a given random_state.
    model, X = _fitted(kind)
    ref = _brute_force(*_params(model))
    settings = dict(base_rates=X, n_temperatures=1000, random_state=0)
    ais = rbm_log_partition(model, method="ais", **settings)
    assert ais == pytest.approx(ref["log_z"], abs=0.05)
    assert ais != ref["log_z"]
    log_lik = rbm_log_likelihood(model, ref["V"], method="ais", **settings)
    # The same log Z for every row: log p(v) shifted by exact - AIS log Z.
    np.testing.assert_allclose(
        log_lik, ref["log_pv"] + ref["log_z"] - ais, rtol=1e-12, atol=1e-12
    )


def test_ais_standard_error_is_returned_and_measures_the_spread():
    # return_std=True gives the AIS standard error next to the same log Z.
    # Reference: the spread of log Z over 40 independent runs (few
    # temperatures, so the error is large enough to measure), and the exact
    # log Z within a few standard errors.
    model, X = _fitted("bernoulli")
    exact = _brute_force(*_params(model))["log_z"]
    settings = dict(base_rates=X, n_chains=50, n_temperatures=5)
    runs = [
        rbm_log_partition(
            model, method="ais", random_state=seed, return_std=True, **settings
        )
        for seed in range(40)
    ]
    log_z, std_error = np.array(runs).T
    assert log_z[0] == rbm_log_partition(
        model, method="ais", random_state=0, **settings
    )
    assert np.all(std_error > 0.005)
    # The standard deviation of 40 runs has a relative error of ~11%.
    assert np.std(log_z, ddof=1) == pytest.approx(np.mean(std_error), rel=0.35)
    assert abs(np.mean(log_z) - exact) < 4 * np.mean(std_error) / np.sqrt(40) + 0.01
    # The log-likelihood carries the same standard error.
    log_lik, se = rbm_log_likelihood(
        model, X, method="ais", random_state=0, return_std=True, **settings
    )
    assert se == std_error[0]
    np.testing.assert_allclose(
        log_lik, -rbm_free_energy(model, X) - log_z[0], rtol=1e-12
    )


def test_return_std_of_the_deterministic_methods():
    model, X = _fitted("bethe")
    exact = rbm_log_partition(model)
    assert rbm_log_partition(model, return_std=True) == (exact, 0.0)
    log_lik, se = rbm_log_likelihood(model, X, return_std=True)
    assert se == 0.0
    np.testing.assert_array_equal(log_lik, rbm_log_likelihood(model, X))
    for method in ("bethe", "bethe-multi"):
        value, se = rbm_log_partition(
            model, method=method, random_state=0, return_std=True
        )
        assert value == rbm_log_partition(model, method=method, random_state=0)
        assert np.isnan(se)


def test_bethe_multi_sums_the_modes_of_a_bimodal_model():
    # Two hidden units, each switching on one of two opposite patterns: one
    # Bethe solution (cold messages) sits at the symmetric saddle, 0.69 nat
    # low; the model's own samples seed both modes, whose loop-corrected sum
    # is 0.23 nat high (the modes overlap a little).
    pattern = np.array([1.0] * 4 + [-1.0] * 4)
    params = (3.0 * np.vstack([pattern, -pattern]), np.zeros(8), -6.0 * np.ones(2))
    exact = _brute_force(*params)["log_z"]
    single = rbm_log_partition(params, method="bethe")
    multi = rbm_log_partition(params, method="bethe-multi", n_clamped=0, random_state=0)
    assert single == pytest.approx(exact - 0.693, abs=0.01)
    assert multi == pytest.approx(exact + 0.230, abs=0.01)
    # Seeds given as data: the same fixed points as the core finds from them.
    seeds = (np.vstack([pattern, -pattern]) + 1) / 2
    core = multistate_log_partition(*params, seeds).log_z
    assert (
        rbm_log_partition(params, method="bethe-multi", seeds=seeds, n_clamped=0)
        == core
    )
    assert rbm_log_partition(
        params, method="bethe-multi", seeds=sp.csr_matrix(seeds), n_clamped=0
    ) == pytest.approx(multi, abs=1e-9)
    # More rows than n_starts: n_starts of them are drawn.
    many = np.repeat(seeds, 10, axis=0)
    assert rbm_log_partition(
        params,
        method="bethe-multi",
        seeds=many,
        n_starts=4,
        n_clamped=0,
        random_state=1,
    ) == pytest.approx(multi, abs=1e-9)
    log_lik = rbm_log_likelihood(
        params, _all_states(8), method="bethe-multi", n_clamped=0, random_state=0
    )
    np.testing.assert_allclose(
        log_lik, _brute_force(*params)["log_pv"] + exact - multi, rtol=1e-10
    )
    # The default clamps up to 3 hidden units: here both, which is exact.
    assert rbm_log_partition(
        params, method="bethe-multi", random_state=0
    ) == pytest.approx(exact, abs=1e-10)
    # One clamped unit: each half is one mode, the overlap is gone.
    one = rbm_log_partition(params, method="bethe-multi", n_clamped=1, random_state=0)
    assert abs(one - exact) < 0.05


def test_bethe_multi_falls_back_when_nothing_converges(monkeypatch):
    # Message passing converges on every model tried (damping 0.5, 2000
    # sweeps, random weights of sd up to 8), so the core's failure is
    # simulated: the single Bethe estimate is returned, with a warning.
    def no_start_converges(*args, **kwargs):
        raise RuntimeError("None of the starts converged")

    monkeypatch.setattr(_log_partition, "clamped_log_partition", no_start_converges)
    rng = np.random.RandomState(6)
    params = (rng.normal(0, 1.0, (4, 6)), rng.normal(size=6), rng.normal(size=4))
    with pytest.warns(ConvergenceWarning, match="falls back"):
        value = rbm_log_partition(params, method="bethe-multi", random_state=0)
    assert value == rbm_log_partition(params, method="bethe")


def test_moments_against_enumeration():
    model, _ = _fitted("bernoulli")
    ref = _brute_force(*_params(model))
    exact = rbm_exact_moments(model)
    gibbs = rbm_gibbs_moments(
        model, n_chains=100, n_burn_in=50, n_samples=400, random_state=0
    )
    for name in ("mean_visible", "mean_hidden", "mean_hidden_visible"):
        np.testing.assert_allclose(getattr(exact, name), ref[name], atol=1e-12)
        # 40000 correlated draws: Monte Carlo error about 0.005.
        np.testing.assert_allclose(getattr(gibbs, name), ref[name], atol=0.03)
    again = rbm_gibbs_moments(
        model, n_chains=100, n_burn_in=50, n_samples=400, random_state=0
    )
    np.testing.assert_array_equal(again.mean_hidden_visible, gibbs.mean_hidden_visible)


def test_exact_refuses_large_models_and_names_the_alternative():
    n = MAX_ENUMERATED_UNITS + 1
    params = (np.zeros((n, n)), np.zeros(n), np.zeros(n))
    for call in (
        lambda: rbm_log_partition(params),
        lambda: rbm_log_likelihood(params, np.zeros((1, n))),
        lambda: rbm_exact_moments(params),
    ):
        with pytest.raises(ValueError, match="method='bethe'"):
            call()
    # The smaller layer is what counts: many visible units, 3 hidden.
    wide = (np.zeros((3, 200)), np.zeros(200), np.zeros(3))
    assert rbm_log_partition(wide) == pytest.approx(203 * np.log(2))
    # The Bethe estimate has no size limit (and is exact here).
    assert rbm_log_partition(params, method="bethe") == pytest.approx(2 * n * np.log(2))


def test_bethe_warns_when_not_converged():
    rng = np.random.RandomState(13)
    params = (rng.normal(0, 1, (4, 6)), rng.normal(size=6), rng.normal(size=4))
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        result = rbm_bethe_solve(params, max_sweeps=1)
    assert not result.converged and result.n_sweeps == 1


def test_rbm_argument_validation():
    with pytest.raises(NotFittedError):
        rbm_log_partition(BetheRBM())
    with pytest.raises(NotFittedError):
        rbm_log_partition(BernoulliRBM())
    with pytest.raises(TypeError, match="BetheRBM or BernoulliRBM"):
        rbm_log_partition(np.zeros((2, 3)))
    # A fitted estimator that is not an RBM is named as such.
    not_an_rbm = LinearRegression().fit(np.eye(3), np.arange(3.0))
    with pytest.raises(TypeError, match="got LinearRegression"):
        rbm_log_partition(not_an_rbm)
    with pytest.raises(ValueError, match="shape"):
        rbm_log_partition((np.zeros((2, 3)), np.zeros(2), np.zeros(2)))
    with pytest.raises(ValueError, match="shape"):
        rbm_log_partition((np.zeros(3), np.zeros(3), np.zeros(1)))
    with pytest.raises(ValueError, match="finite"):
        rbm_log_partition((np.full((1, 2), np.nan), np.zeros(2), np.zeros(1)))
    params = (np.zeros((2, 3)), np.zeros(3), np.zeros(2))
    with pytest.raises(ValueError, match="method must be"):
        rbm_log_partition(params, method="sampling")
    with pytest.raises(ValueError, match="method must be"):
        rbm_log_likelihood(params, np.zeros((1, 3)), method="sampling")
    with pytest.raises(ValueError, match="bethe_form"):
        rbm_log_partition(params, method="bethe", bethe_form="loopy")
    with pytest.raises(ValueError, match="3 visible units"):
        rbm_log_likelihood(params, np.zeros((1, 4)))
    with pytest.raises(ValueError, match="3 visible units"):
        rbm_free_energy(params, np.zeros((1, 4)))
    with pytest.raises(ValueError, match="3 visible units"):
        rbm_log_partition(params, method="ais", base_rates=np.zeros((2, 4)))
    with pytest.raises(ValueError, match="3 visible units"):
        rbm_log_partition(params, method="bethe-multi", seeds=np.zeros((2, 4)))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        rbm_log_partition(params, method="bethe-multi", seeds=np.full((2, 3), 2.0))
    with pytest.raises(ValueError, match="n_starts"):
        rbm_log_partition(params, method="bethe-multi", n_starts=0)
    with pytest.raises(ValueError, match="n_clamped"):
        rbm_log_partition(params, method="bethe-multi", n_clamped=-1)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        rbm_log_likelihood(params, np.full((1, 3), 2.0))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        rbm_log_likelihood(params, sp.csr_matrix(-np.ones((1, 3))))
    with pytest.raises(ValueError, match="damping"):
        rbm_bethe_solve(params, damping=1.0)
    with pytest.raises(ValueError, match="tol"):
        rbm_bethe_solve(params, tol=0)
    with pytest.raises(ValueError, match="max_sweeps"):
        rbm_bethe_solve(params, max_sweeps=0)
    with pytest.raises(ValueError, match="n_chains"):
        rbm_gibbs_moments(params, n_chains=0)
    with pytest.raises(ValueError, match="n_burn_in"):
        rbm_gibbs_moments(params, n_burn_in=-1)


# ---------------------------------------------------------------- docstrings


def _public():
    return [
        name
        for name in diagnostics.__all__
        if inspect.isclass(getattr(diagnostics, name))
        or inspect.isfunction(getattr(diagnostics, name))
    ]


@pytest.mark.parametrize("name", _public())
def test_public_docstrings(name):
    # The checks of test_docstrings.py, for this public module: no missing
    # summary, parameter, Returns or Examples; References everywhere.
    obj = getattr(diagnostics, name)
    codes = {"GL08", "SS01", "SS03", "PR01", "PR02", "EX01"}
    if inspect.isfunction(obj):
        codes |= {"RT01"}
    errors = validate(f"sklearn_meanfield.diagnostics.{name}")["errors"]
    assert not [e for e in errors if e[0] in codes]
    doc = ClassDoc(obj) if inspect.isclass(obj) else FunctionDoc(obj)
    assert any(line.lstrip().startswith(">>>") for line in doc["Examples"])
    if inspect.isfunction(obj):
        assert doc["References"], f"{name}: no References section"


def test_bethe_multi_relaxed_form_is_the_relaxed_clamped_estimate():
    # bethe_form="relaxed" runs the TAP multi-state sum (the estimate behind
    # BetheRBM's log_partition="auto"); on a trained 14-unit model it is
    # within 0.35 nat of enumeration, and an unknown form is refused.
    X = (load_digits().data[:1400] > 7).astype(float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = BernoulliRBM(n_components=14, random_state=1, n_iter=10).fit(X)
    params = _params(model)
    seeds = X[::70]  # 20 rows, fewer than n_starts: all used, no draw
    relaxed = rbm_log_partition(
        model, method="bethe-multi", bethe_form="relaxed", seeds=seeds
    )
    expected, _ = clamped_log_partition(*params, seeds, 3, form="relaxed")
    assert relaxed == expected
    assert abs(relaxed - rbm_log_partition(model)) < 0.35
    with pytest.raises(ValueError, match="bethe_form"):
        rbm_log_partition(model, method="bethe-multi", bethe_form="tree")
