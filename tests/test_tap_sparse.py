"""The FITC (inducing-point) posterior of tap/_sparse.py against brute force.

References used here, all independent of the module's Woodbury form: the
dense posterior on the explicit n x n FITC prior matrix (plain numpy
inverses, or ``KernelPosterior``), exact TAP on the full kernel when the
inducing points are the training inputs, the closed-form marginal likelihood
of Gaussian-process regression, central differences of the evidence, and
refits without a point for the leave-one-out cavities.
"""

import tracemalloc

import numpy as np
import pytest
from dask_helpers import local_dask_client
from references import (
    GaussianLikelihood,
    fitc_evidence_gradient,
    fitc_inducing_gradient,
    fitc_kernel_gradient,
    fitc_kernel_inducing_gradient,
)
from scipy.linalg import LinAlgError
from scipy.stats import multivariate_normal
from sklearn.gaussian_process.kernels import RBF as _RBF
from sklearn.gaussian_process.kernels import ConstantKernel as _C

from sklearn_meanfield.tap._ep import expectation_propagation
from sklearn_meanfield.tap._likelihoods import make_likelihood
from sklearn_meanfield.tap._mean_field import PriorVariance, mean_field_iteration
from sklearn_meanfield.tap._posterior import KernelPosterior
from sklearn_meanfield.tap._sparse import (
    FITCPosterior,
    fitc_evidence_adjoints,
    kernel_second_argument_gradient,
)


def _rbf(A, B, length=0.8, amplitude=1.3):
    sq = np.sum((A[:, None, :] - B[None, :, :]) ** 2, axis=-1)
    return amplitude * np.exp(-0.5 * sq / length**2)


def _data(n, seed, dim=2):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, dim))
    f = np.sin(2 * X[:, 0]) + X[:, 1] ** 2 - 1.0
    flip = rng.uniform(size=n) < 0.1
    t = np.where((f > 0) ^ flip, 1.0, -1.0)
    return X, t


def _dense_fitc(X, Z, length=0.8, amplitude=1.3):
    """The explicit FITC prior Q + diag(K - Q), without any jitter."""
    K_nm, K_mm = _rbf(X, Z, length, amplitude), _rbf(Z, Z, length, amplitude)
    Q = K_nm @ np.linalg.solve(K_mm, K_nm.T)
    return Q + np.diag(amplitude - np.diag(Q))


def _sparse(X, Z, length=0.8, amplitude=1.3, **kwargs):
    kwargs.setdefault("jitter", 0.0)
    return FITCPosterior(
        _rbf(Z, Z, length, amplitude),
        _rbf(X, Z, length, amplitude),
        np.full(len(X), amplitude),
        **kwargs,
    )


def _brute_posterior(K, tau, nu):
    """Sigma = (K^-1 + S)^-1, mu = Sigma nu, log|I + K S|, by plain inverses."""
    Sigma = np.linalg.inv(np.linalg.inv(K) + np.diag(tau))
    sign, logdet = np.linalg.slogdet(np.eye(len(tau)) + K * tau[None, :])
    assert sign > 0
    return Sigma, Sigma @ nu, logdet


# ------------------------------------------------ the posterior of given sites


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_inducing_points_at_the_data_give_exact_tap(seed):
    # m = n, Z = X: Q = K and D = 0, so FITC is the full GP.
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(30, 2))
    K = _rbf(X, X, length=0.5)
    sparse = FITCPosterior(K, K, np.diag(K), jitter=1e-13)
    tau, nu = rng.uniform(0.1, 5.0, 30), rng.normal(size=30)
    got, want = sparse.solve(tau, nu), KernelPosterior(K).solve(tau, nu)
    np.testing.assert_allclose(got.mean, want.mean, rtol=0, atol=1e-8)
    np.testing.assert_allclose(got.var, want.var, rtol=1e-8, atol=1e-10)
    assert abs(got.logdet - want.logdet) < 1e-8
    assert np.max(sparse.d) < 1e-9


@pytest.mark.parametrize("negative", [0, 3])
def test_solve_equals_the_dense_fitc_posterior(negative):
    X, _ = _data(60, 3)
    Z = X[:9] + 0.1
    K = _dense_fitc(X, Z)
    rng = np.random.default_rng(4)
    tau, nu = rng.uniform(0.05, 3.0, 60), rng.normal(size=60)
    tau[:negative] = -0.15  # label-noise sites
    Sigma, mean, logdet = _brute_posterior(K, tau, nu)
    assert np.min(np.linalg.eigvalsh(np.linalg.inv(K) + np.diag(tau))) > 0
    got = _sparse(X, Z, block_size=16).solve(tau, nu)
    np.testing.assert_allclose(got.mean, mean, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(got.var, np.diag(Sigma), rtol=1e-9)
    assert abs(got.logdet - logdet) < 1e-9 * max(1.0, abs(logdet))
    # The FITC diagonal is the prior variance the inducing values miss.
    posterior = _sparse(X, Z)
    Q = _rbf(X, Z) @ np.linalg.solve(_rbf(Z, Z), _rbf(Z, X))
    np.testing.assert_allclose(posterior.d, 1.3 - np.diag(Q), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(posterior.matvec(nu), K @ nu, rtol=1e-10)
    index = np.arange(0, 60, 3)
    part = posterior.subset(index).solve(tau[index], nu[index])
    Sigma_part, mean_part, _ = _brute_posterior(
        K[np.ix_(index, index)], *(tau[index], nu[index])
    )
    np.testing.assert_allclose(part.mean, mean_part, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(part.var, np.diag(Sigma_part), rtol=1e-9)
    np.testing.assert_allclose(posterior.prior_var, np.diag(K), rtol=1e-12)


def test_improper_sites_are_refused_exactly_when_the_dense_posterior_is():
    # Both ways of failing: 1 + d_i tau_i <= 0 (one very negative site of a
    # point far from the inducing inputs) and A = I + U^T G U indefinite
    # (many mildly negative sites); solve raises LinAlgError iff
    # K^-1 + S is not positive definite.
    X, _ = _data(40, 5)
    Z = X[:6]
    K = _dense_fitc(X, Z)
    posterior = _sparse(X, Z)
    rng = np.random.default_rng(6)
    base = rng.uniform(0.1, 1.0, 40)
    far = int(np.argmax(posterior.d))
    outcomes = set()
    for scale in np.geomspace(0.01, 10.0, 25):
        for pattern in ("one", "many"):
            tau = base.copy()
            if pattern == "one":
                tau[far] = -scale / posterior.d[far]
            else:
                tau[::2] = -0.2 * scale
            proper = np.min(np.linalg.eigvalsh(np.linalg.inv(K) + np.diag(tau))) > 0
            try:
                posterior.solve(tau, np.zeros(40))
                refused = False
            except LinAlgError:
                refused = True
            assert refused == (not proper)
            outcomes.add((pattern, proper))
    assert outcomes == {(p, q) for p in ("one", "many") for q in (True, False)}


def test_block_size_does_not_change_results():
    X, t = _data(45, 7)
    Z = X[:8] * 0.9
    rng = np.random.default_rng(8)
    tau, nu = rng.uniform(-0.05, 2.0, 45), rng.normal(size=45)
    reference = _sparse(X, Z, block_size=45)
    solutions = [_sparse(X, Z, block_size=b).solve(tau, nu) for b in (1, 7, 45)]
    adjoints = [fitc_evidence_adjoints(s) for s in solutions]
    np.testing.assert_allclose(reference.U, _sparse(X, Z, block_size=1).U, rtol=1e-14)
    for got, grads in zip(solutions[:2], adjoints[:2]):
        np.testing.assert_allclose(got.mean, solutions[2].mean, rtol=1e-12)
        np.testing.assert_allclose(got.var, solutions[2].var, rtol=1e-12)
        assert abs(got.logdet - solutions[2].logdet) < 1e-12
        for a, b in zip(grads, adjoints[2]):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("negative", [False, True])
def test_predictive_at_new_points_equals_the_dense_joint_model(negative):
    # The FITC prior over training and new fields jointly: cross-covariances
    # Q (through the inducing values only), each new field with its own
    # variance k_** (Quinonero-Candela and Rasmussen 2005, sec. 6).  Given the
    # sites, f_* | sites has mean Q_*n K^-1 mu and variance
    # k_** - Q_*n K^-1 Q_n* + Q_*n K^-1 Sigma K^-1 Q_n*.
    X, _ = _data(50, 9)
    Z, X_new = X[:7] - 0.05, _data(11, 10)[0]
    K = _dense_fitc(X, Z)
    K_mm = _rbf(Z, Z)
    Q_cross = _rbf(X, Z) @ np.linalg.solve(K_mm, _rbf(Z, X_new))  # Q_n*
    rng = np.random.default_rng(11)
    tau, nu = rng.uniform(0.1, 2.0, 50), rng.normal(size=50)
    if negative:
        tau[:4] = -0.1
    Sigma, mean, _ = _brute_posterior(K, tau, nu)
    K_inv = np.linalg.inv(K)
    H = K_inv @ Q_cross
    want_mean = H.T @ mean
    want_var = 1.3 - np.sum(Q_cross * H, 0) + np.sum(H * (Sigma @ H), 0)
    solution = _sparse(X, Z).solve(tau, nu)
    K_cross = _rbf(Z, X_new)
    got_mean, got_var = solution.predict(K_cross, np.full(11, 1.3))
    np.testing.assert_allclose(got_mean, want_mean, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(got_var, want_var, rtol=1e-9)
    np.testing.assert_allclose(
        K_cross.T @ solution.inducing_alpha, want_mean, atol=1e-10
    )
    reduction = solution.variance_reduction(K_cross)
    np.testing.assert_allclose(1.3 - reduction, want_var, rtol=1e-9)
    # A released solution (no n x m posterior) predicts the same.
    solution.release()
    assert solution.posterior is None
    np.testing.assert_array_equal(
        solution.predict(K_cross, np.full(11, 1.3))[1], got_var
    )
    with pytest.raises(ValueError, match="released"):
        fitc_evidence_adjoints(solution)


# ------------------------------------------------------------- EP on FITC


@pytest.mark.parametrize(
    "likelihood, label_noise",
    [
        ("probit", 0.0),
        ("logistic", 0.0),
        ("probit", 0.1),
        ("logistic", 0.1),
        ("step", 0.0),
        ("step", 0.1),
    ],
)
def test_ep_on_fitc_equals_ep_on_the_dense_fitc_prior(likelihood, label_noise):
    X, t = _data(150, 12)
    Z = X[:20] + 0.05
    like = make_likelihood(likelihood, label_noise)
    options = dict(tol=1e-10, max_iter=1000)
    sparse = expectation_propagation(_sparse(X, Z), t, like, **options)
    dense = expectation_propagation(
        KernelPosterior(_dense_fitc(X, Z)), t, like, **options
    )
    assert sparse.converged and dense.converged
    if label_noise:
        assert np.any(sparse.tau < 0)  # the negative sites were exercised
    np.testing.assert_allclose(sparse.tau, dense.tau, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(sparse.nu, dense.nu, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(sparse.cavity_mean, dense.cavity_mean, atol=1e-6)
    np.testing.assert_allclose(sparse.cavity_var, dense.cavity_var, rtol=1e-6)
    assert abs(sparse.log_evidence - dense.log_evidence) < 1e-6


def test_weighted_ep_on_fitc_equals_the_dense_fitc_prior():
    # sample_weight's sites (power EP on p**w) see only the posterior's
    # marginals: the same fixed point, evidence and leave-one-out.
    X, t = _data(80, 26)
    Z = X[:12] + 0.05
    w = np.random.default_rng(27).integers(1, 4, size=80).astype(float)
    like = make_likelihood("probit", 0.05)
    options = dict(tol=1e-10, max_iter=1000, site_weights=w)
    sparse = expectation_propagation(_sparse(X, Z), t, like, **options)
    dense = expectation_propagation(
        KernelPosterior(_dense_fitc(X, Z)), t, like, **options
    )
    assert sparse.converged and dense.converged
    np.testing.assert_allclose(sparse.tau, dense.tau, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(sparse.log_z, dense.log_z, atol=1e-7)
    assert abs(sparse.log_evidence - dense.log_evidence) < 1e-6


@pytest.mark.parametrize("likelihood", ["probit", "logistic"])
def test_ep_with_inducing_points_at_the_data_is_exact_tap(likelihood):
    # Sites, evidence and leave-one-out of the whole EP run, m = n.
    X, t = _data(40, 19)
    K = _rbf(X, X, length=0.5)
    like = make_likelihood(likelihood, 0.0)
    options = dict(tol=1e-10, max_iter=1000)
    sparse = FITCPosterior(K, K, np.diag(K), jitter=1e-13)
    got = expectation_propagation(sparse, t, like, **options)
    want = expectation_propagation(KernelPosterior(K), t, like, **options)
    assert got.converged and want.converged
    np.testing.assert_allclose(got.mean, want.mean, atol=1e-7)
    np.testing.assert_allclose(got.cavity_mean, want.cavity_mean, atol=1e-7)
    np.testing.assert_allclose(got.cavity_var, want.cavity_var, rtol=1e-7)
    np.testing.assert_allclose(got.log_z, want.log_z, atol=1e-7)
    assert abs(got.log_evidence - want.log_evidence) < 1e-7


def test_naive_mean_field_on_fitc_equals_the_dense_fitc_prior():
    # mean_field_iteration uses matvec and solve of the posterior.
    X, t = _data(80, 20)
    Z = X[:10]
    like = make_likelihood("probit", 0.0)
    K = _dense_fitc(X, Z)
    got = mean_field_iteration(
        _sparse(X, Z), t, like, PriorVariance(np.diag(K).copy()), tol=1e-10
    )
    want = mean_field_iteration(
        KernelPosterior(K), t, like, PriorVariance(np.diag(K).copy()), tol=1e-10
    )
    assert got.converged and want.converged
    np.testing.assert_allclose(got.alpha, want.alpha, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(got.var, want.var, rtol=1e-8)


def test_gaussian_sites_give_the_fitc_regression_marginal_likelihood():
    # EP is exact for a Gaussian likelihood: log N(y; 0, Q + D + s2 I).
    X, _ = _data(40, 13)
    Z = X[:6]
    y = np.sin(X[:, 0]) + 0.3 * X[:, 1]
    solution = expectation_propagation(
        _sparse(X, Z), y, GaussianLikelihood(0.2), tol=1e-12
    )
    K = _dense_fitc(X, Z)
    exact = multivariate_normal(np.zeros(40), K + 0.2 * np.eye(40)).logpdf(y)
    assert abs(solution.log_evidence - exact) < 1e-9


def test_cavity_is_the_sparse_models_prediction_without_the_site():
    # The free leave-one-out: the cavity of h_i is the FITC predictive at x_i
    # of the posterior with site i removed (other sites kept), exactly.
    X, t = _data(60, 14)
    Z = X[:10] + 0.1
    posterior = _sparse(X, Z)
    solution = expectation_propagation(
        posterior, t, make_likelihood("probit", 0.1), tol=1e-10
    )
    K_cross = _rbf(Z, X)
    for i in (0, 17, 42, 59):
        tau, nu = solution.tau.copy(), solution.nu.copy()
        tau[i] = nu[i] = 0.0
        mean, var = posterior.solve(tau, nu).predict(K_cross[:, [i]], [1.3])
        assert abs(mean[0] - solution.cavity_mean[i]) < 1e-9
        assert abs(var[0] - solution.cavity_var[i]) < 1e-9 * var[0]


def test_leave_one_out_is_close_to_refits_of_the_sparse_model():
    # Refitting without point i (same inducing inputs and kernel) moves the
    # other sites, which the cavity ignores: close, not equal.  The bounds
    # are those of exact TAP against its refits (test_tap_gpc.py): the
    # sparse prior changes the model, not the cavity argument.
    X, t = _data(50, 15)
    Z = X[:12] + 0.1
    like = make_likelihood("probit", 0.0)
    solution = expectation_propagation(_sparse(X, Z), t, like, tol=1e-10)
    loo = np.exp(solution.log_z)
    K_cross = _rbf(Z, X)
    gaps = []
    for i in range(50):
        keep = np.arange(50) != i
        refit = expectation_propagation(_sparse(X[keep], Z), t[keep], like, tol=1e-10)
        mean, var = refit.posterior.predict(K_cross[:, [i]], [1.3])
        gaps.append(abs(np.exp(like.moments(t[[i]], mean, var)[0][0]) - loo[i]))
    assert np.max(gaps) < 0.02
    assert np.mean(gaps) < 0.005


# ------------------------------------------------- the evidence gradient


def test_adjoints_equal_the_dense_gradient_matrix():
    # 1/2 tr(R dK) with R = alpha alpha^T - (S - S Sigma S) from dense
    # inverses, pushed through Q = K_nm K_mm^-1 K_mn and D = diag(K_nn - Q).
    X, t = _data(40, 16)
    Z = X[:7] + 0.1
    solution = expectation_propagation(
        _sparse(X, Z), t, make_likelihood("probit", 0.1), tol=1e-12
    )
    K = _dense_fitc(X, Z)
    tau, alpha = solution.tau, solution.alpha
    Sigma = np.linalg.inv(np.linalg.inv(K) + np.diag(tau))
    R = np.outer(alpha, alpha) - (np.diag(tau) - tau[:, None] * Sigma * tau[None, :])
    R_off = R - np.diag(np.diag(R))
    B = np.linalg.solve(_rbf(Z, Z), _rbf(Z, X))
    G_mm, G_nm, g_nn = fitc_evidence_adjoints(solution)
    np.testing.assert_allclose(G_nm, R_off @ B.T, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(G_mm, -0.5 * B @ R_off @ B.T, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(g_nn, 0.5 * np.diag(R), rtol=1e-8, atol=1e-10)


def _rbf_derivatives(X, Z, length, amplitude):
    """RBF derivatives in (log length, log amplitude) and in Z (first argument)."""
    K_nm, K_mm = _rbf(X, Z, length, amplitude), _rbf(Z, Z, length, amplitude)
    sq_nm = np.sum((X[:, None] - Z[None]) ** 2, -1) / length**2
    sq_mm = np.sum((Z[:, None] - Z[None]) ** 2, -1) / length**2
    d_mm = np.stack([K_mm * sq_mm, K_mm], -1)
    d_nm = np.stack([K_nm * sq_nm, K_nm], -1)
    d_nn = np.column_stack([np.zeros(len(X)), np.full(len(X), amplitude)])
    # d k(z_j, y) / d z_j = -k (z_j - y) / length^2.
    dZ_nm = K_nm[:, :, None] * (X[:, None] - Z[None]) / length**2
    dZ_mm = -K_mm[:, :, None] * (Z[:, None] - Z[None]) / length**2
    return d_mm, d_nm, d_nn, dZ_nm, dZ_mm


@pytest.mark.parametrize(
    "likelihood, label_noise", [("probit", 0.0), ("logistic", 0.1)]
)
def test_evidence_gradient_against_central_differences(likelihood, label_noise):
    X, t = _data(40, 17)
    Z0 = X[:5] + 0.1
    like = make_likelihood(likelihood, label_noise)

    def fit(log_length, log_amplitude, Z):
        length, amplitude = np.exp(log_length), np.exp(log_amplitude)
        return expectation_propagation(
            _sparse(X, Z, length, amplitude, jitter=1e-10),
            t,
            like,
            tol=1e-13,
            max_iter=2000,
        )

    theta = np.array([np.log(0.7), np.log(1.5)])
    solution = fit(*theta, Z0)
    assert solution.converged
    d_mm, d_nm, d_nn, dZ_nm, dZ_mm = _rbf_derivatives(X, Z0, 0.7, 1.5)
    gradient = fitc_evidence_gradient(solution, d_mm, d_nm, d_nn)
    z_gradient = fitc_inducing_gradient(fitc_evidence_adjoints(solution), dZ_nm, dZ_mm)
    h = 1e-5
    for j in range(2):
        e = np.eye(2)[j] * h
        numeric = (
            fit(*(theta + e), Z0).log_evidence - fit(*(theta - e), Z0).log_evidence
        ) / (2 * h)
        assert abs(gradient[j] - numeric) < 1e-6 * max(1.0, abs(numeric))
    for j, k in [(0, 0), (1, 1), (3, 0), (4, 1)]:
        E = np.zeros_like(Z0)
        E[j, k] = h
        numeric = (
            fit(*theta, Z0 + E).log_evidence - fit(*theta, Z0 - E).log_evidence
        ) / (2 * h)
        assert abs(z_gradient[j, k] - numeric) < 1e-6 * max(1.0, abs(numeric))


def test_kernel_gradient_by_blocks_against_central_differences():
    # A scikit-learn kernel with ARD length scales and a white-noise term:
    # derivatives from the stacked inputs [X_b; Z], block by block.
    from sklearn.gaussian_process.kernels import RBF, WhiteKernel
    from sklearn.gaussian_process.kernels import ConstantKernel as C

    X, t = _data(40, 21)
    Z = X[:6] + 0.1
    like = make_likelihood("probit", 0.05)
    kernel = C(1.2) * RBF([0.8, 1.1]) + WhiteKernel(0.1)

    def fit(theta):
        posterior = FITCPosterior.from_kernel(
            kernel.clone_with_theta(theta), X, Z, jitter=1e-10, block_size=7
        )
        return expectation_propagation(posterior, t, like, tol=1e-13, max_iter=2000)

    solution = fit(kernel.theta)
    adjoints = fitc_evidence_adjoints(solution)
    gradient = fitc_kernel_gradient(adjoints, kernel, X, Z, block_size=7)
    np.testing.assert_allclose(
        gradient, fitc_kernel_gradient(adjoints, kernel, X, Z), rtol=1e-12
    )
    h = 1e-5
    for j in range(len(kernel.theta)):
        e = np.eye(len(kernel.theta))[j] * h
        numeric = (
            fit(kernel.theta + e).log_evidence - fit(kernel.theta - e).log_evidence
        ) / (2 * h)
        assert abs(gradient[j] - numeric) < 1e-6 * max(1.0, abs(numeric))


def _kernels():
    from sklearn.gaussian_process import kernels as k

    return [
        k.ConstantKernel(1.5) * k.RBF([0.7, 1.3]) + k.WhiteKernel(0.2),
        k.Matern(0.9, nu=0.5),
        k.Matern([0.8, 1.2], nu=1.5),
        k.ConstantKernel(0.7) * k.Matern(1.1, nu=2.5),
        k.Matern(0.9, nu=np.inf),
        k.RationalQuadratic(0.8, alpha=1.7),
        k.DotProduct(0.5) ** 2 + k.RBF(1.0),
    ]


@pytest.mark.parametrize("kernel", _kernels(), ids=lambda k: type(k).__name__)
def test_kernel_input_derivatives_against_central_differences(kernel):
    rng = np.random.default_rng(22)
    A, B = rng.normal(size=(5, 2)), rng.normal(size=(4, 2))
    got = kernel_second_argument_gradient(kernel, A, B)
    h = 1e-6
    for j in range(4):
        for k in range(2):
            E = np.zeros_like(B)
            E[j, k] = h
            numeric = (kernel(A, B + E) - kernel(A, B - E))[:, j] / (2 * h)
            np.testing.assert_allclose(got[:, j, k], numeric, rtol=1e-6, atol=1e-8)


def _more_kernels():
    from sklearn.gaussian_process import kernels as k

    return _kernels() + [
        k.RationalQuadratic(0.8, alpha=1.7) * k.ConstantKernel(0.5, "fixed"),
        k.RBF([0.7, 1.3], "fixed") + k.Matern([0.8, 1.2], nu=0.5),
        k.Matern(1.1, nu=2.5) ** 1.5 + k.WhiteKernel(0.3),
    ]


@pytest.mark.parametrize("kernel", _more_kernels(), ids=lambda k: type(k).__name__)
def test_cross_covariance_theta_derivatives_equal_scikit_learns(kernel):
    # scikit-learn differentiates k(C, C) only: its cross block and diagonal
    # on the stacked inputs C = [A; B] are the reference.
    from sklearn_meanfield.tap._sparse import _theta_gradient

    rng = np.random.default_rng(24)
    A, B = rng.normal(size=(6, 2)), rng.normal(size=(4, 2))
    _, stacked = kernel(np.vstack([A, B]), eval_gradient=True)
    value, cross = _theta_gradient(kernel, A, B)
    np.testing.assert_allclose(value, kernel(A, B), rtol=1e-12)
    np.testing.assert_allclose(cross, stacked[:6, 6:], rtol=1e-10, atol=1e-12)
    value, diag = _theta_gradient(kernel, A, None)
    np.testing.assert_allclose(value, kernel.diag(A), rtol=1e-12)
    np.testing.assert_allclose(
        diag, stacked[np.arange(6), np.arange(6)], rtol=1e-10, atol=1e-12
    )


def test_kernel_gradient_analytic_and_stacked_agree(monkeypatch):
    # Both paths of fitc_kernel_gradient on one solution: the analytic
    # cross-derivatives, and the stacked inputs [X_b; Z] that kernels
    # without them take (forced here).
    from sklearn.gaussian_process import kernels as k

    from sklearn_meanfield.tap import _sparse

    X, t = _data(50, 25)
    Z = X[:6] + 0.1
    kernel = k.ConstantKernel(1.3) * k.Matern([0.8, 1.2], nu=1.5) + k.WhiteKernel(0.1)
    solution = expectation_propagation(
        FITCPosterior.from_kernel(kernel, X, Z), t, make_likelihood("probit", 0.0)
    )
    adjoints = fitc_evidence_adjoints(solution)
    analytic = fitc_kernel_gradient(adjoints, kernel, X, Z, block_size=7)

    def unavailable(*args):
        raise NotImplementedError

    monkeypatch.setattr(_sparse, "_theta_gradient", unavailable)
    stacked = fitc_kernel_gradient(adjoints, kernel, X, Z, block_size=7)
    np.testing.assert_allclose(analytic, stacked, rtol=1e-10, atol=1e-12)


def test_inducing_gradient_of_a_scikit_learn_kernel_against_central_differences():
    from sklearn.gaussian_process.kernels import ConstantKernel as C
    from sklearn.gaussian_process.kernels import Matern

    X, t = _data(40, 23)
    Z0 = X[:5] + 0.1
    like = make_likelihood("logistic", 0.0)
    kernel = C(1.4) * Matern([0.8, 1.2], nu=2.5)

    def fit(Z):
        posterior = FITCPosterior.from_kernel(kernel, X, Z, jitter=1e-10)
        return expectation_propagation(posterior, t, like, tol=1e-13, max_iter=2000)

    adjoints = fitc_evidence_adjoints(fit(Z0))
    gradient = fitc_kernel_inducing_gradient(adjoints, kernel, X, Z0, block_size=9)
    h = 1e-5
    for j, k in [(0, 0), (1, 1), (2, 0), (4, 1)]:
        E = np.zeros_like(Z0)
        E[j, k] = h
        numeric = (fit(Z0 + E).log_evidence - fit(Z0 - E).log_evidence) / (2 * h)
        assert abs(gradient[j, k] - numeric) < 1e-6 * max(1.0, abs(numeric))


# ---------------------------------------------------------------- memory


@pytest.mark.parametrize("block_size", [None, 1000])
def test_solve_never_allocates_an_n_by_n_matrix(block_size):
    # One n x n matrix would be 8 n^2 = 3.2 GB.  What is allocated: U (n x m,
    # the unit below), the adjoint G_nm (another) and temporaries of one row
    # block each (the default block holds all 20000 rows of m = 50).
    n, m = 20000, 50
    unit = 8 * n * m
    rng = np.random.default_rng(18)
    X, Z = rng.normal(size=(n, 2)), rng.normal(size=(m, 2))
    K_nm, K_mm = _rbf(X, Z), _rbf(Z, Z)
    tau, nu = rng.uniform(-0.01, 2.0, n), rng.normal(size=n)
    block = 1.0 if block_size is None else block_size / n
    peaks = []
    tracemalloc.start()
    try:
        posterior = FITCPosterior(K_mm, K_nm, np.full(n, 1.3), block_size=block_size)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.reset_peak()
        solution = posterior.solve(tau, nu)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.reset_peak()
        fitc_evidence_adjoints(solution)
        peaks.append(tracemalloc.get_traced_memory()[1])
    finally:
        tracemalloc.stop()
    assert np.all(solution.var > 0)
    vectors = 10 * 8 * n  # d, prior_var, means, variances, ...
    assert peaks[0] < (1 + 1.2 * block) * unit + vectors
    assert peaks[1] < (1 + 1.5 * block) * unit + vectors
    assert peaks[2] < (2 + 4 * block) * unit + vectors
    assert max(peaks) < 8 * n * n / 50


# ------------------------------------------------------- blocks elsewhere


def test_ep_and_gradient_with_blocks_on_a_dask_cluster_equal_the_local_ones():
    # Scale-out: each worker whitens and keeps its
    # own rows (DaskBlocks), EP's sweeps and the evidence gradient map over
    # the blocks and only m x m summaries (and the blocks' site vectors)
    # travel; the same partition here (LocalBlocks) gives the same numbers.
    pytest.importorskip("distributed")
    from distributed import get_task_stream
    from sklearn.gaussian_process.kernels import RBF
    from sklearn.gaussian_process.kernels import ConstantKernel as C

    from sklearn_meanfield.tap._sparse import DaskBlocks, fitc_search_gradient

    X, t = _data(300, 28)
    Z = X[:15] + 0.05
    kernel = C(1.3) * RBF(0.8)
    like = make_likelihood("probit", 0.1)
    local = expectation_propagation(
        FITCPosterior.from_kernel(kernel, X, Z, block_size=64), t, like, tol=1e-10
    )
    local_gradient = fitc_search_gradient(local, kernel, Z, inducing=True)
    with local_dask_client(n_workers=2, threads_per_worker=1) as client:
        with get_task_stream(client) as stream:
            posterior = FITCPosterior.from_kernel(
                kernel, X, Z, executor=DaskBlocks(client, 300, 64)
            )
            remote = expectation_propagation(posterior, t, like, tol=1e-10)
            remote_gradient = fitc_search_gradient(remote, kernel, Z, inducing=True)
        # The blocks are futures: their U never came here.
        assert all(type(part).__name__ == "Future" for part in posterior.parts)
    assert remote.n_iter == local.n_iter
    np.testing.assert_allclose(remote.mean, local.mean, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(remote.var, local.var, rtol=1e-12)
    np.testing.assert_allclose(remote.cavity_mean, local.cavity_mean, rtol=1e-11)
    assert remote.log_evidence == pytest.approx(local.log_evidence, rel=1e-12)
    np.testing.assert_allclose(remote_gradient[0], local_gradient[0], rtol=1e-10)
    np.testing.assert_allclose(remote_gradient[1], local_gradient[1], rtol=1e-10)
    # Against the whole adjoints (an independent contraction).
    np.testing.assert_allclose(
        remote_gradient[0],
        fitc_kernel_gradient(fitc_evidence_adjoints(local), kernel, X, Z),
        rtol=1e-9,
    )
    # Every pass ran as one task a block (5 blocks), on both workers.
    counts = {}
    workers = set()
    for task in stream.data:
        name = task["key"].split("-")[0]  # the function's name, then a uuid
        counts[name] = counts.get(name, 0) + 1
        workers.add(task["worker"])
    assert counts["_whiten_task"] == 5
    assert counts["_statistics_task"] % 5 == 0 and counts["_statistics_task"] >= 5
    assert counts["_marginals_task"] == counts["_statistics_task"]
    assert counts["_gradient_task"] == 5
    assert len(workers) == 2


@pytest.mark.parametrize(
    "kernel_factory",
    [
        lambda: _C(1.7) * _RBF([0.8, 1.3]),
        lambda: _RBF(0.9) * _C(0.6),
        lambda: _RBF([0.7, 1.1]),
        lambda: _C(1.7, "fixed") * _RBF([0.8, 1.3]),
        lambda: _C(1.7) * _RBF(0.8, "fixed"),
    ],
)
def test_rbf_gradients_by_matrix_products_equal_the_derivative_arrays(
    kernel_factory, monkeypatch
):
    # The fast path (W = G_nm * K_nm contracted with the inputs) against the
    # general one (arrays of kernel derivatives, themselves checked against
    # scikit-learn's and central differences above), at random adjoints.
    from sklearn_meanfield.tap import _sparse

    kernel = kernel_factory()
    rng = np.random.default_rng(3)
    X, Z = rng.normal(size=(37, 2)), rng.normal(size=(6, 2))
    G_mm = rng.normal(size=(6, 6))
    adjoints = (G_mm + G_mm.T, rng.normal(size=(37, 6)), rng.normal(size=37))
    assert _sparse._rbf_parts(kernel) is not None
    fast_theta = fitc_kernel_gradient(adjoints, kernel, X, Z)
    fast_Z = fitc_kernel_inducing_gradient(adjoints, kernel, X, Z)
    monkeypatch.setattr(_sparse, "_rbf_parts", lambda kernel: None)
    np.testing.assert_allclose(
        fast_theta, fitc_kernel_gradient(adjoints, kernel, X, Z, block_size=10),
        rtol=1e-11, atol=1e-12,
    )  # fmt: skip
    np.testing.assert_allclose(
        fast_Z, fitc_kernel_inducing_gradient(adjoints, kernel, X, Z, block_size=10),
        rtol=1e-11, atol=1e-12,
    )  # fmt: skip
    assert len(fast_theta) == kernel.n_dims
