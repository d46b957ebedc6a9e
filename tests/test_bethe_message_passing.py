"""Bethe message passing for the RBM against exact enumeration and sampling."""

import itertools

import numpy as np
import pytest
from scipy.special import logsumexp
from sklearn.neural_network import BernoulliRBM

from sklearn_meanfield.bethe import _message_passing as mp
from sklearn_meanfield.bethe._exact import (
    exact_log_likelihood,
    exact_log_partition,
    exact_moments,
    free_energy,
)
from sklearn_meanfield.bethe._message_passing import bethe_solve, stability, to_spin
from sklearn_meanfield.bethe._sampling import gibbs_moments

METHODS = ["bipartite", "gaussian"]


def paper_ensemble(n_visible, n_hidden, g, v, rng):
    """The paper's random RBM (spins: w ~ N(0, g/N), fields ~ N(0, v)) in {0, 1}
    units: W = 4 w, b = 2 phi - 2 sum_a w_a, c = 2 h - 2 sum_i w_i."""
    w = rng.normal(0, np.sqrt(g / n_visible), (n_hidden, n_visible))
    phi = rng.normal(0, np.sqrt(v), n_visible)
    h = rng.normal(0, np.sqrt(v), n_hidden)
    return 4 * w, 2 * phi - 2 * w.sum(axis=0), 2 * h - 2 * w.sum(axis=1)


def all_states(n):
    return np.array(list(itertools.product([0.0, 1.0], repeat=n)))


def brute_force(W, b, c):
    """log Z and moments by summing over every joint (v, h)."""
    V, H = all_states(W.shape[1]), all_states(W.shape[0])
    log_w = (V @ b)[:, None] + (H @ c)[None, :] + V @ W.T @ H.T
    log_z = logsumexp(log_w)
    p = np.exp(log_w - log_z)
    return log_z, p.sum(1) @ V, p.sum(0) @ H, H.T @ p.T @ V


def spin_stats(mean_v, mean_h, joint):
    """{0, 1} moments to the paper's m_i, m_hat_a and C_aj = <s_a sigma_j>."""
    m, m_hat = 2 * mean_v - 1, 2 * mean_h - 1
    return m, m_hat, 4 * joint - 2 * mean_h[:, None] - 2 * mean_v[None, :] + 1


@pytest.mark.parametrize("shape", [(3, 5), (6, 2)])
def test_exact_enumeration_matches_joint_brute_force(shape):
    rng = np.random.RandomState(0)
    W, b, c = (
        rng.normal(0, 1.5, shape),
        rng.normal(size=shape[1]),
        rng.normal(size=shape[0]),
    )
    expected = brute_force(W, b, c)
    got = exact_moments(W, b, c)
    for e, g in zip(expected, got):
        np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)
    assert exact_log_partition(W, b, c) == pytest.approx(expected[0], rel=1e-12)
    # Exact log-likelihoods of all visible states sum to one.
    total = np.exp(exact_log_likelihood(all_states(shape[1]), W, b, c)).sum()
    assert total == pytest.approx(1.0, rel=1e-10)


def test_spin_conversion_keeps_energies_and_free_energy():
    rng = np.random.RandomState(1)
    W, b, c = rng.normal(size=(3, 4)), rng.normal(size=4), rng.normal(size=3)
    J, phi, theta, const = to_spin(W, b, c)
    V, H = all_states(4), all_states(3)
    minus_energy = (V @ b)[:, None] + (H @ c)[None, :] + V @ W.T @ H.T
    sigma, s = 2 * V - 1, 2 * H - 1
    spin = const + (sigma @ phi)[:, None] + (s @ theta)[None, :] + sigma @ J.T @ s.T
    np.testing.assert_allclose(spin, minus_energy, rtol=1e-12, atol=1e-12)

    # Single-configuration free energies equal BernoulliRBM's, whose
    # parametrisation is the one users see.
    rbm = BernoulliRBM(n_components=3)
    rbm.components_, rbm.intercept_visible_, rbm.intercept_hidden_ = W, b, c
    np.testing.assert_allclose(free_energy(V, W, b, c), rbm._free_energy(V))
    # ... and the spin form reproduces them with the constant carried along:
    # F(v) = -const - phi.sigma - sum_a log 2cosh(theta_a + J_a.sigma).
    spin_free = (
        -const
        - sigma @ phi
        - np.logaddexp(theta + sigma @ J.T, -(theta + sigma @ J.T)).sum(axis=1)
    )
    np.testing.assert_allclose(spin_free, rbm._free_energy(V), rtol=1e-12)


def test_bipartite_form_is_exact_on_a_tree():
    # One hidden unit: the bipartite factor graph is a tree, where belief
    # propagation is exact.  (The Gaussian form is not: it replaces the sum
    # over the other visible units by a Gaussian even then.)
    rng = np.random.RandomState(2)
    W, b, c = rng.normal(0, 2, (1, 6)), rng.normal(size=6), rng.normal(size=1)
    sol = bethe_solve(W, b, c, tol=1e-12)
    log_z, mean_v, mean_h, joint = exact_moments(W, b, c)
    assert sol.converged
    assert sol.log_z == pytest.approx(log_z, abs=1e-9)
    np.testing.assert_allclose(sol.mean_visible, mean_v, atol=1e-9)
    np.testing.assert_allclose(sol.mean_hidden, mean_h, atol=1e-9)
    np.testing.assert_allclose(sol.mean_hidden_visible, joint, atol=1e-9)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("alpha", [0.2, 0.6])
def test_paper_ensemble_against_enumeration(method, alpha):
    # The paper's Fig. 2 inset setting at g = 0.5, v = 0.05, N = 20.
    n_visible, n_hidden = 20, int(round(alpha * 20))
    errors, rms_m, rms_c, rms_joint = [], [], [], []
    for seed in range(5):
        rng = np.random.RandomState(seed)
        W, b, c = paper_ensemble(n_visible, n_hidden, 0.5, 0.05, rng)
        sol = bethe_solve(W, b, c, method=method)
        assert sol.converged
        log_z, *exact = exact_moments(W, b, c)
        errors.append((sol.log_z - log_z) / n_visible)
        m, _, C = spin_stats(*exact)
        m_ba, _, C_ba = spin_stats(
            sol.mean_visible, sol.mean_hidden, sol.mean_hidden_visible
        )
        rms_m.append(np.sqrt(np.mean((m - m_ba) ** 2)))
        rms_c.append(np.sqrt(np.mean((C - C_ba) ** 2)))
        rms_joint.append(np.sqrt(np.mean((exact[2] - sol.mean_hidden_visible) ** 2)))
    # Couplings of order sqrt(g / N): the Bethe approximation is exact up to
    # its loop corrections, which in a dense model contribute O(1) nat to
    # log Z in total (of order alpha g / 2 here), i.e. O(1/N) per spin: at
    # most a few thousandths at N = 20, and 0.01 per spin leaves a factor of
    # two or three for the constant.  A magnetisation's loop correction is
    # O(1/N) = 0.05 times couplings of order one, and the spin correlation
    # C_aj of a coupled pair, itself of order sqrt(g / N) = 0.16, misses the
    # four-cycles through it, of order sqrt(alpha) g**1.5 / sqrt(N) (0.03 to
    # 0.06 here; the Gibbs test checks the same quantity at N = 100 to 0.03).
    # A wrong cavity field or fixed point gives errors of the size of the
    # moments themselves, tenths, far above these bounds.
    assert abs(np.mean(errors)) < 0.01
    assert np.mean(np.abs(errors)) < 0.01
    assert np.mean(rms_m) < 0.03
    assert np.mean(rms_joint) < 0.03
    assert np.mean(rms_c) < 0.06


def test_bipartite_form_stays_accurate_at_large_weights():
    # Why "bipartite" is the default: at weights of sd 3 on 16 visible units
    # a hidden unit's input is a sum of a few large terms, which the Gaussian
    # form replaces by a normal variable, while the bipartite form keeps each
    # edge exact.  log Z is 70 to 100 nats here; 0.1 nat is a loop-level
    # error, and the bipartite form must beat the Gaussian one by a quarter,
    # a margin that a central-limit error of a 16-term sum exceeds.
    errors = {method: [] for method in METHODS}
    for seed in range(5):
        rng = np.random.RandomState(seed)
        W, b, c = rng.normal(0, 3, (10, 16)), rng.normal(size=16), rng.normal(size=10)
        log_z = exact_log_partition(W, b, c)
        for method in METHODS:
            sol = bethe_solve(W, b, c, method=method, max_sweeps=2000)
            errors[method].append(abs(sol.log_z - log_z))
    assert np.mean(errors["bipartite"]) < 0.1
    assert np.mean(errors["bipartite"]) < 0.75 * np.mean(errors["gaussian"])


@pytest.mark.parametrize("method", METHODS)
def test_warm_start_reaches_the_same_fixed_point_faster(method):
    rng = np.random.RandomState(3)
    W, b, c = paper_ensemble(30, 15, 1.0, 0.05, rng)
    cold = bethe_solve(W, b, c, method=method, tol=1e-10)
    W2 = W + rng.normal(0, 0.01, W.shape)
    cold2 = bethe_solve(W2, b, c, method=method, tol=1e-10)
    warm2 = bethe_solve(W2, b, c, method=method, tol=1e-10, messages=cold.messages)
    assert warm2.n_sweeps < cold2.n_sweeps
    assert warm2.log_z == pytest.approx(cold2.log_z, abs=1e-8)
    np.testing.assert_allclose(
        warm2.mean_hidden_visible, cold2.mean_hidden_visible, atol=1e-8
    )


def _sweep_jacobian(method, W, b, c, messages):
    """Finite-difference Jacobian of one undamped sweep, as a map of the
    messages whose variances eq. (5) tracks (u_hv for the bipartite form,
    m_vh for the Gaussian form)."""
    J, phi, theta, _ = to_spin(W, b, c)
    first, second = messages
    eps = 1e-6
    if method == "bipartite":

        def step(u_hv):
            new_vh = mp._cavity_bias(mp._bipartite_visible_cavity(J, phi, u_hv), J)
            return mp._cavity_bias(mp._bipartite_hidden_cavity(J, theta, new_vh), J)

        x0 = first
    else:

        def step(m_vh):
            u = mp._cavity_bias(mp._gaussian_cavity_mean(J, theta, m_vh), J)
            return np.tanh(mp._bipartite_visible_cavity(J, phi, u))

        x0 = second
    base = x0.ravel()
    jac = np.empty((base.size, base.size))
    for k in range(base.size):
        up, down = base.copy(), base.copy()
        up[k] += eps
        down[k] -= eps
        jac[:, k] = (
            step(up.reshape(x0.shape)) - step(down.reshape(x0.shape))
        ).ravel() / (2 * eps)
    return jac


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("g", [0.5, 2.0])
def test_stability_is_spectral_radius_of_squared_jacobian(method, g):
    # Variances of independent message perturbations propagate through the
    # elementwise square of the sweep's Jacobian; eq. (5) is that linear map,
    # so its growth factor is the spectral radius of J o J.
    W, b, c = paper_ensemble(8, 5, g, 0.05, np.random.RandomState(4))
    sol = bethe_solve(W, b, c, method=method, damping=0.5, max_sweeps=5000, tol=1e-12)
    assert sol.converged  # the linearisation is only meaningful at a fixed point
    jac = _sweep_jacobian(method, W, b, c, sol.messages)
    expected = np.max(np.abs(np.linalg.eigvals(jac**2)))
    got = stability(W, b, c, sol.messages, method=method, n_steps=2000)
    assert got == pytest.approx(expected, rel=1e-3)


def test_stability_grows_with_coupling_strength():
    # The paper's Fig. 3: lambda grows with g and crosses 1.
    lambdas = []
    for g in [0.5, 1.0, 4.0]:
        W, b, c = paper_ensemble(100, 50, g, 0.05, np.random.RandomState(0))
        sol = bethe_solve(W, b, c, damping=0.5, max_sweeps=3000)
        lambdas.append(stability(W, b, c, sol.messages))
    assert lambdas[0] < lambdas[1] < 1 < lambdas[2]


@pytest.mark.slow
@pytest.mark.parametrize("alpha", [0.2, 0.5])
def test_paper_ensemble_against_long_gibbs_chain(alpha):
    # The paper's Fig. 4(a): N = 100, v = 0.02, g = 0.55.
    n_visible = 100
    W, b, c = paper_ensemble(
        n_visible, int(alpha * n_visible), 0.55, 0.02, np.random.RandomState(7)
    )
    sol = bethe_solve(W, b, c)
    gibbs = gibbs_moments(
        W, b, c, n_chains=500, n_burn_in=500, n_samples=4000, random_state=0
    )
    m, m_hat, C = spin_stats(*gibbs)
    m_ba, m_hat_ba, C_ba = spin_stats(
        sol.mean_visible, sol.mean_hidden, sol.mean_hidden_visible
    )
    for exact, bethe in [(m, m_ba), (m_hat, m_hat_ba), (C, C_ba)]:
        assert np.sqrt(np.mean((exact - bethe) ** 2)) < 0.03
