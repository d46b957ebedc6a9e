"""The HMC sampler against Gaussian targets of known moments, and its dynamics."""

import numpy as np
import pytest
from hmc_targets import gaussian_target

from sklearn_meanfield.hmc._chains import ChainRandom
from sklearn_meanfield.hmc._sampler import DualAveraging, hmc_step, leapfrog


def _run(target, q, step_sizes, n_steps, n_leapfrog, seed, **kwargs):
    """``n_steps`` transitions of every chain, each with its step sizes times
    a random factor in [0.8, 1.2] (against periodic orbits); the final states
    and the mean acceptance of each chain."""
    rng = np.random.default_rng(seed)
    log_prob, grad = target(q)
    accepted = np.zeros(q.shape[0])
    for _ in range(n_steps):
        jitter = rng.uniform(0.8, 1.2, size=(q.shape[0], 1))
        step = hmc_step(
            q,
            log_prob,
            grad,
            target,
            step_sizes * jitter,
            n_leapfrog,
            rng,
            **kwargs,
        )
        q, log_prob, grad = step.q, step.log_prob, step.grad
        accepted += step.accepted
    return q, accepted / n_steps


def test_chains_from_a_point_reach_a_correlated_gaussian():
    # 2000 chains started at the origin: after 100 transitions their states
    # are (nearly independent) draws of the target, whose moments they match
    # (Monte Carlo sd of the means about 0.02, of the covariances 0.03).
    mean = np.array([1.0, -2.0, 0.5])
    cov = np.array([[1.0, 0.8, 0.0], [0.8, 1.0, -0.3], [0.0, -0.3, 0.5]])
    q, rate = _run(gaussian_target(mean, cov), np.zeros((2000, 3)), 0.25, 100, 10, 0)
    np.testing.assert_allclose(q.mean(axis=0), mean, atol=0.1)
    np.testing.assert_allclose(np.cov(q.T), cov, atol=0.1)
    assert np.all(rate > 0.6)


def test_per_parameter_steps_sample_a_badly_scaled_gaussian():
    # Scales spanning six orders of magnitude: per-parameter step sizes (a
    # diagonal mass) set to the scales make it as easy as a standard normal.
    scales = np.array([1e-3, 1.0, 1e3])
    mean = np.array([0.01, 5.0, -2000.0])
    start = np.tile(mean + scales, (2000, 1))
    target = gaussian_target(mean, np.diag(scales**2))
    q, _ = _run(target, start, 0.5 * scales, 60, 8, 1)
    np.testing.assert_allclose((q.mean(axis=0) - mean) / scales, 0.0, atol=0.1)
    np.testing.assert_allclose(q.std(axis=0) / scales, 1.0, atol=0.08)


def test_coarse_steps_leave_the_target_invariant():
    # Steps near the leapfrog's stability limit (eps up to 1.8 for a unit
    # variance) conserve a shadow energy whose q-variance, 1 / (1 - eps^2 / 4),
    # is 2.3 at eps = 1.5: only the Metropolis test keeps exact draws exact.
    # 10000 independent coordinates: Monte Carlo sd of the variance about
    # 0.014.
    target = gaussian_target(np.zeros(2), np.eye(2))
    start = np.random.default_rng(7).standard_normal((5000, 2))
    q, rate = _run(target, start, 1.5, 50, 3, 8)
    assert 0.2 < rate.mean() < 0.9  # coarse indeed
    np.testing.assert_allclose(q.mean(axis=0), 0.0, atol=0.05)
    np.testing.assert_allclose(q.var(axis=0), 1.0, atol=0.05)


def test_acceptance_tends_to_one_and_energy_error_is_second_order():
    target = gaussian_target(np.zeros(5), np.diag([1.0, 0.5, 2.0, 1.0, 0.3]))
    rng = np.random.default_rng(2)
    q = rng.normal(size=(200, 5))
    p = rng.normal(size=(200, 5))
    log_prob, grad = target(q)
    h0 = -log_prob + 0.5 * np.sum(p**2, axis=1)
    errors = []
    for eps in (0.1, 0.05, 0.025):
        # The same trajectory length with ever smaller steps.
        qn, pn, lpn, _ = leapfrog(q, p, grad, eps, int(round(1.0 / eps)), target)
        errors.append(np.mean(np.abs(-lpn + 0.5 * np.sum(pn**2, axis=1) - h0)))
    ratios = np.array(errors[:-1]) / np.array(errors[1:])
    np.testing.assert_allclose(ratios, 4.0, rtol=0.15)  # O(eps^2)
    step = hmc_step(q, log_prob, grad, target, 0.001, 1000, rng)
    assert np.mean(step.accept_prob) > 0.9999


def test_leapfrog_is_reversible():
    target = gaussian_target(
        np.zeros(3), np.array([[2.0, 0.3, 0], [0.3, 1, 0], [0, 0, 1]])
    )
    rng = np.random.default_rng(3)
    q, p = rng.normal(size=(2, 3)), rng.normal(size=(2, 3))
    _, grad = target(q)
    q1, p1, _, grad1 = leapfrog(q, p, grad, 0.3, 7, target)
    q2, p2, _, _ = leapfrog(q1, -p1, grad1, 0.3, 7, target)
    np.testing.assert_allclose(q2, q, atol=1e-12)
    np.testing.assert_allclose(-p2, p, atol=1e-12)


@pytest.mark.parametrize("metropolis", [True, False])
def test_one_step_trajectories_are_langevin_dynamics(metropolis):
    # One leapfrog step with a fresh momentum is a Langevin step: exact with
    # the Metropolis test, and without it Neal's stochastic dynamics, biased
    # by O(eps^2) (the leapfrog of a unit Gaussian conserves a shadow energy
    # whose q-variance is 1 / (1 - eps^2 / 4), 1.0025 at eps = 0.1).  Each
    # step advances time eps^2 / 2 of the diffusion: from the origin, 1000
    # steps bring the variance within exp(-10) of its limit.  2000 chains x 2
    # coordinates: Monte Carlo sd of the variance about 0.02.
    target = gaussian_target(np.zeros(2), np.eye(2))
    q, _ = _run(target, np.zeros((2000, 2)), 0.1, 1000, 1, 4, metropolis=metropolis)
    np.testing.assert_allclose(q.mean(axis=0), 0.0, atol=0.1)
    np.testing.assert_allclose(q.var(axis=0), 1.0, atol=0.1)


def test_divergent_trajectories_are_rejected_without_nan():
    def exploding(q):
        # A log density whose gradient sends the leapfrog to infinity.
        return -np.sum(q**4, axis=1), -4.0 * q**3

    q = np.full((3, 2), 2.0)
    log_prob, grad = exploding(q)
    step = hmc_step(q, log_prob, grad, exploding, 1.0, 20, np.random.default_rng(5))
    assert np.all(step.divergent) and not np.any(step.accepted)
    np.testing.assert_array_equal(step.q, q)
    assert np.all(np.isfinite(step.log_prob)) and np.all(np.isfinite(step.grad))


def test_dual_averaging_reaches_target_acceptance():
    target = gaussian_target(np.zeros(10), np.eye(10))
    q = np.zeros((4, 10))
    log_prob, grad = target(q)
    rng = np.random.default_rng(6)
    adapter = DualAveraging(np.full(4, np.log(2.0)), target=0.8)
    log_eta = adapter.log_value
    for _ in range(500):
        step = hmc_step(q, log_prob, grad, target, np.exp(log_eta)[:, None], 5, rng)
        q, log_prob, grad = step.q, step.log_prob, step.grad
        log_eta = adapter.update(step.accept_prob)
    eta = np.exp(adapter.final())[:, None]
    probs = [
        hmc_step(q, log_prob, grad, target, eta, 5, rng).accept_prob for _ in range(200)
    ]
    assert np.mean(probs) == pytest.approx(0.8, abs=0.08)


def test_chain_random_rows_do_not_depend_on_batch():
    together = ChainRandom([11, 12, 13])
    alone = ChainRandom([12])
    np.testing.assert_array_equal(
        together.standard_normal((3, 4))[1], alone.standard_normal((1, 4))[0]
    )
    np.testing.assert_array_equal(
        together.gamma(np.array([1.0, 2.0]), size=(3, 2))[1],
        alone.gamma(np.array([1.0, 2.0]), size=(1, 2))[0],
    )


# ------------------------------------------------- the network chains' driver


def _small_posterior(gradient_dtype=np.float64):
    from sklearn_meanfield.hmc._network import HyperPrior, NetworkLayout
    from sklearn_meanfield.hmc._transition import NetworkPosterior

    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 1))
    Y = np.tanh(X) + 0.1 * rng.normal(size=(20, 1))
    return NetworkPosterior(
        X, Y, NetworkLayout(1, 3, 1), HyperPrior(), gradient_dtype=gradient_dtype
    )


class _Watch:
    """on_iteration: keeps every state's weights, asks to stop at given
    iterations."""

    def __init__(self, stop_at=()):
        self.stop_at = set(stop_at)
        self.thetas = []

    def __call__(self, iteration, state, info):
        assert iteration == len(self.thetas)
        self.thetas.append(state.theta.copy())
        return iteration in self.stop_at


def test_the_driver_records_the_states_it_reports_and_stops_at_block_ends():
    from sklearn_meanfield.hmc._chains import ChainSettings, run_chains

    posterior = _small_posterior()
    # 30 iterations in blocks of 3; 10 of warm-up.
    settings = ChainSettings(n_samples=20, n_warmup=10, n_leapfrog=5, step_size=0.1)
    watch = _Watch()
    full = run_chains(posterior, [1, 2], settings, on_iteration=watch)
    seen = np.stack(watch.thetas)
    assert len(seen) == 30
    np.testing.assert_array_equal(full.theta, seen[10:])
    outputs = posterior.train_outputs(full.theta[3])
    np.testing.assert_array_equal(full.train_outputs[3], outputs)
    np.testing.assert_array_equal(full.accept_rate, full.accepted.mean(axis=0))
    assert not full.stopped_in_warmup
    # A stop asked for after 2 draws waits for the first block end that
    # leaves 4 draws or more: iteration 14 (15 done, 5 draws).
    watch = _Watch(stop_at=[11])
    stopped = run_chains(posterior, [1, 2], settings, on_iteration=watch)
    assert len(watch.thetas) == 15 and len(stopped.theta) == 5
    np.testing.assert_array_equal(stopped.theta, full.theta[:5])
    np.testing.assert_array_equal(stopped.step_size, full.step_size)
    # Asked for in warm-up: the batch ends as soon as 4 states exist (before
    # reporting the 4th), which are the draws.
    watch = _Watch(stop_at=[1])
    early = run_chains(posterior, [1, 2], settings, on_iteration=watch)
    assert early.stopped_in_warmup and len(watch.thetas) == 3
    np.testing.assert_array_equal(early.theta, seen[:4])
    expected = np.stack([posterior.train_outputs(t) for t in seen[:4]])
    np.testing.assert_array_equal(early.train_outputs, expected)
    np.testing.assert_array_equal(early.accept_rate, early.accepted.mean(axis=0))
    # Asked for later in warm-up: its last 4 states, oldest first.
    late = run_chains(posterior, [1, 2], settings, on_iteration=_Watch([6]))
    np.testing.assert_array_equal(late.theta, seen[3:7])


def test_chains_do_not_depend_on_their_batch():
    from sklearn_meanfield.hmc._chains import ChainSettings, run_chains

    posterior = _small_posterior()
    settings = ChainSettings(n_samples=6, n_warmup=6, n_leapfrog=5, step_size=0.1)
    both = run_chains(posterior, [5, 6], settings)
    alone = run_chains(posterior, [6], settings)
    np.testing.assert_array_equal(both.theta[:, 1], alone.theta[:, 0])
    np.testing.assert_array_equal(both.step_size[1], alone.step_size[0])


def test_adaptation_is_frozen_after_warm_up():
    from sklearn_meanfield.hmc._network import NetworkLayout
    from sklearn_meanfield.hmc._transition import ChainInfo, WarmupAdaptation

    layout = NetworkLayout(2, 3, 1)
    adaptation = WarmupAdaptation(layout, 2, step_size=0.5, target_accept=0.8)
    tuning = adaptation.tuning()
    np.testing.assert_allclose(tuning.step_size, 0.5)
    np.testing.assert_allclose(tuning.group_sd, 0.5)
    np.testing.assert_allclose(tuning.unit_sd, 0.3)
    # Robbins-Monro: the k-th update moves the log sd by k^-0.6 (accept - 0.44).
    moves = ChainInfo(
        None, np.full(2, 0.8), None, None, np.full((2, 5), 0.94), np.full((2, 3), 0.44)
    )
    adaptation.update(moves)
    adaptation.update(moves)
    np.testing.assert_allclose(
        np.log(adaptation.tuning().group_sd), np.log(0.5) + 0.5 * (1 + 2**-0.6)
    )
    np.testing.assert_allclose(adaptation.tuning().unit_sd, 0.3)
    # Without rescaling moves (precisions held) only the step size adapts.
    adaptation.update(moves._replace(group_accept=None, unit_accept=None))
    assert adaptation.n_moves == 2
    # final() freezes the averaged step size and copies what adapted: later
    # updates (in place) leave the frozen settings as they were.
    frozen = adaptation.final()
    before = frozen.tuning()
    np.testing.assert_array_equal(
        before.step_size, np.exp(adaptation.dual_averaging.final())
    )
    adaptation.update(moves)
    for after, kept in zip(frozen.tuning(), before):
        np.testing.assert_array_equal(after, kept)


@pytest.mark.parametrize("gradient_dtype", [np.float64, np.float32])
def test_large_batches_are_split_without_changing_the_draws(
    monkeypatch, gradient_dtype
):
    # Batches are capped at BATCH_BYTES of hidden activations (chains x rows
    # x units x bytes each); lowered here so that 5 chains on 20 rows and 3
    # units (60 per chain) go in batches of 2, 2 and 1 even with one worker.
    # In single precision too: a chain's kicks must not depend on the other
    # chains of its batch.
    import sklearn_meanfield.hmc._chains as chains_module
    from sklearn_meanfield.hmc._chains import ChainSettings, sample_chains

    posterior = _small_posterior(gradient_dtype=gradient_dtype)
    assert posterior.X.shape[0] * posterior.layout.n_hidden == 60
    settings = ChainSettings(n_samples=6, n_warmup=6, n_leapfrog=5, step_size=0.1)
    seeds = np.arange(5)
    whole = sample_chains(posterior, seeds, settings, n_jobs=1)
    batches, run_parallel = [], chains_module.run_parallel

    def recording(function, arguments, **kwargs):
        arguments = list(arguments)
        batches.extend(len(args[1]) for args in arguments)
        return run_parallel(function, arguments, **kwargs)

    monkeypatch.setattr(chains_module, "run_parallel", recording)
    itemsize = np.dtype(gradient_dtype).itemsize
    monkeypatch.setattr(chains_module, "BATCH_BYTES", 130 * itemsize)
    split = sample_chains(posterior, seeds, settings, n_jobs=1)
    assert batches == [2, 2, 1]
    np.testing.assert_array_equal(split.theta, whole.theta)
    np.testing.assert_array_equal(split.train_outputs, whole.train_outputs)
    np.testing.assert_array_equal(split.step_size, whole.step_size)
