"""Targets of known moments for the HMC sampler tests, and what HMC fits share."""

import numpy as np

from sklearn_meanfield.hmc import regressor as hmc_regressor

# The fitted attributes of HMCNetworkRegressor that two fits making the same
# draws share bit for bit (continued chains against one run).
FITTED = (
    "parameter_draws_",
    "noise_precision_draws_",
    "precision_draws_",
    "acceptance_rate_",
    "n_divergent_",
    "step_size_",
    "step_scale_factors_",
    "trajectory_length_",
    "exchange_acceptance_",
    "noise_std_",
    "rhat_",
    "ess_",
    "loo_error_",
    "loo_prediction_",
    "loo_log_density_",
    "pareto_k_",
)


def gaussian_target(mean, cov):
    """``log N(q; mean, cov)`` (up to a constant) and its gradient, batched
    over the rows of ``q``."""
    precision = np.linalg.inv(cov)

    def log_prob_and_grad(q):
        centred = q - mean
        grad = -centred @ precision
        return 0.5 * np.sum(centred * grad, axis=1), grad

    return log_prob_and_grad


def assert_moments_within_monte_carlo_error(draws, mean, second):
    """First and second moments of ``(n_draws, n_chains, n_params)`` draws.

    Each chain's averages are independent: their spread across chains gives
    the Monte Carlo error of the grand averages (4 standard errors).
    """
    n_chains = draws.shape[1]
    for values, truth in ((draws, mean), (draws**2, second)):
        per_chain = values.mean(axis=0)
        error = per_chain.std(axis=0, ddof=1) / np.sqrt(n_chains)
        assert np.all(np.abs(per_chain.mean(axis=0) - truth) < 4 * error), (
            per_chain.mean(axis=0),
            truth,
            error,
        )


def small_network_posterior(n_samples, seed=0):
    """A 2-input, 3-hidden-unit network posterior on ``n_samples`` standardised
    points of ``y = tanh(x_1) + 0.1 noise``: the smallest real network target."""
    from sklearn_meanfield.hmc._network import HyperPrior, NetworkLayout
    from sklearn_meanfield.hmc._transition import NetworkPosterior

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_samples, 2))
    Y = np.tanh(X[:, :1]) + 0.1 * rng.normal(size=(n_samples, 1))
    return NetworkPosterior(
        (X - X.mean(0)) / X.std(0),
        (Y - Y.mean()) / Y.std(),
        NetworkLayout(2, 3, 1),
        HyperPrior(),
    )


def script_rhat(monkeypatch, rhat_after):
    """Make every monitored R-hat ``rhat_after(draws per chain)``.

    The R-hat of a short chain is a chaotic function of its draws, which
    change with the last bit of any BLAS or libm kernel; tests of what a fit
    does with its R-hat (continue the chains, warn, suggest a remedy) script
    it instead.  The effective sample sizes stay computed from the draws.
    """
    computed = hmc_regressor.rhat_and_bulk_ess

    def scripted(monitored):
        rhat, ess = computed(monitored)
        return np.full_like(rhat, rhat_after(monitored.shape[1])), ess

    monkeypatch.setattr(hmc_regressor, "rhat_and_bulk_ess", scripted)
