"""Targets of known moments for the HMC sampler tests, and what HMC fits share."""

from typing import NamedTuple

import numpy as np

from sklearn_meanfield.hmc import regressor as hmc_regressor
from sklearn_meanfield.hmc._sampler import ChEESAdaptation, DualAveraging, hmc_step

# The fitted attributes of HMCNetworkRegressor that two fits making the same
# draws share bit for bit (continued chains against one run).
FITTED = (
    "parameter_draws_",
    "noise_precision_draws_",
    "precision_draws_",
    "acceptance_rate_",
    "n_divergent_",
    "step_size_",
    "trajectory_length_",
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


class AdaptiveDraws(NamedTuple):
    """What :func:`adaptive_hmc` returns."""

    draws: np.ndarray
    """Positions after every sampling iteration, (n_samples, n_chains, n_params)."""
    accept_prob: np.ndarray
    """(n_samples, n_chains)."""
    n_leapfrog: np.ndarray
    """(n_samples, n_chains)."""
    step_size: np.ndarray
    """Frozen step-size multiplier, (n_chains,)."""
    trajectory_length: np.ndarray
    """Frozen mean trajectory duration, (n_chains,)."""


def adaptive_hmc(
    log_prob_and_grad,
    q,
    random_state,
    *,
    n_warmup,
    n_samples,
    step_size=0.1,
    trajectory_length=1.0,
    target_accept=0.8,
    max_leapfrog=1000,
):
    """The network sampler's HMC kernel and adaptation on a fixed target.

    Every iteration draws each chain's step-size jitter (uniform in [0.9,
    1.1]) and runs ``hmc_step`` with the jittered ChEES lengths; in warm-up
    the step size follows dual averaging and the lengths ChEES, as
    ``WarmupAdaptation`` does between the network's Gibbs steps; both are
    frozen for sampling.
    """
    n_chains = q.shape[0]
    log_prob, grad = log_prob_and_grad(q)
    dual = DualAveraging(np.full(n_chains, np.log(step_size)), target=target_accept)
    log_step = dual.log_value
    chees = ChEESAdaptation(np.full(n_chains, float(trajectory_length)))
    draws = np.empty((n_samples, *q.shape))
    accept_prob = np.empty((n_samples, n_chains))
    n_steps = np.empty((n_samples, n_chains), dtype=int)
    for iteration in range(n_warmup + n_samples):
        step_size = np.exp(log_step)
        steps = chees.n_leapfrog(iteration + 1, step_size, max_leapfrog)
        multiplier = step_size[:, None] * random_state.uniform(
            0.9, 1.1, size=(n_chains, 1)
        )
        step = hmc_step(
            q, log_prob, grad, log_prob_and_grad, multiplier, steps, random_state
        )
        q, log_prob, grad = step.q, step.log_prob, step.grad
        if iteration < n_warmup:
            chees.update(
                step,
                1.0,
                steps * multiplier[:, 0],
                min_length=step_size,
                max_length=max_leapfrog * step_size / 2,
            )
            chees.observe(q)
            log_step = dual.update(step.accept_prob)
            if iteration == n_warmup - 1:
                log_step = dual.final()
                chees.log_length = chees.final()
        else:
            row = iteration - n_warmup
            draws[row], accept_prob[row], n_steps[row] = q, step.accept_prob, steps
    return AdaptiveDraws(
        draws, accept_prob, n_steps, np.exp(log_step), chees.trajectory_length
    )
