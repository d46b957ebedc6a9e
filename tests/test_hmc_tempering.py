"""Replica exchange of the network sampler: the exchange move and its effect."""

import numpy as np
import pytest
from hmc_targets import script_rhat, small_network_posterior
from scipy import stats

from sklearn_meanfield import HMCNetworkRegressor
from sklearn_meanfield.hmc._chains import ChainSettings, run_chains
from sklearn_meanfield.hmc._network import (
    HyperPrior,
    NetworkLayout,
    augment,
    log_likelihood,
    network_outputs,
)
from sklearn_meanfield.hmc._tempering import (
    exchange_accepted,
    exchange_states,
    temperature_ladder,
)
from sklearn_meanfield.hmc._transition import ChainState, NetworkPosterior


def test_ladder_is_geometric_from_one():
    ladder = temperature_ladder(5, 0.01)
    assert ladder[0] == 1.0
    assert ladder[-1] == pytest.approx(0.01)
    np.testing.assert_allclose(ladder[1:] / ladder[:-1], 0.01**0.25)
    assert temperature_ladder(1, 0.3).tolist() == [1.0]


@pytest.mark.parametrize("weighted", [False, True])
def test_log_likelihood_is_the_gaussian_density_of_the_rows(weighted):
    # Against scipy's normal log density of every row and output, each row
    # counted with its weight, the noise sd 1 / sqrt(precision).
    posterior = small_network_posterior(30)
    rng = np.random.default_rng(3)
    layout = NetworkLayout(posterior.layout.n_features, 3, 2)
    Y = rng.normal(size=(30, 2))
    weights = rng.integers(0, 4, size=30).astype(float) if weighted else None
    theta = rng.normal(size=(4, layout.n_params))
    noise = rng.gamma(2.0, 1.0, size=(4, 2))
    outputs = network_outputs(theta, posterior.X, layout)
    density = stats.norm.logpdf(
        Y[None], loc=outputs, scale=1 / np.sqrt(noise)[:, None, :]
    ).sum(axis=2)
    expected = density @ (np.ones(30) if weights is None else weights)
    value = log_likelihood(theta, noise, augment(posterior.X), Y, layout, weights)
    np.testing.assert_allclose(value, expected, rtol=1e-12)


def _gaussian_replicas(betas, n_chains, rng):
    """Exact draws of the tempered posteriors of a conjugate toy: prior
    N(0, 1), likelihood exp(-(x - m)^2 / (2 s^2)) raised to beta."""
    m, s2 = 2.0, 0.25
    precision = 1.0 + betas / s2
    mean = betas * m / s2 / precision
    x = mean[:, None] + rng.standard_normal((len(betas), n_chains)) / np.sqrt(
        precision[:, None]
    )

    def log_lik(values):
        return -0.5 * (values - m) ** 2 / s2

    return x, mean, 1 / precision, log_lik


def _states(x):
    # The other exchanged fields carry functions of x, to check that they
    # travel with it.
    return [
        ChainState(
            theta=row[:, None].copy(),
            log_prob=None,
            grad=None,
            momentum=None,
            noise_precision=2 * row[:, None],
            group_precision=np.stack([row, -row], axis=1),
            scales=None,
        )
        for row in x
    ]


@pytest.mark.parametrize("parity", [0, 1])
def test_exchange_leaves_every_tempered_posterior_invariant(parity):
    # Replicas drawn exactly from their tempered posteriors still follow them
    # after one round of exchanges (means and variances within 5 standard
    # errors over 200,000 chains), and the acceptance of each proposing pair
    # is E[min(1, exp((b_k - b_k+1)(l_k+1 - l_k)))] by quadrature over the
    # two exact marginals.
    betas = np.array([1.0, 0.5, 0.2, 0.05])
    n_chains = 200_000
    rng = np.random.default_rng(10 + parity)
    x, mean, variance, log_lik = _gaussian_replicas(betas, n_chains, rng)
    log_uniform = np.log(rng.uniform(size=(len(betas) - 1, n_chains)))
    accepted = exchange_accepted(log_lik(x), betas, log_uniform, parity)
    assert not accepted[np.arange(3) % 2 != parity].any()
    states, changed = exchange_states(_states(x), accepted)
    for k, state in enumerate(states):
        values = state.theta[:, 0]
        assert abs(values.mean() - mean[k]) < 5 * np.sqrt(variance[k] / n_chains)
        sd_of_variance = variance[k] * np.sqrt(2 / n_chains)
        assert abs(values.var() - variance[k]) < 5 * sd_of_variance
        np.testing.assert_array_equal(state.noise_precision[:, 0], 2 * values)
        np.testing.assert_array_equal(state.group_precision[:, 1], -values)
        np.testing.assert_array_equal(changed[k], values != x[k])
    nodes, node_weights = np.polynomial.hermite_e.hermegauss(80)
    node_weights = node_weights / node_weights.sum()
    for k in range(parity, len(betas) - 1, 2):
        a = mean[k] + np.sqrt(variance[k]) * nodes
        b = mean[k + 1] + np.sqrt(variance[k + 1]) * nodes
        log_ratio = (betas[k] - betas[k + 1]) * (
            log_lik(b)[None, :] - log_lik(a)[:, None]
        )
        expected = node_weights @ np.minimum(1.0, np.exp(log_ratio)) @ node_weights
        rate = accepted[k].mean()
        assert abs(rate - expected) < 5 * np.sqrt(expected * (1 - expected) / n_chains)


def _sign_problem():
    # One tanh unit: (w1, b1, w2) and (-w1, -b1, -w2) are the same function,
    # so the posterior gives w2 > 0 probability 1/2 exactly.  On 400 rows of
    # a clean curve the modes are separated by a likelihood barrier of
    # thousands of nats that no trajectory at temperature 1 crosses, and the
    # posterior of the unit is so narrow that a redraw of it from the prior
    # (which jumps to either sign) is next to never accepted.
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, size=(400, 1))
    Y = np.tanh(2 * X) + 0.05 * rng.normal(size=(400, 1))
    return NetworkPosterior(
        (X - X.mean()) / X.std(),
        (Y - Y.mean()) / Y.std(),
        NetworkLayout(1, 1, 1),
        HyperPrior(),
    )


def _tempered_chains(posterior, n_chains, n_samples, n_warmup, ladder):
    """Chains seeded 0, 1, ... of 20 leapfrog steps, replicas at ``ladder``
    (``(n_temperatures, min_inverse_temperature)``)."""
    settings = ChainSettings(
        n_samples,
        n_warmup,
        20,
        0.2,
        inverse_temperatures=tuple(temperature_ladder(*ladder)),
    )
    return run_chains(posterior, list(range(n_chains)), settings)


def test_replica_exchange_crosses_between_symmetric_modes():
    posterior = _sign_problem()

    def output_weight_signs(n_temperatures):
        draws = _tempered_chains(posterior, 4, 400, 100, (n_temperatures, 0.01))
        return draws.theta[:, :, 2] > 0, draws

    plain, _ = output_weight_signs(1)
    # Every plain chain keeps the sign it started with.
    assert np.all(plain.all(axis=0) | (~plain).all(axis=0))
    tempered, draws = output_weight_signs(6)
    switches = np.sum(tempered[1:] != tempered[:-1], axis=0)
    assert np.all(switches >= 5)
    assert abs(tempered.mean() - 0.5) < 0.2
    assert draws.exchange_rate.shape == (4, 5)
    assert np.all((draws.exchange_rate > 0.05) & (draws.exchange_rate < 0.95))


# Long chains; the exchange and the tempered posterior are checked exactly
# and on symmetric modes in the default suite.
@pytest.mark.slow
def test_replica_exchange_samples_the_small_network_posterior():
    # The replicas at temperature 1 follow the same posterior as plain
    # chains: means of the log precisions and of the predictions agree within
    # 4 standard errors over 6 chains each (as for the annealed warm-up).
    posterior = small_network_posterior(40)

    def chain_means(n_temperatures):
        draws = _tempered_chains(posterior, 6, 300, 150, (n_temperatures, 0.2))
        monitored = np.concatenate(
            [
                np.log(draws.noise_precision),
                np.log(draws.group_precision),
                draws.train_outputs[:, :, ::8, 0],
            ],
            axis=2,
        )
        return monitored.mean(axis=0)  # (n_chains, n_quantities)

    plain, tempered = chain_means(1), chain_means(3)
    difference = tempered.mean(0) - plain.mean(0)
    standard_error = np.sqrt((plain.var(0, ddof=1) + tempered.var(0, ddof=1)) / 6)
    assert np.all(np.abs(difference) < 4 * standard_error + 1e-3)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"sampler": "chees"},
        {"adapt_mass_matrix": True, "n_warmup": 200},
        {"anneal_warmup": True},
        {"persistence": 0.5},
    ],
    ids=["plain", "chees", "metric", "anneal", "persistence"],
)
def test_tempered_fit_does_not_depend_on_n_jobs(options):
    # With every other option of the sampler, and sample weights (zeros
    # among them), the replicas of a chain stay in its batch.
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 2))
    y = np.tanh(X[:, 0]) + 0.1 * rng.normal(size=40)
    weights = rng.integers(0, 3, size=40).astype(float)
    params = dict(
        hidden_layer_size=3,
        n_samples=20,
        n_warmup=40,
        n_leapfrog=10,
        n_chains=3,
        n_temperatures=3,
        random_state=0,
    )
    params.update(options)
    fits = [
        HMCNetworkRegressor(n_jobs=n_jobs, **params).fit(X, y, sample_weight=weights)
        for n_jobs in (1, 2)
    ]
    np.testing.assert_array_equal(fits[0].parameter_draws_, fits[1].parameter_draws_)
    np.testing.assert_array_equal(
        fits[0].exchange_acceptance_, fits[1].exchange_acceptance_
    )
    assert fits[0].exchange_acceptance_.shape == (3, 2)
    assert np.all(
        (fits[0].exchange_acceptance_ >= 0) & (fits[0].exchange_acceptance_ <= 1)
    )
    assert fits[0].inverse_temperatures_.shape == (3,)


@pytest.mark.parametrize(
    "n_temperatures, lowest, n_rows, expected",
    [
        (1, "auto", 100, [1.0]),
        # Eight temperatures a factor 0.75 apart; more make it denser.
        (8, "auto", 1000, [0.75**k for k in range(8)]),
        (15, "auto", 1000, [0.75 ** (k / 2) for k in range(15)]),
        (3, 0.25, 1000, [1.0, 0.5, 0.25]),
        # Not below the likelihood of ten rows.
        (9, "auto", 40, [0.25 ** (k / 8) for k in range(9)]),
    ],
)
def test_estimator_ladder(n_temperatures, lowest, n_rows, expected):
    model = HMCNetworkRegressor(
        n_temperatures=n_temperatures, min_inverse_temperature=lowest
    )
    np.testing.assert_allclose(model._temperature_ladder(n_rows), expected)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_one_temperature_reports_no_exchanges():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 1))
    y = np.tanh(X[:, 0])
    model = HMCNetworkRegressor(
        hidden_layer_size=2,
        n_samples=10,
        n_warmup=10,
        n_leapfrog=5,
        n_chains=2,
        random_state=0,
    ).fit(X, y)
    assert model.inverse_temperatures_.tolist() == [1.0]
    assert model.exchange_acceptance_.shape == (2, 0)


@pytest.mark.parametrize(
    "n_temperatures, threshold, suggested",
    [(1, 1.0, True), (1, 1e9, False), (2, 1.0, False)],
)
def test_convergence_warning_suggests_tempering_for_chains_held_apart(
    monkeypatch, n_temperatures, threshold, suggested
):
    # Chains held further apart than any continuation takes on (scripted, so
    # that the remedy does not hang on the rounding of an eight-draw chain);
    # replica exchange is the remedy with one temperature and an R-hat above
    # the threshold (patched to 1.0 or out of reach) only, more draws of the
    # same chains otherwise.
    import sklearn_meanfield.hmc.regressor as regressor_module

    monkeypatch.setattr(regressor_module, "TEMPERING_SUGGESTED_RHAT", threshold)
    far = regressor_module.SMALL_DATA_CONTINUE_MAX_RHAT + 0.1
    script_rhat(monkeypatch, lambda n_draws: far)
    rng = np.random.RandomState(0)
    X = rng.uniform(-2, 2, size=(40, 2))
    y = np.tanh(X[:, 0]) + 0.1 * rng.normal(size=40)
    model = HMCNetworkRegressor(
        hidden_layer_size=2,
        n_samples=8,
        n_warmup=10,
        n_leapfrog=4,
        n_temperatures=n_temperatures,
        random_state=0,
    )
    with pytest.warns(Warning) as caught:
        model.fit(X, y)
    rhat = [str(w.message) for w in caught if "R-hat" in str(w.message)]
    assert len(rhat) == 1
    remedy = (
        "Try replica exchange, n_temperatures=8, at three to eight times the "
        "time per draw."
        if suggested
        else "Refit with warm_start=True and a larger n_samples to continue "
        "these chains."
    )
    assert rhat[0].endswith(f"training sample 0. {remedy}"), rhat[0]


@pytest.mark.parametrize(
    "options", [{}, {"sampler": "chees"}, {"anneal": True, "adapt_mass_matrix": True}]
)
def test_replicas_batched_or_one_by_one_draw_alike(monkeypatch, options):
    # The replicas' transitions run as one batch of rows when the data are
    # small, in groups or one by one when a batch would outgrow the cache:
    # every row keeps its replica's generators, tuning and power, so the
    # grouping changes nothing, draw for draw.
    from sklearn_meanfield.hmc import _chains

    posterior = small_network_posterior(40)
    settings = ChainSettings(
        20, 30, 8, 0.2, inverse_temperatures=(1.0, 0.7, 0.5, 0.3, 0.2), **options
    )
    batched = run_chains(posterior, [1, 2], settings)
    assert _chains.replica_groups(
        5, 2, _chains.max_batch_size(40, posterior.layout)
    ) == [[0, 1, 2, 3, 4]]
    for max_rows in (2, 4):
        monkeypatch.setattr(_chains, "max_batch_size", lambda *args, r=max_rows: r)
        grouped = run_chains(posterior, [1, 2], settings)
        for name in ("theta", "noise_precision", "group_precision", "n_leapfrog"):
            np.testing.assert_array_equal(
                getattr(grouped, name), getattr(batched, name), err_msg=name
            )
        np.testing.assert_array_equal(grouped.exchange_rate, batched.exchange_rate)
