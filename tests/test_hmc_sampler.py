"""The HMC sampler against Gaussian targets of known moments, and its dynamics."""

import numpy as np
import pytest

from sklearn_meanfield.hmc._chains import ChainRandom
from sklearn_meanfield.hmc._sampler import (
    DualAveraging,
    hmc_step,
    leapfrog,
    sample,
)


def gaussian_target(mean, cov):
    precision = np.linalg.inv(cov)

    def log_prob_and_grad(q):
        centred = q - mean
        grad = -centred @ precision
        return 0.5 * np.sum(centred * grad, axis=1), grad

    return log_prob_and_grad


def _pooled(draws):
    return draws.reshape(-1, draws.shape[-1])


def test_recovers_correlated_gaussian():
    mean = np.array([1.0, -2.0, 0.5])
    cov = np.array([[1.0, 0.8, 0.0], [0.8, 1.0, -0.3], [0.0, -0.3, 0.5]])
    draws, rate, _ = sample(
        gaussian_target(mean, cov),
        np.zeros((4, 3)),
        1.0,
        n_samples=2000,
        n_warmup=300,
        n_leapfrog=10,
        random_state=np.random.default_rng(0),
    )
    flat = _pooled(draws)
    # 8000 draws with ESS of a few thousand: MC sd of the mean < 0.03.
    np.testing.assert_allclose(flat.mean(axis=0), mean, atol=0.1)
    np.testing.assert_allclose(np.cov(flat.T), cov, atol=0.1)
    assert np.all(rate > 0.6)


def test_recovers_badly_scaled_gaussian_with_per_parameter_steps():
    # Scales spanning six orders of magnitude: a diagonal mass (per-parameter
    # step sizes) set to the scales makes it as easy as a standard normal.
    scales = np.array([1e-3, 1.0, 1e3])
    mean = np.array([0.01, 5.0, -2000.0])
    draws, _, _ = sample(
        gaussian_target(mean, np.diag(scales**2)),
        np.tile(mean, (4, 1)) + scales,
        scales,
        n_samples=2000,
        n_warmup=300,
        n_leapfrog=8,
        random_state=np.random.default_rng(1),
    )
    flat = _pooled(draws)
    np.testing.assert_allclose((flat.mean(axis=0) - mean) / scales, 0.0, atol=0.1)
    np.testing.assert_allclose(flat.std(axis=0) / scales, 1.0, atol=0.08)


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
def test_persistence_and_stochastic_dynamics(metropolis):
    # With persistence and one leapfrog step this is Horowitz's generalised HMC
    # (exact with the Metropolis test and momentum reversal on rejection) or,
    # without the test, Neal's stochastic dynamics (bias O(eps^2): the leapfrog
    # of a unit Gaussian conserves a shadow energy whose q-variance is
    # 1 / (1 - eps^2 / 4), 1.0025 at eps = 0.1).
    target = gaussian_target(np.zeros(2), np.eye(2))
    draws, _, _ = sample(
        target,
        np.zeros((8, 2)),
        1.0,
        n_samples=6000,
        n_warmup=200,
        n_leapfrog=1,
        step_size=0.1,
        persistence=0.95,
        metropolis=metropolis,
        adapt=False,
        random_state=np.random.default_rng(4),
    )
    flat = _pooled(draws)
    np.testing.assert_allclose(flat.mean(axis=0), 0.0, atol=0.1)
    np.testing.assert_allclose(flat.var(axis=0), 1.0, atol=0.1)


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
