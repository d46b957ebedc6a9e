"""Annealed warm-up of the network sampler: tempered posteriors and schedule."""

import numpy as np
import pytest
from hmc_targets import script_rhat, small_network_posterior

import sklearn_meanfield.hmc._chains as chains_module
from sklearn_meanfield import HMCNetworkRegressor
from sklearn_meanfield.hmc._chains import (
    ANNEAL_START_ROWS,
    ChainSettings,
    run_chains,
)
from sklearn_meanfield.hmc._network import (
    gibbs_precisions,
    network_outputs,
    prior_precision_vector,
)
from sklearn_meanfield.hmc._transition import NetworkPosterior


def _precisions(layout, n_chains, rng):
    noise = rng.gamma(2.0, 1.0, size=(n_chains, layout.n_outputs))
    groups = rng.gamma(2.0, 1.0, size=(n_chains, layout.n_groups))
    return noise, groups


@pytest.mark.parametrize("weighted", [False, True])
def test_tempered_posterior_raises_the_likelihood_to_the_power(weighted):
    # log p_beta(theta) = beta * log-likelihood + log prior, against the
    # network outputs and the prior computed here; the gradient is linear in
    # beta between the prior's and the posterior's.
    base = small_network_posterior(25)
    rng = np.random.default_rng(1)
    weights = rng.integers(0, 3, size=25).astype(float) if weighted else None
    posterior = NetworkPosterior(base.X, base.Y, base.layout, base.prior, weights)
    layout = posterior.layout
    theta = rng.normal(size=(3, layout.n_params))
    noise, groups = _precisions(layout, 3, rng)
    residual = posterior.Y - network_outputs(theta, posterior.X, layout)
    row_weights = np.ones(25) if weights is None else weights
    log_lik = -0.5 * np.einsum("cnm,cm,n->c", residual**2, noise, row_weights)
    log_prior = -0.5 * np.sum(prior_precision_vector(groups, layout) * theta**2, 1)
    grads = {}
    for beta in (0.2, 0.6, 1.0):
        tempered = posterior.tempered(beta)
        log_prob, grads[beta] = tempered.target(noise, groups)(theta)
        np.testing.assert_allclose(log_prob, beta * log_lik + log_prior, rtol=1e-12)
        # Every row's weight times beta is the same posterior: the same
        # gradient and step sizes, through the rows instead of the noise.
        reweighted = NetworkPosterior(
            posterior.X, posterior.Y, layout, posterior.prior, beta * row_weights
        )
        _, grad = reweighted.target(noise, groups)(theta)
        np.testing.assert_allclose(grad, grads[beta], rtol=1e-12)
        np.testing.assert_allclose(
            reweighted.step_scales(noise, groups),
            tempered.step_scales(noise, groups),
            rtol=1e-14,
        )
    np.testing.assert_allclose(grads[0.6], (grads[0.2] + grads[1.0]) / 2, rtol=1e-10)
    assert posterior.tempered(1.0) is posterior


def test_tempered_gibbs_step_of_the_noise_has_the_tempered_conditional():
    # The noise precision's conditional under likelihood^beta is
    # Gamma(a/2 + beta n/2, a/(2w) + beta * RSS/2): the mean of 20000 draws
    # within 4 of its standard errors.
    n_draws = 20000
    posterior = small_network_posterior(40).tempered(0.05)
    layout, prior = posterior.layout, posterior.prior
    theta = np.random.default_rng(2).normal(size=(1, layout.n_params))
    residual = posterior.Y - network_outputs(theta, posterior.X, layout)
    _, noise = gibbs_precisions(
        np.repeat(theta, n_draws, axis=0),
        np.repeat(residual, n_draws, axis=0),
        layout,
        prior,
        np.random.default_rng(3),
        posterior.sample_weight,
        inverse_temperature=posterior.inverse_temperature,
    )
    shape = prior.a_noise / 2 + 0.05 * 40 / 2
    rate = prior.a_noise / (2 * prior.w_noise) + 0.05 * np.sum(residual**2) / 2
    sd = np.sqrt(shape) / rate
    assert abs(noise.mean() - shape / rate) < 4 * sd / np.sqrt(n_draws)


def test_schedule_cools_geometrically_through_two_fifths_of_warm_up():
    settings = ChainSettings(1000, 500, 100, 0.2, anneal=True)
    assert settings.anneal_window == (100, 300)
    n = 2000
    betas = np.array([settings.inverse_temperature(i, n) for i in range(1500)])
    np.testing.assert_array_equal(betas[:100], 1.0)
    np.testing.assert_array_equal(betas[300:], 1.0)
    cooling = betas[100:300]
    # Geometric: constant ratio, from the likelihood of ANNEAL_START_ROWS rows.
    assert cooling[0] == pytest.approx(ANNEAL_START_ROWS / n)
    np.testing.assert_allclose(cooling[1:] / cooling[:-1], (n / 10) ** (1 / 200))
    assert cooling[-1] * (n / 10) ** (1 / 200) == pytest.approx(1.0)
    # Small data and no annealing: the posterior throughout.
    assert settings.inverse_temperature(150, ANNEAL_START_ROWS) == 1.0
    plain = ChainSettings(1000, 500, 100, 0.2)
    assert plain.anneal_window == (100, 100)
    assert {plain.inverse_temperature(i, n) for i in range(1500)} == {1.0}


def test_chains_sample_the_posterior_itself_after_the_annealing(monkeypatch):
    # Every iteration's target, recorded: the tempered posteriors of the
    # schedule during the annealing, the posterior object itself before and
    # after it (so the draws are those of the untempered chain).
    posterior = small_network_posterior(60)
    settings = ChainSettings(
        n_samples=20, n_warmup=50, n_leapfrog=5, step_size=0.2, anneal=True
    )
    targets, transition = [], chains_module.transition

    def recording(state, target, *args, **kwargs):
        targets.append(target)
        return transition(state, target, *args, **kwargs)

    monkeypatch.setattr(chains_module, "transition", recording)
    out = run_chains(posterior, [0, 1], settings)
    assert len(targets) == 70
    start, end = settings.anneal_window
    for iteration, target in enumerate(targets):
        beta = settings.inverse_temperature(iteration, 60)
        if start <= iteration < end:
            assert beta < 1.0
            np.testing.assert_allclose(target.inverse_temperature, beta)
        else:
            assert target is posterior
    # The recorded draws are the chain's states under the posterior.
    log_prob, _ = posterior.target(out.noise_precision[-1], out.group_precision[-1])(
        out.theta[-1]
    )
    assert np.all(np.isfinite(log_prob))


def test_step_size_adaptation_restarts_when_the_annealing_ends(monkeypatch):
    restarts = []
    adaptation_class = chains_module.WarmupAdaptation

    class Recording(adaptation_class):
        n_updates = 0

        def update(self, *args, **kwargs):
            self.n_updates += 1
            super().update(*args, **kwargs)

        def restart_step_size(self):
            restarts.append(self.n_updates)
            super().restart_step_size()

    monkeypatch.setattr(chains_module, "WarmupAdaptation", Recording)
    settings = ChainSettings(10, 50, 5, 0.2, anneal=True)
    run_chains(small_network_posterior(60), [0], settings)
    assert restarts == [settings.anneal_window[1]]
    restarts.clear()
    run_chains(small_network_posterior(60), [0], ChainSettings(10, 50, 5, 0.2))
    assert restarts == []


def _tiny_fit_data(n=40, seed=0):
    rng = np.random.RandomState(seed)
    X = rng.uniform(-2, 2, size=(n, 2))
    return X, np.tanh(X[:, 0]) + 0.1 * rng.normal(size=n)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_annealed_fit_does_not_depend_on_n_jobs():
    X, y = _tiny_fit_data(80)
    params = dict(
        hidden_layer_size=3,
        n_samples=20,
        n_warmup=30,
        n_leapfrog=8,
        anneal_warmup=True,
        random_state=3,
    )
    one = HMCNetworkRegressor(n_jobs=1, **params).fit(X, y)
    two = HMCNetworkRegressor(n_jobs=2, **params).fit(X, y)
    np.testing.assert_array_equal(one.parameter_draws_, two.parameter_draws_)
    plain = HMCNetworkRegressor(n_jobs=1, **{**params, "anneal_warmup": False})
    assert not np.array_equal(plain.fit(X, y).parameter_draws_, one.parameter_draws_)


# Long chains; in the default suite,
# test_chains_sample_the_posterior_itself_after_the_annealing checks that
# every iteration after the annealing targets the posterior itself.
@pytest.mark.slow
def test_annealed_warm_up_leaves_the_small_network_posterior():
    # Annealed and plain warm-ups followed by long sampling give the same
    # posterior means of the log precisions and of the predictions, within
    # Monte Carlo error (six chains each).
    posterior = small_network_posterior(40)
    results = {}
    for anneal in (False, True):
        settings = ChainSettings(
            n_samples=1500, n_warmup=200, n_leapfrog=20, step_size=0.2, anneal=anneal
        )
        out = run_chains(posterior, range(6), settings)
        summary = np.concatenate(
            [
                np.log(out.noise_precision).mean(axis=0),
                np.log(out.group_precision).mean(axis=0),
                out.train_outputs[:, :, :5, 0].mean(axis=0),
            ],
            axis=1,
        )
        results[anneal] = summary  # (chains, quantities)
    diff = results[True].mean(0) - results[False].mean(0)
    se = np.sqrt((results[True].var(0, ddof=1) + results[False].var(0, ddof=1)) / 6)
    assert np.all(np.abs(diff) < 4 * se + 1e-3)


_TINY = dict(hidden_layer_size=2, n_samples=8, n_warmup=10, n_leapfrog=4)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_auto_anneals_from_the_row_threshold_on_counting_sample_weights(
    monkeypatch,
):
    import sklearn_meanfield.hmc.regressor as regressor_module

    X, y = _tiny_fit_data()

    def draws(anneal, **fit_params):
        model = HMCNetworkRegressor(anneal_warmup=anneal, random_state=0, **_TINY)
        return model.fit(X, y, **fit_params).parameter_draws_

    # The threshold is 2000 rows; lowered here so that a small fit crosses it.
    assert regressor_module.ANNEAL_AUTO_ROWS == 2000
    monkeypatch.setattr(regressor_module, "ANNEAL_AUTO_ROWS", 80)
    plain, annealed = draws(False), draws(True)
    assert not np.array_equal(plain, annealed)
    np.testing.assert_array_equal(draws("auto"), plain)  # 40 rows
    # Weighted rows count by their weights: 40 rows of weight 2 are 80 rows.
    np.testing.assert_array_equal(
        draws("auto", sample_weight=np.full(40, 2)),
        draws(True, sample_weight=np.full(40, 2)),
    )


@pytest.mark.parametrize(
    "anneal, remedy",
    [
        (
            False,
            "Set anneal_warmup=True: on data this large, annealing lets the "
            "chains settle into the same configurations.",
        ),
        # An annealed warm-up is suggested at twice its length instead.
        (
            "auto",
            "Set n_warmup=20: an annealed warm-up twice as long cools the "
            "chains more slowly.",
        ),
    ],
)
def test_convergence_warning_suggests_annealing_on_large_data(
    monkeypatch, anneal, remedy
):
    import sklearn_meanfield.hmc.regressor as regressor_module

    monkeypatch.setattr(regressor_module, "ANNEAL_AUTO_ROWS", 40)
    # Chains held further apart than any continuation takes on (scripted:
    # the remedy must not hang on the rounding of an eight-draw chain).
    far = regressor_module.SMALL_DATA_CONTINUE_MAX_RHAT + 0.1
    script_rhat(monkeypatch, lambda n_draws: far)
    X, y = _tiny_fit_data()
    model = HMCNetworkRegressor(anneal_warmup=anneal, random_state=0, **_TINY)
    with pytest.warns(Warning) as caught:
        model.fit(X, y)
    rhat = [str(w.message) for w in caught if "R-hat" in str(w.message)]
    assert len(rhat) == 1
    assert rhat[0].endswith(f"training sample 0. {remedy}"), rhat[0]
