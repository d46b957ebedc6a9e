"""Relaxed belief propagation (second-order TAP) for the RBM, and its training.

References: full message passing on the bipartite graph (the relaxed form is
its large-N limit), central finite differences of the TAP ``log Z``, exact
enumeration on independent units, and a plain (unoptimised) transcription of
the training step.
"""

import numpy as np
import pytest
from rbm_inputs import digits_epoch_inputs
from references import relaxed_sweep
from scipy.special import expit
from sklearn.datasets import load_digits

from sklearn_meanfield import BetheRBM
from sklearn_meanfield.bethe._exact import exact_log_likelihood
from sklearn_meanfield.bethe._learning import positive_phase, relaxed_training_epoch
from sklearn_meanfield.bethe._message_passing import bethe_solve, stability
from sklearn_meanfield.bethe._relaxed import (
    augmented_sweeps,
    cold_state,
    relaxed_iterate,
    relaxed_log_z,
    relaxed_moments,
    relaxed_solve,
    relaxed_stability,
)
from sklearn_meanfield.bethe._sampling import gibbs_hidden_step, uniform_rows


def dense_rbm(n_visible, n_hidden, gain, seed):
    """Random RBM with couplings of order 1 / sqrt(n): the dense regime."""
    rng = np.random.RandomState(seed)
    W = rng.normal(0, gain / np.sqrt(n_visible + n_hidden), (n_hidden, n_visible))
    return W, rng.normal(0, 0.5, n_visible), rng.normal(0, 0.5, n_hidden)


def discrepancies(n_visible, n_hidden, seeds=range(8)):
    """Mean |relaxed - full BP| of means, connected correlations, log Z / unit."""
    errors = []
    for seed in seeds:
        params = dense_rbm(n_visible, n_hidden, 1.5, seed)
        relaxed = relaxed_solve(*params, tol=1e-12, max_sweeps=5000)
        full = bethe_solve(*params, tol=1e-12, max_sweeps=5000)
        assert relaxed.converged and full.converged
        cov_relaxed = relaxed.mean_hidden_visible - np.outer(
            relaxed.mean_hidden, relaxed.mean_visible
        )
        cov_full = full.mean_hidden_visible - np.outer(
            full.mean_hidden, full.mean_visible
        )
        errors.append(
            [
                np.abs(relaxed.mean_visible - full.mean_visible).mean(),
                np.abs(relaxed.mean_hidden - full.mean_hidden).mean(),
                np.abs(cov_relaxed - cov_full).mean(),
                abs(relaxed.log_z - full.log_z) / (n_visible + n_hidden),
            ]
        )
    return np.mean(errors, axis=0)


def test_relaxed_form_is_the_large_n_limit_of_full_message_passing():
    # Couplings of order 1/sqrt(n): the relaxed form drops terms of order
    # w**2 = O(1/n) per message, so the two forms differ by O(1/n) per unit
    # times a constant that is small at these weak fields and couplings.
    # The bounds at 30 x 15 are a few times that size and two orders below
    # the O(1) discrepancy of a wrong update; the ratio test below is the
    # property itself, the 1/n decay.
    small = discrepancies(30, 15)
    large = discrepancies(120, 60)
    assert np.all(small < [5e-4, 5e-4, 3e-4, 5e-5])
    # Four times the units: the discrepancies shrink roughly 4-fold (1/n),
    # clearly faster than 1/sqrt(n) (a factor 2).
    assert np.all(large / small < 0.45), large / small


def test_without_couplings_the_relaxed_form_is_exact():
    rng = np.random.RandomState(0)
    W, b, c = np.zeros((3, 5)), rng.normal(size=5), rng.normal(size=3)
    # Undamped, the first sweep lands on the fixed point, the second confirms.
    solution = relaxed_solve(W, b, c, damping=0.0)
    assert solution.n_sweeps == 2
    exact = np.logaddexp(0, b).sum() + np.logaddexp(0, c).sum()
    assert solution.log_z == pytest.approx(exact, abs=1e-10)
    np.testing.assert_allclose(solution.mean_visible, expit(b))
    np.testing.assert_allclose(solution.mean_hidden, expit(c))
    np.testing.assert_allclose(
        solution.mean_hidden_visible, np.outer(expit(c), expit(b))
    )


def test_gradient_of_log_z_is_the_negative_phase():
    # At the fixed point d log Z_TAP / d(W, b, c) are the moments; checked by
    # central differences of the converged log Z (strong couplings, sd 2).
    W, b, c = dense_rbm(8, 5, 4.0, 1)
    solution = relaxed_solve(W, b, c, tol=1e-14, max_sweeps=20000)
    assert solution.converged

    def log_z(W, b, c):
        warm = relaxed_solve(
            W, b, c, state=solution.messages, tol=1e-14, max_sweeps=20000
        )
        return warm.log_z

    eps = 1e-5
    grad_W = np.zeros_like(W)
    for index in np.ndindex(W.shape):
        step = np.zeros_like(W)
        step[index] = eps
        grad_W[index] = (log_z(W + step, b, c) - log_z(W - step, b, c)) / (2 * eps)
    grad_b = [
        (log_z(W, b + eps * e, c) - log_z(W, b - eps * e, c)) / (2 * eps)
        for e in np.eye(len(b))
    ]
    grad_c = [
        (log_z(W, b, c + eps * e) - log_z(W, b, c - eps * e)) / (2 * eps)
        for e in np.eye(len(c))
    ]
    np.testing.assert_allclose(grad_W, solution.mean_hidden_visible, atol=1e-8)
    np.testing.assert_allclose(grad_b, solution.mean_visible, atol=1e-8)
    np.testing.assert_allclose(grad_c, solution.mean_hidden, atol=1e-8)
    # The second-order term matters: without it the gradient is off.
    assert (
        np.abs(grad_W - np.outer(solution.mean_hidden, solution.mean_visible)).max()
        > 1e-2
    )


def test_fixed_point_is_a_stationary_point_of_the_tap_functional():
    # relaxed_log_z away from the fixed point is the TAP functional; its
    # derivative with respect to the means vanishes at the fixed point.
    W, b, c = dense_rbm(10, 6, 3.0, 2)
    m_v, m_h = relaxed_solve(W, b, c, tol=1e-14, max_sweeps=20000).messages
    eps = 1e-6
    for i in range(len(m_v)):
        up, down = m_v.copy(), m_v.copy()
        up[i] += eps
        down[i] -= eps
        slope = (
            relaxed_log_z(W, b, c, (up, m_h)) - relaxed_log_z(W, b, c, (down, m_h))
        ) / (2 * eps)
        assert abs(slope) < 1e-7


def _after(W, W2, b, c, n_sweeps, damping):
    state = cold_state(*W.shape)
    for _ in range(n_sweeps):
        state, _ = relaxed_sweep(W, W2, b, c, state, damping)
    return state


def test_fast_iteration_equals_the_reference_sweep():
    W, b, c = dense_rbm(12, 7, 3.0, 3)
    W2 = W**2
    for damping in (0.0, 0.3):
        state = cold_state(7, 12)
        for _ in range(5):
            state, _ = relaxed_sweep(W, W2, b, c, state, damping)
        fast, n_sweeps, converged = relaxed_iterate(
            W, W2, b, c, cold_state(7, 12), damping=damping, tol=0.0, max_sweeps=5
        )
        assert n_sweeps == 5 and not converged
        for a, b_ in zip(fast, state):
            np.testing.assert_allclose(a, b_, rtol=1e-14, atol=1e-15)
        # The training kernel: biases folded into [[W, c], [b^T, 0]].
        augmented = np.block([[W, c[:, None]], [b[None, :], np.zeros((1, 1))]])
        visible, hidden = (
            np.append(cold_state(7, 12)[0], 1),
            np.append(0.5 * np.ones(7), 1),
        )
        delta = augmented_sweeps(augmented, W2, visible, hidden, 5, damping)
        np.testing.assert_allclose(visible[:12], state[0], rtol=1e-13, atol=1e-14)
        np.testing.assert_allclose(hidden[:7], state[1], rtol=1e-13, atol=1e-14)
        assert visible[12] == hidden[7] == 1.0
        _, last_delta = relaxed_sweep(
            W, W2, b, c, _after(W, W2, b, c, 4, damping), damping
        )
        assert delta == pytest.approx(last_delta, rel=1e-9)
        # With the caller's variance arrays: the same means, and the arrays
        # left holding the final means' variances.
        visible, hidden = (
            np.append(cold_state(7, 12)[0], 1),
            np.append(0.5 * np.ones(7), 1),
        )
        var_v, var_h = np.full(12, 0.25), np.full(7, np.nan)
        shared_delta = augmented_sweeps(
            augmented, W2, visible, hidden, 5, damping, variances=(var_v, var_h)
        )
        assert shared_delta == delta
        np.testing.assert_allclose(visible[:12], state[0], rtol=1e-13, atol=1e-14)
        np.testing.assert_allclose(var_v, state[0] * (1 - state[0]), rtol=1e-12)
        np.testing.assert_allclose(var_h, state[1] * (1 - state[1]), rtol=1e-12)
        # Without tracking the change: the same means, bit for bit.
        untracked = np.append(cold_state(7, 12)[0], 1), np.append(0.5 * np.ones(7), 1)
        assert (
            augmented_sweeps(augmented, W2, *untracked, 5, damping, track_change=False)
            is None
        )
        np.testing.assert_array_equal(untracked[0], visible)
        np.testing.assert_array_equal(untracked[1], hidden)


def test_stability_is_the_large_n_limit_of_the_bipartite_one():
    # Growth factor of perturbation variances per sweep: the relaxed one is
    # the largest eigenvalue of W2^T var_h^2 W2 var_v^2 (power iteration
    # here); the bipartite form's message-level factor approaches it as
    # 1/n, about 10 / n at these weights: the bounds below are twice and 1.6
    # times that at 100 and 200 visible units, tight enough that a gap that
    # did not shrink with n fails at 200.
    gaps = []
    for n_visible in (100, 200):
        W, b, c = dense_rbm(n_visible, n_visible // 2, 2.0, 4)
        relaxed = relaxed_solve(W, b, c, tol=1e-12, max_sweeps=5000)
        lam = relaxed_stability(W, relaxed.messages)
        m_v, m_h = relaxed.messages
        var_v, var_h = m_v * (1 - m_v), m_h * (1 - m_h)
        x = np.ones_like(m_v)
        for _ in range(500):
            y = (W**2).T @ (var_h**2 * ((W**2) @ (var_v**2 * x)))
            ratio = np.linalg.norm(y) / np.linalg.norm(x)
            x = y / np.linalg.norm(y)
        assert lam == pytest.approx(ratio, rel=1e-6)
        full = bethe_solve(W, b, c, tol=1e-12, max_sweeps=5000)
        gaps.append(abs(lam / stability(W, b, c, full.messages, n_steps=300) - 1))
    assert gaps[0] < 0.2 and gaps[1] < 0.08
    assert gaps[1] / gaps[0] < 0.6  # halves when n doubles


def _plain_epoch(X, slices, W, b, c, state, learning_rate, sweeps):
    """The training step written out: sweeps, moments, gradient step."""
    for batch in slices:
        for _ in range(sweeps):
            state, _ = relaxed_sweep(W, W**2, b, c, state, 0.0)
        m_v, m_h, joint = relaxed_moments(W, state)
        pos_v, pos_h, pos_joint = positive_phase(X[batch], W, c)
        W += learning_rate * (pos_joint - joint)
        b += learning_rate * (pos_v - m_v)
        c += learning_rate * (pos_h - m_h)
    return state


@pytest.mark.parametrize("sparse", [False, True])
def test_training_epoch_is_the_plain_gradient_step(sparse):
    import scipy.sparse as sp

    X, _ = load_digits(return_X_y=True)
    X = (X[:95] > 7).astype(float)
    rng = np.random.RandomState(0)
    W, b, c = rng.normal(0, 0.3, (9, 64)), rng.normal(0, 0.1, 64), np.zeros(9)
    slices = [slice(i, min(i + 10, 95)) for i in range(0, 95, 10)]  # last: 5 rows
    plain = [W.copy(), b.copy(), c.copy()]
    plain_state = _plain_epoch(X, slices, *plain, cold_state(9, 64), 0.1, 3)
    fast = [W.copy(), b.copy(), c.copy()]
    data = sp.csr_matrix(X) if sparse else X.astype(np.float32)
    fast_state, _, n_unconverged = relaxed_training_epoch(
        data,
        slices,
        *fast,
        cold_state(9, 64),
        learning_rate=0.1,
        damping=0.0,
        tol=1e-7,
        sweeps_per_update=3,
    )
    for a, b_ in zip(fast, plain):
        np.testing.assert_allclose(a, b_, rtol=1e-12, atol=1e-13)
    for a, b_ in zip(fast_state, plain_state):
        np.testing.assert_allclose(a, b_, rtol=1e-12, atol=1e-13)
    assert n_unconverged == len(slices)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_training_epoch_chains_are_gibbs_steps_at_each_update(dtype):
    # Reference: the epoch without chains, recording the parameters after
    # every update (a one-batch epoch each), and gibbs_hidden_step at them,
    # drawing its uniforms one step at a time from its own generator.  In
    # float32 the chains step at the float32 parameters, drawing the same
    # doubles.
    X, slices, params = digits_epoch_inputs()
    X, params = X.astype(dtype), [a.astype(dtype) for a in params]
    settings = dict(learning_rate=0.1, damping=0.0, tol=1e-7, sweeps_per_update=6)
    chain = (np.random.RandomState(5).uniform(size=(10, 9)) < 0.5).astype(float)
    plain, state = [a.copy() for a in params], cold_state(9, 64)
    reference_rng, reference_chain = np.random.RandomState(7), chain
    for batch in slices:
        state, _, _ = relaxed_training_epoch(X, [batch], *plain, state, **settings)
        reference_chain = gibbs_hidden_step(reference_chain, *plain, reference_rng)
    fast, rng = [a.copy() for a in params], np.random.RandomState(7)
    _, fast_chain, _ = relaxed_training_epoch(
        X,
        slices,
        *fast,
        cold_state(9, 64),
        **settings,
        hidden_chain=chain,
        random_state=rng,
    )
    assert fast_chain.dtype == dtype
    np.testing.assert_array_equal(fast_chain, reference_chain)
    assert 0 < fast_chain.mean() < 1
    # The generator is left where one draw per layer and step leaves it.
    assert rng.uniform() == reference_rng.uniform()


def test_training_epoch_parameters_do_not_depend_on_the_chains():
    # The chains are for sampling only: no chains, or chains driven by
    # different generators, give bit-identical parameters and means.
    X, slices, params = digits_epoch_inputs(n_hidden=12)
    settings = dict(learning_rate=0.1, damping=0.0, tol=1e-7, sweeps_per_update=6)
    results, chains = [], []
    for seed in (None, 0, 1):
        fitted = [a.copy() for a in params]
        state, chain, _ = relaxed_training_epoch(
            X,
            slices,
            *fitted,
            cold_state(12, 64),
            **settings,
            hidden_chain=None if seed is None else np.zeros((10, 12)),
            random_state=None if seed is None else np.random.RandomState(seed),
        )
        results.append([*fitted, *state])
        chains.append(chain)
    # Nor does skipping the convergence count change them.
    fitted = [a.copy() for a in params]
    state, _, uncounted = relaxed_training_epoch(
        X, slices, *fitted, cold_state(12, 64), **settings, count_unconverged=False
    )
    assert uncounted is None
    results.append([*fitted, *state])
    for other in results[1:]:
        for a, b_ in zip(other, results[0]):
            np.testing.assert_array_equal(a, b_)
    assert chains[0] is None and not np.array_equal(chains[1], chains[2])


@pytest.mark.parametrize("max_bytes", [16, 8 * 6 * 4, 1 << 18])
def test_uniform_rows_are_the_stream_of_single_draws(max_bytes):
    # Blocks of 1, 4 and all rows: always the rows of one draw per row, and
    # the generator left where those draws leave it.
    rng, single = np.random.RandomState(3), np.random.RandomState(3)
    rows = list(uniform_rows(rng, 10, 6, max_bytes=max_bytes))
    assert len(rows) == 10
    for row in rows:
        np.testing.assert_array_equal(row, single.uniform(size=6))
    assert rng.uniform() == single.uniform()


def test_partial_fit_is_one_relaxed_gradient_step():
    rng = np.random.RandomState(2)
    X = (rng.uniform(size=(30, 5)) < 0.3).astype(float)
    # log_partition="single": log Z is the TAP estimate at the stored
    # parameters, checked below.
    model = BetheRBM(
        n_components=3,
        learning_rate=0.2,
        random_state=0,
        tol=1e-13,
        log_partition="single",
    )
    model.partial_fit(X[:1])
    W, b, c = (
        model.components_.copy(),
        model.intercept_visible_.copy(),
        model.intercept_hidden_.copy(),
    )
    model.max_sweeps = 2000
    model.sweeps_per_update = 2000  # converged before the step
    model.partial_fit(X)
    reference = relaxed_solve(W, b, c, tol=1e-13, max_sweeps=20000)
    pos_v, pos_h, pos_joint = positive_phase(X, W, c)
    np.testing.assert_allclose(
        model.components_,
        W + 0.2 * (pos_joint - reference.mean_hidden_visible),
        atol=1e-9,
    )
    np.testing.assert_allclose(
        model.intercept_visible_, b + 0.2 * (pos_v - reference.mean_visible), atol=1e-9
    )
    np.testing.assert_allclose(
        model.intercept_hidden_, c + 0.2 * (pos_h - reference.mean_hidden), atol=1e-9
    )
    # Its state: the means, and the TAP quantities of the stored parameters.
    m_v, m_h = model.messages_
    assert m_v.shape == (5,) and m_h.shape == (3,)
    params = (model.components_, model.intercept_visible_, model.intercept_hidden_)
    assert model.log_partition_function() == pytest.approx(
        relaxed_solve(*params, tol=1e-13, max_sweeps=20000).log_z, abs=1e-9
    )
    assert model.stability_ == pytest.approx(
        relaxed_stability(model.components_, model.messages_)
    )


def test_weak_model_scores_like_the_exact_likelihood():
    # 6 visible and 2 hidden units, weak couplings: score_samples (TAP log Z)
    # is within 1e-3 of the exact log-likelihood and sums to ~1.
    rng = np.random.RandomState(5)
    W, b, c = rng.normal(0, 0.3, (2, 6)), rng.normal(0, 0.5, 6), rng.normal(size=2)
    V = np.array([[i >> k & 1 for k in range(6)] for i in range(64)], dtype=float)
    model = BetheRBM(n_components=2, n_iter=1, random_state=0).fit(V)
    model.components_, model.intercept_visible_, model.intercept_hidden_ = W, b, c
    scores = model.score_samples(V)
    np.testing.assert_allclose(scores, exact_log_likelihood(V, W, b, c), atol=1e-3)
    assert np.exp(scores).sum() == pytest.approx(1.0, abs=2e-3)


@pytest.mark.parametrize(
    "first, second", [("relaxed", "bipartite"), ("bipartite", "relaxed")]
)
def test_switching_method_between_partial_fits_starts_cold(first, second):
    # The two forms keep different states; a partial_fit after set_params
    # (method=...) must not feed one form's messages to the other.
    X = (np.random.RandomState(0).uniform(size=(20, 6)) < 0.5).astype(float)
    model = BetheRBM(n_components=3, random_state=0, method=first).partial_fit(X)
    model.set_params(method=second).partial_fit(X)
    reference = BetheRBM(n_components=3, random_state=0, method=first).partial_fit(X)
    reference.set_params(method=second)
    del reference.messages_  # a model without messages starts cold
    reference.partial_fit(X)
    np.testing.assert_array_equal(model.components_, reference.components_)
    for a, b in zip(model.messages_, reference.messages_):
        np.testing.assert_array_equal(a, b)
