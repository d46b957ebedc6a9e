"""The closed forms of the ensemble-learning core against independent references.

Monte Carlo with 10**6 draws (within 4 standard errors), scipy's bivariate
normal CDF, central finite differences, and a direct L-BFGS fit of the
penalised squared error.
"""

import numpy as np
import pytest
from references import reestimate
from scipy.optimize import minimize
from scipy.special import erf
from scipy.stats import multivariate_normal

from sklearn_meanfield.variational._erf_network import (
    NetworkShape,
    bvn_cdf,
    covariance_matrix,
    erf_moments,
    erf_pair_moments,
    init_params,
    natural_gradient_terms,
    negative_bound,
    output_moments,
    unpack,
    weight_groups,
)

N_MC = 1_000_000


def g_derivative(p, a):
    """``d^p/da^p erf(a / sqrt 2)``, written out independently of the module."""
    phi = np.exp(-0.5 * a * a) / np.sqrt(2.0 * np.pi)
    if p == 0:
        return erf(a / np.sqrt(2.0))
    if p == 1:
        return 2.0 * phi
    if p == 2:
        return -2.0 * a * phi
    if p == 3:
        return 2.0 * (a * a - 1.0) * phi
    return -2.0 * (a**3 - 3.0 * a) * phi


def assert_mc(value, samples):
    """``value`` within 4 standard errors of the mean of ``samples``."""
    se = samples.std() / np.sqrt(samples.size)
    assert abs(value - samples.mean()) <= 4.0 * se + 1e-12, (
        value,
        samples.mean(),
        se,
    )


@pytest.mark.parametrize("mean,var", [(0.0, 1.0), (1.3, 0.2), (-2.0, 4.0), (0.4, 0.0)])
def test_erf_moments_match_monte_carlo(mean, var):
    a = mean + np.sqrt(var) * np.random.RandomState(0).standard_normal(N_MC)
    moments = erf_moments(mean, var, order=4)
    for p in range(5):
        assert_mc(moments[p], g_derivative(p, a))


PAIR_CASES = [
    # (m1, m2, s11, s12, s22)
    (0.3, -0.7, 1.5, 1.1, 0.9),  # rho = 0.95 between the activations
    (1.2, 0.5, 0.3, -0.25, 0.4),  # strong negative correlation
    (0.0, 0.0, 2.0, 0.0, 0.5),  # independent, zero means
    (-0.8, -0.8, 0.7, 0.7, 0.7),  # a1 = a2: singular covariance (i == j)
    (2.5, -1.5, 4.0, 3.9, 4.0),  # broad and almost perfectly correlated
]


@pytest.mark.parametrize("case", PAIR_CASES)
def test_pair_jet_matches_monte_carlo(case):
    m1, m2, s11, s12, s22 = case
    rng = np.random.RandomState(1)
    cov = np.array([[s11, s12], [s12, s22]])
    # Factor that tolerates the singular case.
    vals, vecs = np.linalg.eigh(cov)
    factor = vecs * np.sqrt(np.clip(vals, 0, None))
    z = rng.standard_normal((N_MC, 2)) @ factor.T + [m1, m2]
    J = erf_pair_moments(m1, m2, s11, s12, s22, order=4)
    for p in range(5):
        for q in range(5 - p):
            assert_mc(J[p, q], g_derivative(p, z[:, 0]) * g_derivative(q, z[:, 1]))


def test_pair_jet_zero_means_arcsine_law():
    # <g g> = (2 / pi) arcsin(rho') with rho' = s12 / sqrt((1+s11)(1+s22)).
    J = erf_pair_moments(0.0, 0.0, 1.0, 0.9, 2.0, order=0)
    assert J[0, 0] == pytest.approx(2 / np.pi * np.arcsin(0.9 / np.sqrt(6.0)))


def test_bvn_cdf_matches_scipy():
    rng = np.random.RandomState(2)
    h = np.concatenate([rng.normal(scale=2, size=20), [0.0, 0.0, 1.0, -3.0]])
    k = np.concatenate([rng.normal(scale=2, size=20), [0.0, 1.5, 0.0, 2.0]])
    rho = np.concatenate([rng.uniform(-0.99, 0.99, size=20), [0.3, -0.5, 0.95, 0.0]])
    ours = bvn_cdf(h, k, rho)
    for hi, ki, ri, value in zip(h, k, rho, ours):
        ref = multivariate_normal([0, 0], [[1, ri], [ri, 1]]).cdf([hi, ki])
        assert value == pytest.approx(ref, abs=1e-7)


def _problem(covariance, seed=0, n=6, n_inputs=3, n_hidden=3, n_outputs=2):
    rng = np.random.RandomState(seed)
    X1 = np.column_stack([rng.normal(size=(n, n_inputs)), np.ones(n)])
    T = rng.normal(size=(n, n_outputs))
    shape = NetworkShape(n_inputs, n_hidden, n_outputs, covariance, rank=2)
    theta = init_params(shape, rng, init_std=0.5)
    k = shape.n_weights
    if covariance == "full":
        # Strong correlations between all weights.
        theta[2 * k :] = rng.normal(scale=0.3, size=theta.size - 2 * k)
    elif covariance == "lowrank":
        theta[2 * k :] *= 4.0
    alpha = rng.uniform(0.5, 3.0, size=n_outputs)
    groups = weight_groups(shape)
    lam = rng.uniform(0.5, 2.0, size=groups.max() + 1)[groups]
    return X1, T, shape, theta, alpha, lam


def _sample_outputs(X1, theta, shape, n_draws, seed):
    """Network outputs for weights drawn from Q, in chunks to bound memory."""
    rng = np.random.RandomState(seed)
    wbar = unpack(theta, shape)[0]
    factor = np.linalg.cholesky(covariance_matrix(theta, shape))
    H, P, M = shape.n_hidden, shape.n_aug, shape.n_outputs
    out = []
    for start in range(0, n_draws, 100_000):
        size = min(100_000, n_draws - start)
        w = wbar + rng.standard_normal((size, shape.n_weights)) @ factor.T
        U = w[:, : shape.n_u].reshape(size, H, P)
        V = w[:, shape.n_u :].reshape(size, H, M)
        hidden = erf(np.einsum("np,shp->snh", X1, U) / np.sqrt(2.0))
        out.append((np.einsum("snh,shm->snm", hidden, V), w))
    return out


@pytest.mark.parametrize("covariance", ["full", "lowrank", "diag"])
def test_output_moments_match_monte_carlo(covariance):
    X1, _, shape, theta, _, _ = _problem(covariance, n=4)
    C = covariance_matrix(theta, shape)
    corr = C / np.sqrt(np.outer(np.diag(C), np.diag(C)))
    if covariance == "full":
        assert np.max(np.abs(corr - np.eye(len(C)))) > 0.7  # strongly correlated
    first, second = output_moments(X1, theta, shape)
    f = np.concatenate(
        [chunk for chunk, _ in _sample_outputs(X1, theta, shape, N_MC, 3)]
    )
    for n in range(X1.shape[0]):
        for m in range(shape.n_outputs):
            assert_mc(first[n, m], f[:, n, m])
            assert_mc(second[n, m], f[:, n, m] ** 2)


def test_single_unit_stein_term_matches_monte_carlo():
    # One hidden unit, one point: <f> = <v g(u . x)> with v correlated with u.
    X1 = np.array([[0.7, -1.2, 1.0]])
    shape = NetworkShape(2, 1, 1, "full")
    theta = np.zeros(shape.n_params)
    theta[:4] = [0.5, 0.3, -0.2, 1.1]
    theta[4:8] = np.log([0.8, 0.6, 0.5, 0.7])
    theta[8:] = [0.3, -0.4, 0.2, 0.9, -0.6, 0.5]  # couples v with every u
    first, second = output_moments(X1, theta, shape)
    f = np.concatenate([c for c, _ in _sample_outputs(X1, theta, shape, N_MC, 4)])
    assert_mc(first[0, 0], f[:, 0, 0])
    assert_mc(second[0, 0], f[:, 0, 0] ** 2)


@pytest.mark.parametrize("covariance", ["full", "lowrank", "diag"])
def test_gradient_matches_finite_differences(covariance):
    X1, T, shape, theta, alpha, lam = _problem(covariance)
    _, grad = negative_bound(theta, X1, T, alpha, lam, shape)
    eps = 1e-6
    for j in range(theta.size):
        step = np.zeros_like(theta)
        step[j] = eps
        plus = negative_bound(theta + step, X1, T, alpha, lam, shape, False)
        minus = negative_bound(theta - step, X1, T, alpha, lam, shape, False)
        assert grad[j] == pytest.approx((plus - minus) / (2 * eps), rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("covariance", ["full", "diag"])
def test_bound_matches_monte_carlo_elbo(covariance):
    X1, T, shape, theta, alpha, lam = _problem(covariance, n=5)
    bound = -negative_bound(theta, X1, T, alpha, lam, shape, return_grad=False)
    C = covariance_matrix(theta, shape)
    wbar = unpack(theta, shape)[0]
    sign, logdet = np.linalg.slogdet(C)
    k = shape.n_weights
    entropy = 0.5 * logdet + 0.5 * k * (1 + np.log(2 * np.pi))
    terms = []
    for f, w in _sample_outputs(X1, theta, shape, N_MC, 5):
        loglik = np.sum(
            0.5 * np.log(alpha / (2 * np.pi)) - 0.5 * alpha * (T - f) ** 2, axis=(1, 2)
        )
        logprior = np.sum(0.5 * np.log(lam / (2 * np.pi)) - 0.5 * lam * w * w, axis=1)
        terms.append(loglik + logprior)
    terms = np.concatenate(terms)
    assert sign > 0 and wbar.shape == (k,)
    assert_mc(bound - entropy, terms)


def _penalised_squared_error(w, X1, T, alpha, lam, shape):
    """Direct weight-decay objective and its gradient by hand-written backprop."""
    H, P, M = shape.n_hidden, shape.n_aug, shape.n_outputs
    U = w[: shape.n_u].reshape(H, P)
    V = w[shape.n_u :].reshape(H, M)
    a = X1 @ U.T
    hidden = erf(a / np.sqrt(2))
    resid = hidden @ V - T
    value = 0.5 * np.sum(alpha * resid**2) + 0.5 * np.sum(lam * w * w)
    g_out = resid * alpha
    g_V = hidden.T @ g_out
    g_a = (g_out @ V.T) * np.sqrt(2 / np.pi) * np.exp(-0.5 * a * a)
    g_U = g_a.T @ X1
    return value, np.concatenate([g_U.ravel(), g_V.ravel()]) + lam * w


def test_zero_covariance_reduces_to_weight_decay():
    X1, T, shape, _, alpha, lam = _problem("diag", n=30, n_outputs=1)
    k = shape.n_weights
    start = init_params(shape, np.random.RandomState(7))[:k]
    log_diag = np.full(k, np.log(1e-7))  # C forced (numerically) to zero

    def ours(w):
        value, grad = negative_bound(
            np.concatenate([w, log_diag]), X1, T, alpha, lam, shape
        )
        return value, grad[:k]

    options = dict(maxiter=5000, gtol=1e-10, ftol=1e-15)
    fit = minimize(ours, start, jac=True, method="L-BFGS-B", options=options)
    direct = minimize(
        _penalised_squared_error,
        start,
        args=(X1, T, alpha, lam, shape),
        jac=True,
        method="L-BFGS-B",
        options=options,
    )
    # Same objective up to a constant: same minimiser from the same start.
    np.testing.assert_allclose(fit.x, direct.x, atol=1e-4)
    first, _ = output_moments(X1, np.concatenate([fit.x, log_diag]), shape)
    U = direct.x[: shape.n_u].reshape(shape.n_hidden, shape.n_aug)
    V = direct.x[shape.n_u :].reshape(shape.n_hidden, 1)
    np.testing.assert_allclose(first, erf(X1 @ U.T / np.sqrt(2)) @ V, atol=1e-5)


@pytest.mark.parametrize("covariance", ["full", "lowrank"])
def test_reestimation_maximises_the_bound(covariance):
    X1, T, shape, theta, alpha, _ = _problem(covariance, n=20)
    groups = weight_groups(shape)
    alpha_new, lam_groups = reestimate(theta, X1, T, shape, groups)

    def bound(a, lg):
        return -negative_bound(theta, X1, T, a, lg[groups], shape, False)

    best = bound(alpha_new, lam_groups)
    assert best >= bound(alpha, np.ones_like(lam_groups))
    for factor in (0.98, 1.02):
        for m in range(len(alpha_new)):
            a = alpha_new.copy()
            a[m] *= factor
            assert bound(a, lam_groups) < best
        for g in range(len(lam_groups)):
            lg = lam_groups.copy()
            lg[g] *= factor
            assert bound(alpha_new, lg) < best


@pytest.mark.parametrize("covariance", ["full", "lowrank", "diag"])
def test_wild_trial_points_give_finite_bound_and_gradient(covariance):
    # L-BFGS line searches can try huge steps: no NaN or overflow may escape
    # (RuntimeWarnings are errors in this test suite).
    X1, T, shape, theta, alpha, lam = _problem(covariance)
    k = shape.n_weights
    for log_sd in (-1e3, 1e3):
        wild = theta.copy()
        wild[k : 2 * k] = log_sd
        value, grad = negative_bound(wild, X1, T, alpha, lam, shape)
        assert np.isfinite(value) and np.all(np.isfinite(grad))
    wild = theta.copy()
    wild[:k] = 1e8
    value, grad = negative_bound(wild, X1, T, alpha, lam, shape)
    assert np.isfinite(value) and np.all(np.isfinite(grad))


@pytest.mark.parametrize("covariance", ["full", "diag"])
def test_covariance_gradient_matches_finite_differences(covariance):
    # natural_gradient_terms returns 2 dL/dC for the expected loss
    # L = -<log p(T, w)> (bound minus entropy); check it along random
    # symmetric directions E: dL = tr(dL/dC E).
    X1, T, shape, theta, alpha, lam = _problem(covariance)
    value, g_wbar, target = natural_gradient_terms(theta, X1, T, alpha, lam, shape)
    k = shape.n_weights
    wbar = unpack(theta, shape)[0]
    C = covariance_matrix(theta, shape)

    def loss(C_new):
        if covariance == "diag":
            params = np.concatenate([wbar, 0.5 * np.log(np.diag(C_new))])
        else:
            L = np.linalg.cholesky(C_new)
            params = np.concatenate([wbar, np.log(np.diag(L)), L[shape._tril]])
        entropy = 0.5 * np.linalg.slogdet(C_new)[1]
        return negative_bound(params, X1, T, alpha, lam, shape, False) + entropy

    rng = np.random.RandomState(11)
    eps = 1e-5
    for _ in range(3):
        E = rng.normal(size=(k, k))
        E = E + E.T
        if covariance == "diag":
            E = np.diag(np.diag(E))
        numeric = (loss(C + eps * E) - loss(C - eps * E)) / (2 * eps)
        if covariance == "diag":  # an operator: its diagonal
            analytic = 0.5 * np.sum(target.diagonal * np.diag(E))
        else:
            analytic = 0.5 * np.sum(target * E)
        assert analytic == pytest.approx(numeric, rel=1e-5, abs=1e-7)
    # The mean gradient is the one of negative_bound.
    _, grad = negative_bound(theta, X1, T, alpha, lam, shape)
    np.testing.assert_allclose(g_wbar, grad[:k], rtol=1e-12, atol=1e-12)
    assert value == pytest.approx(negative_bound(theta, X1, T, alpha, lam, shape)[0])


def test_natural_gradient_steps_reach_the_lbfgs_optimum():
    # At fixed hyperparameters the natural-gradient iteration must reach the
    # bound of a tightly converged L-BFGS fit from the same start, and end at
    # its own fixed point: precision = 2 dL/dC (Opper & Archambeau 2009).
    from sklearn_meanfield.variational._optimise import (
        _natural_step,
        precision_matrix,
    )

    X1, T, shape, start, alpha, lam = _problem("full", n=25, n_outputs=1)
    args = (X1, T, alpha, lam, shape)
    reference = minimize(
        negative_bound,
        start,
        args=args,
        jac=True,
        method="L-BFGS-B",
        options=dict(maxiter=20000, gtol=1e-10, ftol=1e-15),
    )
    theta, precision, step = start, precision_matrix(start, shape), 1.0
    for _ in range(150):
        value, g_wbar, target = natural_gradient_terms(theta, *args)
        accepted = _natural_step(
            theta, precision, value, g_wbar, target, min(1.0, 2 * step), args, shape
        )
        assert accepted is not None
        assert accepted[2] <= value  # every step raises the bound
        theta, precision, _, _, step = accepted
    value, _, target = natural_gradient_terms(theta, *args)
    assert value == pytest.approx(reference.fun, abs=5e-3)
    np.testing.assert_allclose(precision, target, atol=1e-2 * np.abs(target).max())


@pytest.mark.parametrize("covariance", ["full", "lowrank", "diag"])
def test_weighted_bound_equals_repeated_rows(covariance):
    # Integer weights repeat rows, zero drops them: value, gradient, the
    # statistics of the re-estimates and the natural-gradient target.
    X1, T, shape, theta, alpha, lam = _problem(covariance, n=6)
    sw = np.array([2.0, 0.0, 1.0, 3.0, 0.0, 1.0])
    reps = sw.astype(int)
    value_w, grad_w, stats_w = negative_bound(
        theta, X1, T, alpha, lam, shape, return_stats=True, sample_weight=sw
    )
    value_r, grad_r, stats_r = negative_bound(
        theta,
        X1.repeat(reps, axis=0),
        T.repeat(reps, axis=0),
        alpha,
        lam,
        shape,
        return_stats=True,
    )
    assert value_w == pytest.approx(value_r, rel=1e-12)
    np.testing.assert_allclose(grad_w, grad_r, rtol=1e-10, atol=1e-12)
    assert stats_w.n_samples == stats_r.n_samples == 7
    np.testing.assert_allclose(stats_w.sq_err, stats_r.sq_err, rtol=1e-12)
    np.testing.assert_allclose(stats_w.second_moment, stats_r.second_moment)
    groups = weight_groups(shape)
    for a, b in zip(
        reestimate(theta, X1, T, shape, groups, sample_weight=sw),
        reestimate(theta, X1.repeat(reps, 0), T.repeat(reps, 0), shape, groups),
    ):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    if covariance != "lowrank":
        _, g_w, P_w = natural_gradient_terms(
            theta, X1, T, alpha, lam, shape, sample_weight=sw
        )
        _, g_r, P_r = natural_gradient_terms(
            theta, X1.repeat(reps, 0), T.repeat(reps, 0), alpha, lam, shape
        )
        if covariance == "diag":  # operators: diagonal and a product
            v = np.random.RandomState(0).normal(size=shape.n_weights)
            np.testing.assert_allclose(P_w.diagonal, P_r.diagonal, rtol=1e-10)
            np.testing.assert_allclose(P_w.dot(v), P_r.dot(v), rtol=1e-10, atol=1e-12)
        else:
            np.testing.assert_allclose(P_w, P_r, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("covariance", ["lowrank", "diag"])
def test_factored_families_match_the_dense_computation(covariance):
    # The diag and lowrank families never form C or dL/dC: their local
    # moments, the products (2 dL/dC) V and the diagonal equal the dense ones.
    from sklearn_meanfield.variational._erf_network import (
        TargetOperator,
        _covariance_gradient,
        _diag_part,
        _evaluate,
        _local,
        _local_factored,
        covariance_gradient_products,
    )

    X1, T, shape, theta, alpha, lam = _problem(covariance, n=7)
    wbar, log_diag, F = unpack(theta, shape)
    dense = _local(X1, wbar, covariance_matrix(theta, shape), shape)
    factored = _local_factored(X1, wbar, _diag_part(log_diag, shape), F, shape)
    for name in ("S", "c", "D", "abar"):
        np.testing.assert_allclose(
            getattr(factored, name), getattr(dense, name), atol=1e-12
        )
    _, _, local = _evaluate(theta, X1, T, alpha, lam, shape, True, None)
    G = _covariance_gradient(local, X1, lam, shape)
    V = np.random.RandomState(3).normal(size=(shape.n_weights, 4))
    diagonal, product = covariance_gradient_products(local, X1, lam, shape, V)
    np.testing.assert_allclose(diagonal, np.diag(G), rtol=1e-12)
    np.testing.assert_allclose(product, G @ V, rtol=1e-10, atol=1e-12)
    operator = TargetOperator(local, X1, lam, shape)
    np.testing.assert_allclose(operator.dot(V[:, 0]), G @ V[:, 0], atol=1e-12)


def test_diag_mean_step_solves_the_mixed_system():
    # The conjugate-gradient direction of the diagonal family solves the
    # same system as the dense Cholesky solve it replaces.
    from sklearn_meanfield.variational._erf_network import (
        _covariance_gradient,
        _evaluate,
    )
    from sklearn_meanfield.variational._optimise import (
        _diag_direction,
        precision_matrix,
    )

    X1, T, shape, theta, alpha, lam = _problem("diag", n=30)
    precision = precision_matrix(theta, shape)
    _, g, target = natural_gradient_terms(theta, X1, T, alpha, lam, shape)
    _, _, local = _evaluate(theta, X1, T, alpha, lam, shape, True, None)
    dense = _covariance_gradient(local, X1, lam, shape)
    solved = 0
    for step in (1.0, 0.25, 1 / 16):
        mix = (1 - step) * np.diag(precision) + step * dense
        if np.all(np.linalg.eigvalsh(mix) > 0):
            solved += 1
            direction = _diag_direction(precision, target, step, g)
            np.testing.assert_allclose(
                direction, np.linalg.solve(mix, g), rtol=1e-7, atol=1e-9
            )
    assert solved >= 1


def test_output_moments_in_row_chunks_equal_one_pass(monkeypatch):
    from sklearn_meanfield.variational import _erf_network

    rng = np.random.RandomState(5)
    X1 = np.column_stack([rng.normal(size=(23, 3)), np.ones(23)])
    shape = NetworkShape(3, 3, 2, "full")
    theta = init_params(shape, rng, init_std=0.5)
    whole = output_moments(X1, theta, shape)
    # About 2 rows per chunk.
    monkeypatch.setattr(_erf_network, "_PREDICT_CHUNK_BYTES", 2 * 8 * 9 * 54)
    chunked = output_moments(X1, theta, shape)
    for a, b in zip(whole, chunked):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-15)
