"""TAPGaussianProcessClassifier and the TAP/EP core against independent references."""

import warnings

import numpy as np
import pytest
from callback_helpers import TickDeadline
from references import GaussianLikelihood
from scipy.integrate import quad
from scipy.optimize import minimize
from scipy.special import expit
from scipy.stats import multivariate_normal, norm
from sklearn.datasets import load_breast_cancer, make_classification, make_moons
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process import (
    GaussianProcessClassifier,
    GaussianProcessRegressor,
)
from sklearn.gaussian_process.kernels import (
    RBF,
    CompoundKernel,
    DotProduct,
    WhiteKernel,
)
from sklearn.gaussian_process.kernels import ConstantKernel as C
from sklearn.metrics import get_scorer, log_loss, roc_auc_score
from sklearn.model_selection import StratifiedKFold, cross_val_predict
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from sklearn_meanfield import TAPGaussianProcessClassifier
from sklearn_meanfield.tap._acceleration import AndersonMixing
from sklearn_meanfield.tap._ep import expectation_propagation, finish_ep
from sklearn_meanfield.tap._footprint import check_gp_fit_memory
from sklearn_meanfield.tap._likelihoods import NoisyStepLikelihood, make_likelihood
from sklearn_meanfield.tap._posterior import KernelPosterior
from sklearn_meanfield.tap._sweep import EPState
from sklearn_meanfield.tap.gpc import LABEL_NOISE_BOUNDS


def _noisy_labels(n, seed, flip=0.1):
    rng = np.random.RandomState(seed)
    X = rng.randn(n, 2)
    y = (X[:, 0] + 0.5 * X[:, 1] > 0).astype(int)
    flips = rng.rand(n) < flip
    y[flips] = 1 - y[flips]
    return X, y


# ---------------------------------------------------------------- the core


def test_gaussian_sites_reproduce_gp_regression_exactly():
    rng = np.random.RandomState(0)
    X = rng.randn(40, 3)
    y = np.sin(X[:, 0]) + 0.1 * rng.randn(40)
    kernel = C(1.3) * RBF([0.8, 1.5, 2.0])
    noise = 0.05
    K = kernel(X)
    solution = expectation_propagation(
        KernelPosterior(K), y, GaussianLikelihood(noise), tol=1e-12, max_iter=500
    )
    gpr = GaussianProcessRegressor(kernel + WhiteKernel(noise), optimizer=None)
    gpr.fit(X, y)
    # Posterior of the latent f at the training points, exactly:
    f_cov = K - K @ np.linalg.solve(K + noise * np.eye(40), K)
    f_mean = K @ np.linalg.solve(K + noise * np.eye(40), y)
    np.testing.assert_allclose(solution.mean, f_mean, atol=1e-8)
    np.testing.assert_allclose(solution.var, np.diag(f_cov), atol=1e-8)
    # ... and at new points, through the prediction path.
    X_new = rng.randn(7, 3)
    K_cross = kernel(X, X_new)
    mean = K_cross.T @ solution.alpha
    var = kernel.diag(X_new) - solution.posterior.variance_reduction(K_cross)
    gpr_mean, gpr_std = gpr.predict(X_new, return_std=True)
    np.testing.assert_allclose(mean, gpr_mean, atol=1e-8)
    np.testing.assert_allclose(var + noise, gpr_std**2, atol=1e-8)
    # For Gaussian sites the EP evidence is the exact marginal likelihood.
    assert solution.log_evidence == pytest.approx(
        gpr.log_marginal_likelihood_value_, abs=1e-7
    )


def test_positive_site_posterior_matches_dense_inverse_for_any_site_size():
    # Site precisions from 1e-12 to 1e6 (relative to K_ii): the tiny ones take
    # the K_ii - |V_i|^2 branch, the others (1 - [B^-1]_ii) / tau_i.  Every
    # quantity against the dense inverse of K^-1 + S.
    rng = np.random.RandomState(3)
    X = rng.randn(30, 2)
    K = (C(2.0) * RBF(1.5))(X) + 1e-3 * np.eye(30)
    tau = 10.0 ** rng.uniform(-12, 6, 30) / np.diag(K)
    tau[:3] = 0.0
    nu = rng.randn(30) * tau
    solved = KernelPosterior(K).solve(tau, nu)
    Sigma = np.linalg.inv(np.linalg.inv(K) + np.diag(tau))
    np.testing.assert_allclose(solved.var, np.diag(Sigma), rtol=1e-7)
    np.testing.assert_allclose(solved.mean, Sigma @ nu, rtol=1e-7, atol=1e-10)
    sign, logdet = np.linalg.slogdet(np.eye(30) + K @ np.diag(tau))
    assert sign > 0 and solved.logdet == pytest.approx(logdet, rel=1e-9)
    S = np.diag(tau)
    np.testing.assert_allclose(
        solved.site_correction(), S - S @ Sigma @ S, rtol=1e-6, atol=1e-9
    )
    K_cross = (C(2.0) * RBF(1.5))(X, rng.randn(5, 2))
    positive = tau > 0
    exact = np.einsum(
        "ij,ij->j",
        K_cross[positive],
        np.linalg.solve(
            K[np.ix_(positive, positive)] + np.diag(1 / tau[positive]),
            K_cross[positive],
        ),
    )
    np.testing.assert_allclose(solved.variance_reduction(K_cross), exact, rtol=1e-7)


@pytest.mark.parametrize("seed", range(5))
def test_step_evidence_matches_orthant_probability(seed):
    # Noise-free step labels: Z = P(t_i h_i > 0 for all i), h ~ N(0, K).
    rng = np.random.RandomState(seed)
    n = 10
    X = rng.randn(n, 2)
    t = np.where(X[:, 0] + 0.7 * rng.randn(n) > 0, 1.0, -1.0)
    K = (C(2.0) * RBF(1.2))(X) + 1e-10 * np.eye(n)
    solution = expectation_propagation(
        KernelPosterior(K), t, NoisyStepLikelihood(0.0, 0.0), tol=1e-9, max_iter=500
    )
    assert solution.converged
    D = np.diag(t)
    # P(D h > 0) = P(-D h < 0) = CDF at 0 of N(0, D K D).
    exact = multivariate_normal.cdf(
        np.zeros(n), np.zeros(n), D @ K @ D, abseps=1e-8, releps=1e-7, maxpts=10**6
    )
    assert abs(solution.log_evidence - np.log(exact)) <= 0.03 * abs(np.log(exact))


def test_probit_evidence_matches_numerical_integral():
    X = np.array([[0.0], [0.7], [2.0]])
    t = np.array([1.0, -1.0, 1.0])
    K = (C(1.5) * RBF(1.0))(X)
    solution = expectation_propagation(
        KernelPosterior(K), t, NoisyStepLikelihood(0.0, 1.0), tol=1e-10
    )
    # Z = E[prod_i Phi(t_i h_i)], h = L z with z ~ N(0, I): a tensor-product
    # Gauss-Hermite rule in z (the integrand is smooth).
    nodes, weights = np.polynomial.hermite_e.hermegauss(60)
    weights = weights / weights.sum()
    grid = np.stack(np.meshgrid(nodes, nodes, nodes, indexing="ij"), -1)
    h = grid.reshape(-1, 3) @ np.linalg.cholesky(K).T
    w = np.einsum("i,j,k->ijk", weights, weights, weights).ravel()
    exact = np.sum(w * np.prod(norm.cdf(t * h), axis=1))
    # The probit is a step on the field plus unit white noise: an orthant
    # probability of N(0, D (K + I) D) too; both references must agree.
    D = np.diag(t)
    orthant = multivariate_normal.cdf(
        np.zeros(3), np.zeros(3), D @ (K + np.eye(3)) @ D, abseps=1e-10, releps=1e-9
    )
    assert exact == pytest.approx(orthant, rel=1e-4)
    assert solution.log_evidence == pytest.approx(np.log(exact), rel=0.01)


def test_logistic_evidence_matches_numerical_integral_closer_than_laplace():
    # The logistic likelihood is scikit-learn's: the same model, so the two
    # approximations of one evidence can be compared with the exact value.
    X = np.array([[0.0], [0.7], [2.0]])
    t = np.array([1.0, -1.0, 1.0])
    kernel = C(6.0) * RBF(1.0)
    K = kernel(X)
    solution = expectation_propagation(
        KernelPosterior(K), t, make_likelihood("logistic", 0.0), tol=1e-10
    )
    nodes, weights = np.polynomial.hermite_e.hermegauss(60)
    weights = weights / weights.sum()
    grid = np.stack(np.meshgrid(nodes, nodes, nodes, indexing="ij"), -1)
    h = grid.reshape(-1, 3) @ np.linalg.cholesky(K).T
    w = np.einsum("i,j,k->ijk", weights, weights, weights).ravel()
    exact = np.log(np.sum(w * np.prod(1 / (1 + np.exp(-t * h)), axis=1)))
    assert solution.log_evidence == pytest.approx(exact, rel=0.01)
    laplace = GaussianProcessClassifier(kernel, optimizer=None).fit(X, t > 0)
    assert abs(solution.log_evidence - exact) < 0.5 * abs(
        laplace.log_marginal_likelihood_value_ - exact
    )


@pytest.mark.parametrize("label_noise", [0.0, 0.1])
def test_logistic_site_moments_are_derivatives_of_log_z(label_noise):
    # Cavities in both regimes of the logistic-normal integral (v below and
    # above 64) and far on either side of the step.
    t = np.array([1.0, -1.0, 1.0, -1.0, 1.0, -1.0])
    m = np.array([0.3, 2.0, -4.0, -0.5, 9.0, 15.0])
    v = np.array([0.5, 3.0, 1.0, 80.0, 200.0, 2.0])
    likelihood = make_likelihood("logistic", label_noise)
    log_z, first, second = likelihood.moments(t, m, v)
    h = 1e-3
    up = likelihood.moments(t, m + h, v)[0]
    down = likelihood.moments(t, m - h, v)[0]
    np.testing.assert_allclose(first, (up - down) / (2 * h), rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(
        second, -(up - 2 * log_z + down) / h**2, rtol=1e-4, atol=1e-7
    )
    if label_noise:
        assert np.any(second < 0)  # the point far on the wrong side
        k = 1e-6
        numeric = (
            make_likelihood("logistic", label_noise + k).moments(t, m, v)[0]
            - make_likelihood("logistic", label_noise - k).moments(t, m, v)[0]
        ) / (2 * k)
        np.testing.assert_allclose(
            likelihood.label_noise_gradient(t, m, v), numeric, rtol=1e-6
        )
    else:
        assert np.all(second >= 0)  # log-concave


@pytest.mark.parametrize("likelihood", ["probit", "logistic", "noisy step"])
def test_converged_ep_reuses_its_last_log_normalisers_exactly(likelihood):
    # A converged run hands its last sweep's log Z to the evidence instead of
    # a second pass over the likelihood: it must be the very value a fresh
    # pass at the final cavities gives.
    X, y = _noisy_labels(40, 6)
    t = 2.0 * y - 1
    lik = make_likelihood("step", 0.1) if likelihood == "noisy step" else None
    lik = lik or make_likelihood(likelihood, 0.0)
    solution = expectation_propagation(
        KernelPosterior((C(2.0) * RBF(0.8))(X)), t, lik, tol=1e-8, max_iter=1000
    )
    assert solution.converged
    state = EPState(solution.tau, solution.nu, solution.posterior)
    fresh = finish_ep(state, t, lik, 0, True)
    np.testing.assert_array_equal(fresh.log_z, solution.log_z)
    assert fresh.log_evidence == solution.log_evidence


def test_label_noise_keeps_negative_site_precisions():
    X, y = _noisy_labels(60, 1, flip=0.15)
    K = (C(4.0) * RBF(0.5))(X)
    t = 2.0 * y - 1
    solution = expectation_propagation(
        KernelPosterior(K), t, NoisyStepLikelihood(0.15, 0.0), tol=1e-8, max_iter=1000
    )
    assert solution.converged
    assert np.any(solution.tau < 0)  # kept, not clipped
    assert np.all(solution.cavity_var > 0)
    assert np.all(np.isfinite(solution.log_z))
    # Fixed point: the sites reproduce the moments of their tilted distributions.
    likelihood = NoisyStepLikelihood(0.15, 0.0)
    _, first, second = likelihood.moments(t, solution.cavity_mean, solution.cavity_var)
    tilted_mean = solution.cavity_mean + solution.cavity_var * first
    tilted_var = solution.cavity_var - solution.cavity_var**2 * second
    np.testing.assert_allclose(solution.mean, tilted_mean, atol=1e-6)
    np.testing.assert_allclose(solution.var, tilted_var, rtol=1e-5)


def test_anderson_mixing_solves_a_linear_fixed_point_exactly():
    # On a linear map x -> A x + b Anderson acceleration is GMRES in disguise:
    # with a memory of the dimension it lands on (I - A)^-1 b once the history
    # spans the space (Walker and Ni 2011), where the plain iteration, whose
    # contraction is 0.9, is still far off.
    rng = np.random.RandomState(0)
    Q, _ = np.linalg.qr(rng.randn(4, 4))
    A = Q @ np.diag([0.9, -0.7, 0.5, 0.2]) @ Q.T
    b = rng.randn(4)
    exact = np.linalg.solve(np.eye(4) - A, b)
    mixing = AndersonMixing(memory=4)
    x = np.zeros(4)
    iterates = []
    for _ in range(6):
        proposal = mixing.propose(x, A @ x + b - x, np.ones(4))
        x = A @ x + b if proposal is None else proposal
        iterates.append(x)
    np.testing.assert_allclose(iterates[4], exact, rtol=1e-9, atol=1e-12)
    plain = np.zeros(4)
    for _ in range(6):
        plain = A @ plain + b
    assert np.linalg.norm(plain - exact) > 0.1
    # A non-finite change (an overflowed sweep) proposes nothing, raises nothing.
    assert mixing.propose(x, np.full(4, np.nan), np.ones(4)) is None


@pytest.mark.parametrize("likelihood", ["probit", "noisy step"])
def test_anderson_acceleration_reaches_the_damped_fixed_point_sooner(likelihood):
    X, y = _noisy_labels(120, 4, flip=0.15)
    K = (C(9.0) * RBF(0.7))(X)
    t = 2.0 * y - 1
    likelihood = (
        NoisyStepLikelihood(0.15, 0.0)
        if likelihood == "noisy step"
        else make_likelihood("probit", 0.0)
    )
    runs = [
        expectation_propagation(
            KernelPosterior(K), t, likelihood, tol=1e-9, anderson_memory=memory
        )
        for memory in (0, 3)
    ]
    plain, accelerated = runs
    assert plain.converged and accelerated.converged
    assert accelerated.n_iter < 0.8 * plain.n_iter
    np.testing.assert_allclose(accelerated.mean, plain.mean, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(accelerated.var, plain.var, rtol=1e-6)
    np.testing.assert_allclose(accelerated.cavity_var, plain.cavity_var, rtol=1e-6)
    assert accelerated.log_evidence == pytest.approx(plain.log_evidence, abs=1e-8)
    assert np.any(accelerated.tau < 0) == np.any(plain.tau < 0)


@pytest.mark.parametrize("n_negative", [0, 1, 6, 20])
def test_posterior_with_signed_sites_equals_dense_inverse(n_negative):
    # 0: the positive-site form; 1 and 6 of 40: the low-rank correction of
    # the few negative sites; 20 of 40: the direct factorisation.
    rng = np.random.default_rng(n_negative)
    n = 40
    X = rng.standard_normal((n, 3))
    K = (C(2.0) * RBF(1.0))(X)
    tau = rng.uniform(0.0, 3.0, n)
    tau[:3] = 0.0  # sites of zero precision take the small-site branch
    negative = rng.choice(np.arange(3, n), n_negative, replace=False)
    tau[negative] = -rng.uniform(0.01, 0.1, n_negative)
    nu = rng.standard_normal(n)
    K_cross = (C(2.0) * RBF(1.0))(X, rng.standard_normal((7, 3)))

    precision = np.linalg.inv(K) + np.diag(tau)
    assert np.all(np.linalg.eigvalsh(precision) > 0)
    Sigma = np.linalg.inv(precision)
    S = np.diag(tau)
    correction = S - S @ Sigma @ S
    solved = KernelPosterior(K).solve(tau, nu)
    # The direct factorisation adds a relative jitter of 1e-10 to K's diagonal.
    rtol = 1e-7 if n_negative == 20 else 1e-9
    np.testing.assert_allclose(solved.var, np.diag(Sigma), rtol=rtol, atol=1e-11)
    np.testing.assert_allclose(solved.mean, Sigma @ nu, rtol=rtol, atol=1e-10)
    assert solved.logdet == pytest.approx(
        np.linalg.slogdet(np.eye(n) + K @ S)[1], rel=rtol
    )
    np.testing.assert_allclose(solved.site_correction(), correction, atol=100 * rtol)
    np.testing.assert_allclose(
        solved.variance_reduction(K_cross),
        np.einsum("ij,ik,kj->j", K_cross, correction, K_cross),
        atol=100 * rtol,
    )


@pytest.mark.parametrize("n_negative", [1, 20])
def test_improper_signed_sites_are_refused(n_negative):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 2))
    K = (C(2.0) * RBF(1.0))(X)
    tau = np.full(40, 0.5)
    tau[:n_negative] = -5.0  # K^-1 + S is not positive definite
    assert np.linalg.eigvalsh(np.linalg.inv(K) + np.diag(tau)).min() < 0
    with pytest.raises(np.linalg.LinAlgError):
        KernelPosterior(K).solve(tau, np.zeros(40))


# ------------------------------------------------------- the leave-one-out


# Largest and mean per-point gap allowed between the built-in leave-one-out
# probabilities and brute-force refits (50 points, fixed kernel).  The cavity
# keeps every other site where it is, while a refit lets the neighbours' sites
# move: for log-concave likelihoods (probit, logistic) they move little and
# the gap is a fraction of 0.02; the step with label noise is not log-concave,
# its neighbours' sites move more, and the gap is a property of the
# approximation (the refits are no closer to the exact Bayes leave-one-out
# than the cavities are), hence the wider bounds.
@pytest.mark.parametrize(
    "likelihood, label_noise, max_gap, mean_gap",
    [
        ("probit", 0.0, 0.02, 0.005),
        ("probit", 0.1, 0.02, 0.005),
        ("step", 0.1, 0.12, 0.025),
        ("logistic", 0.0, 0.02, 0.005),
    ],
)
def test_builtin_loo_matches_brute_force_refits(
    likelihood, label_noise, max_gap, mean_gap
):
    X, y = _noisy_labels(50, 0)
    params = dict(
        kernel=C(1.0) * RBF(0.8),
        likelihood=likelihood,
        label_noise=label_noise,
        optimizer=None,
        tol=1e-8,
        max_iter=1000,
    )
    model = TAPGaussianProcessClassifier(**params).fit(X, y)
    brute = np.empty((len(y), 2))
    for i in range(len(y)):
        keep = np.arange(len(y)) != i
        refit = TAPGaussianProcessClassifier(**params).fit(X[keep], y[keep])
        brute[i] = refit.predict_proba(X[i : i + 1])[0]
    gap = np.abs(model.loo_proba_ - brute)[:, 1]
    assert np.max(gap) < max_gap
    assert np.mean(gap) < mean_gap
    brute_error = np.mean(np.argmax(brute, axis=1) != y)
    assert abs(model.loo_error_ - brute_error) <= 1.0 / len(y) + 1e-12


def test_cavity_is_the_posterior_without_the_site():
    # The identity behind the free leave-one-out estimate: the cavity of
    # point i is the Gaussian posterior of h_i given every *other* site,
    # computed here from scratch, for sites of both signs (label noise).
    X, y = _noisy_labels(40, 2)
    t = 2.0 * y - 1
    K = (C(1.0) * RBF(0.8))(X)
    solution = expectation_propagation(
        KernelPosterior(K), t, NoisyStepLikelihood(0.1, 0.0), tol=1e-9, max_iter=2000
    )
    assert np.any(solution.tau < 0)
    for i in range(0, 40, 7):
        keep = np.arange(40) != i
        tau, nu = solution.tau[keep], solution.nu[keep]
        # Posterior precision of the field vector with site i removed.
        precision = np.linalg.inv(K) + np.diag(np.where(keep, solution.tau, 0.0))
        covariance = np.linalg.inv(precision)
        mean = covariance @ np.where(keep, solution.nu, 0.0)
        assert covariance[i, i] == pytest.approx(solution.cavity_var[i], rel=1e-6)
        assert mean[i] == pytest.approx(solution.cavity_mean[i], rel=1e-6, abs=1e-8)
        assert tau.shape == nu.shape == (39,)


# ---------------------------------------------------------- the evidence


@pytest.mark.parametrize(
    "likelihood, label_noise",
    [("probit", 0.0), ("step", 0.1), ("logistic", 0.0), ("logistic", 0.1)],
)
def test_evidence_gradient_matches_finite_differences(likelihood, label_noise):
    X, y = _noisy_labels(40, 3)
    kernel = C(1.5) * RBF([1.0, 2.0]) + C(0.3) * DotProduct(sigma_0=0.5)
    model = TAPGaussianProcessClassifier(
        kernel,
        likelihood=likelihood,
        label_noise=label_noise,
        optimizer=None,
        tol=1e-11,
        max_iter=2000,
    ).fit(X, y)
    theta = kernel.theta
    value, gradient = model.log_marginal_likelihood(theta, eval_gradient=True)
    assert value == pytest.approx(model.log_marginal_likelihood(theta))
    h = 1e-5
    numeric = np.empty_like(theta)
    for j in range(len(theta)):
        step = np.zeros_like(theta)
        step[j] = h
        numeric[j] = (
            model.log_marginal_likelihood(theta + step)
            - model.log_marginal_likelihood(theta - step)
        ) / (2 * h)
    np.testing.assert_allclose(gradient, numeric, rtol=1e-4, atol=1e-6)


# The amplitude or the label noise runs to its bound (separable labels).
@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("likelihood", ["probit", "step", "logistic"])
def test_learned_label_noise_gradient_matches_finite_differences(likelihood):
    # label_noise="auto": log(label_noise) is the search space's last entry.
    X, y = _noisy_labels(40, 3)
    model = TAPGaussianProcessClassifier(
        C(1.5) * RBF(1.0),
        likelihood=likelihood,
        label_noise="auto",
        tol=1e-11,
        max_iter=2000,
    ).fit(X, y)
    theta = np.append(np.log([2.0, 0.8]), np.log(0.05))
    value, gradient = model.log_marginal_likelihood(theta, eval_gradient=True)
    assert gradient.shape == (3,)
    h = 1e-5
    numeric = [
        (
            model.log_marginal_likelihood(theta + h * e)
            - model.log_marginal_likelihood(theta - h * e)
        )
        / (2 * h)
        for e in np.eye(3)
    ]
    np.testing.assert_allclose(gradient, numeric, rtol=1e-4, atol=1e-6)
    # The same evidence as a fixed label noise of 0.05 at that kernel.
    fixed = TAPGaussianProcessClassifier(
        C(2.0) * RBF(0.8),
        likelihood=likelihood,
        label_noise=0.05,
        optimizer=None,
        tol=1e-11,
        max_iter=2000,
    ).fit(X, y)
    assert value == pytest.approx(fixed.log_marginal_likelihood_value_, rel=1e-8)


# The amplitude or the label noise runs to its bound (separable labels).
@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_learned_label_noise_maximises_the_evidence():
    X, y = make_classification(
        n_samples=200,
        n_features=4,
        n_informative=3,
        n_redundant=0,
        flip_y=0.2,
        random_state=1,
    )
    clean = np.sign(X[:, 0] + X[:, 1]) > 0
    auto = TAPGaussianProcessClassifier(label_noise="auto", tol=1e-8).fit(X, y)
    assert 0.01 < auto.label_noise_ < LABEL_NOISE_BOUNDS[1]
    theta = np.append(auto.kernel_.theta, np.log(auto.label_noise_))
    best = auto.log_marginal_likelihood(theta)
    assert best == pytest.approx(auto.log_marginal_likelihood_value_, abs=1e-6)
    for factor in (0.7, 1.4):
        moved = theta + np.append(np.zeros(len(theta) - 1), np.log(factor))
        assert auto.log_marginal_likelihood(moved) < best
    # More evidence than the model without label noise, on flipped labels.
    plain = TAPGaussianProcessClassifier(tol=1e-8).fit(X, y)
    assert best > plain.log_marginal_likelihood_value_ + 1.0
    # Labels without flips: the learned noise stays small.
    separable = TAPGaussianProcessClassifier(label_noise="auto").fit(X, clean)
    assert separable.label_noise_ < 0.01


# The amplitude or the label noise runs to its bound (separable labels).
@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_learned_label_noise_per_one_vs_rest_problem():
    X, y = make_classification(
        n_samples=90,
        n_features=4,
        n_informative=3,
        n_redundant=0,
        n_classes=3,
        n_clusters_per_class=1,
        flip_y=0.1,
        random_state=0,
    )
    model = TAPGaussianProcessClassifier(label_noise="auto").fit(X, y)
    assert model.label_noise_.shape == (3,)
    assert np.all(model.label_noise_ >= LABEL_NOISE_BOUNDS[0])
    assert np.all(model.label_noise_ <= LABEL_NOISE_BOUNDS[1])
    np.testing.assert_allclose(model.predict_proba(X).sum(axis=1), 1.0)
    with pytest.raises(ValueError, match="optimizer"):
        TAPGaussianProcessClassifier(label_noise="auto", optimizer=None).fit(X, y)


def test_optimizer_increases_evidence_and_restarts_are_reproducible():
    X, y = make_moons(80, noise=0.25, random_state=0)
    fixed = TAPGaussianProcessClassifier(optimizer=None).fit(X, y)
    tuned = TAPGaussianProcessClassifier(n_restarts_optimizer=2, random_state=0)
    tuned.fit(X, y)
    assert tuned.log_marginal_likelihood_value_ > fixed.log_marginal_likelihood_value_
    # The reported value is the evidence of the fitted kernel.
    assert tuned.log_marginal_likelihood(tuned.kernel_.theta) == pytest.approx(
        tuned.log_marginal_likelihood_value_, rel=1e-6
    )
    again = TAPGaussianProcessClassifier(
        n_restarts_optimizer=2, random_state=0, n_jobs=2
    ).fit(X, y)
    np.testing.assert_allclose(again.kernel_.theta, tuned.kernel_.theta, rtol=1e-7)
    np.testing.assert_allclose(
        again.predict_proba(X), tuned.predict_proba(X), rtol=1e-6
    )


# ---------------------------------------------------------- the estimator


def test_predict_proba_integrates_over_the_latent_field():
    X, y = _noisy_labels(60, 4)
    model = TAPGaussianProcessClassifier(
        C(3.0) * RBF(1.0), optimizer=None, tol=1e-9
    ).fit(X, y)
    X_new = np.random.RandomState(5).randn(20, 2) * 2
    mean, latent_var = model.latent_mean_and_variance(X_new)
    proba = model.predict_proba(X_new)[:, 1]
    # The probit integrated over N(mean, var) is Phi(mean / sqrt(1 + var)) with
    # var > 0, so it is less extreme than the plug-in Phi(mean).
    plug_in = norm.cdf(mean)
    assert np.all(np.abs(proba - 0.5) < np.abs(plug_in - 0.5))
    # Recover var from the probability and check it against the exact GP
    # predictive variance with the converged Gaussian sites.
    var = (mean / norm.ppf(proba)) ** 2 - 1
    solution = model._fits[0].solution
    kernel = model.kernel_
    K = kernel(X)
    Sigma_sites = np.diag(1 / solution.tau)
    K_cross = kernel(X, X_new)
    exact_var = kernel.diag(X_new) - np.einsum(
        "ij,ij->j", K_cross, np.linalg.solve(K + Sigma_sites, K_cross)
    )
    np.testing.assert_allclose(var, exact_var, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(latent_var, exact_var, rtol=1e-6, atol=1e-10)


def test_logistic_predict_proba_integrates_the_logistic_over_the_field():
    X, y = _noisy_labels(60, 4)
    model = TAPGaussianProcessClassifier(
        C(3.0) * RBF(1.0), likelihood="logistic", optimizer=None, tol=1e-9
    ).fit(X, y)
    X_new = np.random.RandomState(5).randn(12, 2) * 2
    mean, _ = model.latent_mean_and_variance(X_new)
    solution = model._fits[0].solution
    kernel = model.kernel_
    K_cross = kernel(X, X_new)
    var = kernel.diag(X_new) - np.einsum(
        "ij,ij->j",
        K_cross,
        np.linalg.solve(kernel(X) + np.diag(1 / solution.tau), K_cross),
    )
    expected = [
        quad(lambda h, mu=mu, sd=sd: norm.pdf(h, mu, sd) * expit(h), -np.inf, np.inf)[0]
        for mu, sd in zip(mean, np.sqrt(var))
    ]
    np.testing.assert_allclose(model.predict_proba(X_new)[:, 1], expected, atol=1e-7)


def test_multiclass_one_vs_rest_is_normalised_and_n_jobs_invariant():
    X, y = make_classification(
        n_samples=90,
        n_features=4,
        n_informative=3,
        n_redundant=0,
        n_classes=3,
        n_clusters_per_class=1,
        random_state=0,
    )
    one = TAPGaussianProcessClassifier(random_state=0, n_jobs=1).fit(X, y)
    two = TAPGaussianProcessClassifier(random_state=0, n_jobs=2).fit(X, y)
    proba = one.predict_proba(X)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    # Equal up to rounding: BLAS may use other thread counts inside workers.
    np.testing.assert_allclose(proba, two.predict_proba(X), rtol=1e-9)
    assert one.loo_proba_.shape == (90, 3)
    assert one.decision_function(X).shape == (90, 3)
    assert len(one.kernel_.kernels) == 3
    assert one.score(X, y) > 0.85
    # The leave-one-out error is an estimate of the test error, so it lies
    # above the training error.
    assert one.loo_error_ >= 1 - one.score(X, y)


def test_tap_leave_one_out_is_accurate_where_naive_mean_field_is_not():
    # Opper and Winther's point: without the Onsager reaction term the cavity
    # fields, hence the leave-one-out estimate, are wrong.
    X, y = _noisy_labels(80, 6)
    X_test, y_test = _noisy_labels(2000, 7)
    kernel = C(0.3) * RBF(1.0)
    gaps = {}
    for method in ("tap", "naive"):
        model = TAPGaussianProcessClassifier(kernel, method=method, optimizer=None)
        model.fit(X, y)
        test_error = 1 - model.score(X_test, y_test)
        gaps[method] = abs(model.loo_error_ - test_error)
    # A leave-one-out error rate near 0.15 over 80 points has a binomial
    # standard deviation near 0.04, so 0.07 allows less than two of them; the
    # naive cavities are biased, not noisy, and miss by far more.
    assert gaps["tap"] < 0.07
    assert gaps["naive"] > 2 * gaps["tap"]


def test_non_convergence_warns_and_keeps_a_usable_model():
    X, y = _noisy_labels(50, 8)
    model = TAPGaussianProcessClassifier(optimizer=None, max_iter=2)
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        model.fit(X, y)
    proba = model.predict_proba(X)
    assert np.all(np.isfinite(proba))
    assert model.score(X, y) > 0.7


def test_diverging_naive_mean_field_still_predicts():
    # With a strong, smooth kernel on breast cancer the naive iteration
    # diverges (fields of 1e12).  Its kept iterate once carried negative
    # site precisions from the probit's cancelling curvature, so there was
    # no posterior and predict_proba raised AttributeError.
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    kernel = C(15.7**2, "fixed") * RBF(12.9, "fixed")
    model = TAPGaussianProcessClassifier(kernel, method="naive", optimizer=None)
    with pytest.warns(ConvergenceWarning, match="naive mean-field equations"):
        model.fit(X, y)
    solution = model._fits[0].solution
    assert np.all(solution.tau >= 0)  # probit: log-concave sites
    proba = model.predict_proba(X)
    assert np.all(np.isfinite(proba))
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert model.score(X, y) > 0.9


def test_warnings_of_parallel_one_vs_rest_problems_reach_the_caller():
    # Each one-vs-rest problem warns; with n_jobs=2 they are fitted in worker
    # processes, whose warnings must be re-issued here, not left on the
    # workers' stderr.
    X, y = _noisy_labels(60, 3)
    y = y + (X[:, 1] > 0.8)  # three classes
    caught = []
    for n_jobs in (1, 2):
        model = TAPGaussianProcessClassifier(optimizer=None, max_iter=2, n_jobs=n_jobs)
        with warnings.catch_warnings(record=True) as records:
            warnings.simplefilter("always")
            model.fit(X, y)
        caught.append(
            [str(r.message) for r in records if r.category is ConvergenceWarning]
        )
    assert len(caught[0]) == 3
    assert caught[1] == caught[0]


def test_refuses_kernel_matrices_that_do_not_fit_in_memory(monkeypatch):
    from sklearn_meanfield import _memory

    X = np.random.RandomState(0).normal(size=(1000, 2))
    kernel = C() * RBF()
    check_gp_fit_memory(kernel, X)  # ~72 MB: fine
    # With 1 GiB to spare, 4000 rows (~1.2 GB at the optimiser's peak) are
    # refused before any work, and one-vs-rest workers in parallel count.
    monkeypatch.setattr(_memory, "available_memory_bytes", lambda: 2**30)
    X = np.random.RandomState(0).normal(size=(4000, 2))
    with pytest.raises(MemoryError, match="GiB"):
        check_gp_fit_memory(kernel, X)
    check_gp_fit_memory(kernel, X[:2500])  # ~0.45 GB
    with pytest.raises(MemoryError, match="2 concurrent workers"):
        check_gp_fit_memory(kernel, X[:2500], n_problems=3, n_concurrent=2)
    y = (X[:, 0] > 0).astype(int)
    model = TAPGaussianProcessClassifier(n_inducing=None)  # the exact mode
    with pytest.raises(MemoryError, match="4000 samples"):
        model.fit(X, y)
    assert not hasattr(model, "classes_")


def test_one_class_is_an_error():
    X = np.random.RandomState(0).randn(10, 2)
    with pytest.raises(ValueError, match="only one class"):
        TAPGaussianProcessClassifier().fit(X, np.zeros(10))


@pytest.mark.slow
@pytest.mark.parametrize("likelihood", ["probit", "logistic"])
def test_breast_cancer_beats_laplace_in_log_loss(likelihood):
    X, y = load_breast_cancer(return_X_y=True)
    cv = StratifiedKFold(5, shuffle=True, random_state=0)
    kernel = C(1.0) * RBF(1.0)
    ours = make_pipeline(
        StandardScaler(), TAPGaussianProcessClassifier(kernel, likelihood=likelihood)
    )
    laplace = make_pipeline(StandardScaler(), GaussianProcessClassifier(kernel))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        p_ours = cross_val_predict(ours, X, y, cv=cv, method="predict_proba")
        p_laplace = cross_val_predict(laplace, X, y, cv=cv, method="predict_proba")
    assert log_loss(y, p_ours) <= log_loss(y, p_laplace)
    accuracy_ours = np.mean(np.argmax(p_ours, axis=1) == y)
    accuracy_laplace = np.mean(np.argmax(p_laplace, axis=1) == y)
    assert accuracy_ours >= accuracy_laplace - 0.005


# ------------------------------------- scikit-learn's GP classifier's API


def _three_classes(n=45, seed=0):
    return make_classification(
        n_samples=n,
        n_features=4,
        n_informative=3,
        n_redundant=0,
        n_classes=3,
        n_clusters_per_class=1,
        random_state=seed,
    )


def test_compound_kernel_is_refused_with_a_clean_value_error():
    # Not a TypeError (an empty CompoundKernel has no
    # requires_vector_input) nor an AttributeError (a CompoundKernel of
    # kernels returns one matrix per kernel): a message that names it.
    X, y = _noisy_labels(20, 0)
    for kernel in (CompoundKernel(0), CompoundKernel([RBF(1.0), RBF(2.0)])):
        with pytest.raises(ValueError, match="kernel cannot be a CompoundKernel"):
            TAPGaussianProcessClassifier(kernel, optimizer=None).fit(X, y)


def test_latent_mean_and_variance_is_the_gaussian_posterior_of_the_sites():
    X, y = _noisy_labels(30, 1)
    kernel = C(2.0) * RBF(0.9)
    model = TAPGaussianProcessClassifier(kernel, optimizer=None, tol=1e-10).fit(X, y)
    X_new = np.random.RandomState(2).randn(6, 2)
    mean, var = model.latent_mean_and_variance(X_new)
    # GP regression on the sites' pseudo-observations nu / tau with noise
    # variances 1 / tau, written out densely.
    solution = model._fits[0].solution
    K, K_cross = kernel(X), kernel(X, X_new)
    A = K + np.diag(1 / solution.tau)
    np.testing.assert_allclose(
        mean, K_cross.T @ np.linalg.solve(A, solution.nu / solution.tau), rtol=1e-8
    )
    exact_var = kernel.diag(X_new) - np.einsum(
        "ij,ij->j", K_cross, np.linalg.solve(A, K_cross)
    )
    np.testing.assert_allclose(var, exact_var, rtol=1e-8)
    X3, y3 = _three_classes()
    three = TAPGaussianProcessClassifier(optimizer=None).fit(X3, y3)
    with pytest.raises(ValueError, match="only supported for binary"):
        three.latent_mean_and_variance(X3)


def test_decision_function_is_the_log_odds_of_predict_proba():
    # Not the latent mean, which ranks points differently from predict_proba
    # (the variance differs between points), so that the "roc_auc" scorer
    # (which prefers decision_function) scores the model's own ranking.
    X, y = _noisy_labels(40, 5)
    model = TAPGaussianProcessClassifier(
        C(3.0) * RBF(0.5), optimizer=None, tol=1e-9
    ).fit(X, y)
    X_new = np.random.RandomState(6).randn(300, 2) * 2
    p = model.predict_proba(X_new)[:, 1]
    score = model.decision_function(X_new)
    np.testing.assert_allclose(score, np.log(p) - np.log1p(-p), rtol=1e-9)
    np.testing.assert_array_equal(
        model.predict(X_new), model.classes_[(score > 0).astype(int)]
    )
    mean, var = model.latent_mean_and_variance(X_new)
    # The probit predictive: p = Phi(mean / sqrt(1 + var)).
    np.testing.assert_allclose(p, norm.cdf(mean / np.sqrt(1 + var)), rtol=1e-9)
    # The two rankings differ on these points: the mean is not the score.
    assert np.any(np.argsort(mean) != np.argsort(score))
    y_new = (X_new[:, 0] + 0.5 * X_new[:, 1] > 0).astype(int)
    assert roc_auc_score(y_new, score) == roc_auc_score(y_new, p)
    scorer = get_scorer("roc_auc")
    assert scorer(model, X_new, y_new) == roc_auc_score(y_new, p)


@pytest.mark.parametrize("multi_class", ["one_vs_rest", "one_vs_one"])
def test_multiclass_argmax_of_decision_function_is_predict(multi_class):
    # One-vs-rest: argmax(decision_function) disagreed with predict on ~2% of
    # points when the decision function was the one-vs-rest latent means.
    X, y = _three_classes(60, 3)
    model = TAPGaussianProcessClassifier(
        C(2.0) * RBF(1.5), optimizer=None, multi_class=multi_class
    ).fit(X, y)
    X_new = np.random.RandomState(0).randn(2000, 4) * 2
    decision = model.decision_function(X_new)
    assert decision.shape == (2000, 3)
    np.testing.assert_array_equal(
        model.classes_[np.argmax(decision, axis=1)], model.predict(X_new)
    )
    proba = model.predict_proba(X_new)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    if multi_class == "one_vs_rest":
        np.testing.assert_allclose(decision, np.log(proba), rtol=1e-12)
        np.testing.assert_array_equal(np.argmax(proba, axis=1), np.argmax(decision, 1))


def test_n_classes_and_numpy_float_evidence():
    X, y = _three_classes()
    model = TAPGaussianProcessClassifier(optimizer=None).fit(X, y)
    assert model.n_classes_ == 3
    assert isinstance(model.log_marginal_likelihood(), np.float64)
    assert isinstance(model.log_marginal_likelihood(np.log([1.0, 1.0])), np.float64)
    binary = TAPGaussianProcessClassifier(optimizer=None).fit(*_noisy_labels(20, 0))
    assert binary.n_classes_ == 2
    assert isinstance(binary.log_marginal_likelihood_value_, np.float64)
    assert isinstance(binary.log_marginal_likelihood([0.0, 0.0]), np.float64)


@pytest.mark.parametrize("multi_class", ["one_vs_rest", "one_vs_one"])
def test_multiclass_evidence_at_shared_and_stacked_theta(multi_class):
    # log_marginal_likelihood(kernel_.theta) raised "theta has 3 entries; the
    # kernel has 1" for three classes.  The reference: each binary problem
    # fitted on its own, at the same kernel, averaged.
    X, y = _three_classes(36, 1)
    kernel = C(1.5) * RBF(1.2)
    model = TAPGaussianProcessClassifier(
        kernel, optimizer=None, multi_class=multi_class, tol=1e-10
    ).fit(X, y)
    if multi_class == "one_vs_rest":
        subsets = [(np.ones(len(y), bool), y == k) for k in range(3)]
    else:
        subsets = [
            ((y == i) | (y == j), y == j) for i in range(3) for j in range(i + 1, 3)
        ]

    def reference(kernels):
        return np.mean(
            [
                TAPGaussianProcessClassifier(k, optimizer=None, tol=1e-10)
                .fit(X[rows], positive[rows])
                .log_marginal_likelihood_value_
                for k, (rows, positive) in zip(kernels, subsets)
            ]
        )

    assert len(model.kernel_.kernels) == 3
    assert model.log_marginal_likelihood(model.kernel_.theta) == pytest.approx(
        reference([kernel] * 3), rel=1e-8
    )
    assert model.log_marginal_likelihood_value_ == pytest.approx(
        reference([kernel] * 3), rel=1e-8
    )
    shared = np.log([2.0, 0.7])
    assert model.log_marginal_likelihood(shared) == pytest.approx(
        reference([kernel.clone_with_theta(shared)] * 3), rel=1e-8
    )
    stacked = np.log([2.0, 0.7, 1.0, 1.0, 0.5, 3.0])
    blocks = [kernel.clone_with_theta(b) for b in np.split(stacked, 3)]
    value, gradient = model.log_marginal_likelihood(stacked, eval_gradient=True)
    assert value == pytest.approx(reference(blocks), rel=1e-8)
    h = 1e-5
    numeric = [
        (
            model.log_marginal_likelihood(stacked + h * e)
            - model.log_marginal_likelihood(stacked - h * e)
        )
        / (2 * h)
        for e in np.eye(6)
    ]
    np.testing.assert_allclose(gradient, numeric, rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="theta has 4 entries; expected 2 or 6"):
        model.log_marginal_likelihood(np.zeros(4))


def test_clone_kernel_false_sets_kernel_theta_and_keeps_the_model():
    X, y = _noisy_labels(25, 2)
    model = TAPGaussianProcessClassifier(optimizer=None).fit(X, y)
    proba = model.predict_proba(X)
    theta = np.log([3.0, 0.5])
    value = model.log_marginal_likelihood(theta, clone_kernel=False)
    np.testing.assert_allclose(model.kernel_.theta, theta)
    assert value == model.log_marginal_likelihood(theta)
    np.testing.assert_array_equal(model.predict_proba(X), proba)
    X3, y3 = _three_classes()
    three = TAPGaussianProcessClassifier(optimizer=None).fit(X3, y3)
    three.log_marginal_likelihood(theta, clone_kernel=False)
    np.testing.assert_allclose(three.kernel_.theta, np.tile(theta, 3))


def test_pairwise_coupling_solves_wu_lin_weng_problem():
    # Against a direct constrained minimisation of the coupling objective,
    # and exact recovery of a distribution from consistent pairwise ratios.
    from sklearn_meanfield.tap._multiclass import one_vs_one_pairs, pairwise_coupling

    rng = np.random.RandomState(0)
    pairs = one_vs_one_pairs(4)
    r = rng.uniform(0.02, 0.98, size=(5, len(pairs)))
    coupled = pairwise_coupling(r, 4)
    for row, p in zip(r, coupled):
        R = np.zeros((4, 4))
        for k, (i, j) in enumerate(pairs):
            R[j, i], R[i, j] = row[k], 1 - row[k]

        def objective(q, R=R):
            return sum(
                (R[j, i] * q[i] - R[i, j] * q[j]) ** 2
                for i in range(4)
                for j in range(4)
                if i != j
            )

        direct = minimize(
            objective,
            np.full(4, 0.25),
            constraints={"type": "eq", "fun": lambda q: q.sum() - 1},
            method="SLSQP",
            options={"ftol": 1e-15},
        ).x
        np.testing.assert_allclose(p, direct, atol=1e-6)
    truth = rng.dirichlet(np.ones(4), size=3)
    consistent = np.column_stack(
        [truth[:, j] / (truth[:, i] + truth[:, j]) for i, j in pairs]
    )
    np.testing.assert_allclose(pairwise_coupling(consistent, 4), truth, rtol=1e-10)
    # Pairwise probabilities of exactly 0 and 1 (the probit's tails).
    hard = pairwise_coupling(np.array([[1.0, 1.0, 0.3]]), 3)
    np.testing.assert_allclose(hard, [[0.0, 0.7, 0.3]], atol=1e-10)


class _ProbabilitiesOnly(TAPGaussianProcessClassifier):
    """A binary TAP classifier whose confidence is its probability: what
    scikit-learn's OneVsOneClassifier combines for its GP classifier."""

    def decision_function(self, X):
        raise NotImplementedError


def test_one_vs_one_combines_pairwise_problems_as_scikit_learn_does():
    from sklearn.multiclass import OneVsOneClassifier

    X, y = _three_classes(45, 4)
    y = np.array(["a", "b", "c"])[y]
    kernel = C(2.0) * RBF(1.0)
    model = TAPGaussianProcessClassifier(
        kernel, optimizer=None, multi_class="one_vs_one"
    ).fit(X, y)
    reference = OneVsOneClassifier(_ProbabilitiesOnly(kernel, optimizer=None))
    reference.fit(X, y)
    X_new = np.random.RandomState(1).randn(400, 4) * 1.5
    np.testing.assert_allclose(
        model.decision_function(X_new), reference.decision_function(X_new), rtol=1e-12
    )
    np.testing.assert_array_equal(model.predict(X_new), reference.predict(X_new))
    # Each pairwise problem is the binary model of its two classes' samples.
    pairwise = np.column_stack(
        [est.predict_proba(X_new)[:, 1] for est in reference.estimators_]
    )
    from sklearn_meanfield.tap._multiclass import pairwise_coupling

    np.testing.assert_allclose(
        model.predict_proba(X_new), pairwise_coupling(pairwise, 3), rtol=1e-12
    )
    assert model.score(X, y) > 0.9
    # The pairs fitted in worker processes give the same model.
    parallel = TAPGaussianProcessClassifier(
        kernel, optimizer=None, multi_class="one_vs_one", n_jobs=2
    ).fit(X, y)
    np.testing.assert_allclose(
        parallel.predict_proba(X_new), model.predict_proba(X_new), rtol=1e-9
    )
    np.testing.assert_allclose(parallel.loo_proba_, model.loo_proba_, rtol=1e-9)


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_one_vs_one_leave_one_out_matches_brute_force_refits(weighted):
    X, y = _three_classes(30, 2)
    w = np.ones(len(y))
    if weighted:
        w = np.random.RandomState(7).randint(0, 4, len(y)).astype(float)
        assert np.any(w == 0)
    params = dict(
        kernel=C(2.0) * RBF(1.5),
        optimizer=None,
        multi_class="one_vs_one",
        tol=1e-9,
        max_iter=1000,
    )
    model = TAPGaussianProcessClassifier(**params).fit(X, y, sample_weight=w)
    brute_proba = np.empty((len(y), 3))
    brute_label = np.empty(len(y), dtype=y.dtype)
    for i in range(len(y)):
        keep = np.arange(len(y)) != i
        refit = TAPGaussianProcessClassifier(**params)
        refit.fit(X[keep], y[keep], sample_weight=w[keep])
        brute_proba[i] = refit.predict_proba(X[i : i + 1])[0]
        brute_label[i] = refit.predict(X[i : i + 1])[0]
    gap = np.abs(model.loo_proba_ - brute_proba)
    assert gap.max() < 0.03 and gap.mean() < 0.005
    # A row of weight zero: leaving it out changes nothing.
    np.testing.assert_allclose(gap[w == 0], 0.0, atol=1e-7)
    brute_error = np.sum(w * (brute_label != y)) / np.sum(w)
    assert abs(model.loo_error_ - brute_error) <= w.max() / w.sum() + 1e-12


def test_optimised_hyperparameter_on_its_bound_warns():
    # The evidence still rises at the upper bound 0.5 of the length scale.
    X, y = _noisy_labels(20, 0)
    model = TAPGaussianProcessClassifier(RBF(0.3, (1e-2, 0.5)))
    with pytest.warns(ConvergenceWarning, match="length_scale is close to the"):
        model.fit(X, y)
    assert model.kernel_.length_scale == pytest.approx(0.5)
    _, gradient = model.log_marginal_likelihood(model.kernel_.theta, True)
    assert gradient[0] > 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)  # inside: no warning
        TAPGaussianProcessClassifier(RBF(0.3, (1e-2, 5.0))).fit(X, y)


def test_x_train_is_a_copy_unless_asked_otherwise():
    # With copy_X_train=True, changing the caller's X afterwards must not
    # change the model's predictions; with False the model holds that array.
    X, y = _noisy_labels(30, 7)
    Xc = X.copy()
    model = TAPGaussianProcessClassifier(optimizer=None).fit(Xc, y)
    proba = model.predict_proba(X)
    Xc[:] = 0
    np.testing.assert_array_equal(model.predict_proba(X), proba)
    assert not np.shares_memory(model.X_train_, Xc)
    Xc = X.copy()
    shared = TAPGaussianProcessClassifier(optimizer=None, copy_X_train=False)
    shared.fit(Xc, y)
    assert np.shares_memory(shared.X_train_, Xc)


# ---------------------------------------------------------- sample weights


def _weighted_data(n=24, seed=0):
    X, y = _noisy_labels(n, seed)
    w = np.random.RandomState(seed + 100).randint(0, 4, n)
    return X, y, w


def test_integer_weights_equal_repeated_rows_with_the_optimiser():
    # Data and bounds with an optimum well inside the bounds (amplitude near
    # 1, length scale near 1.6), so that no bound decides the fit.
    X, y = _noisy_labels(24, 3, flip=0.2)
    w = np.random.RandomState(103).randint(0, 3, len(y))
    kernel = C(1.0, (1e-2, 1e2)) * RBF(1.0, (0.1, 10.0))
    params = dict(kernel=kernel, tol=1e-10, max_iter=1000)
    weighted = TAPGaussianProcessClassifier(**params).fit(X, y, sample_weight=w)
    repeated = TAPGaussianProcessClassifier(**params).fit(
        np.repeat(X, w, axis=0), np.repeat(y, w)
    )
    # The optimiser follows the same path to its own tolerance.
    np.testing.assert_allclose(
        weighted.kernel_.theta, repeated.kernel_.theta, rtol=1e-5, atol=1e-6
    )
    assert weighted.log_marginal_likelihood_value_ == pytest.approx(
        repeated.log_marginal_likelihood_value_, rel=1e-7
    )
    X_new = np.random.RandomState(1).randn(50, 2) * 2
    np.testing.assert_allclose(
        weighted.predict_proba(X_new), repeated.predict_proba(X_new), atol=1e-6
    )
    assert 0.5 < weighted.kernel_.k2.length_scale < 5.0
    # The same evidence at any theta (EP converged tightly: to 1e-9).
    theta = np.log([2.0, 0.6])
    assert weighted.log_marginal_likelihood(theta) == pytest.approx(
        repeated.log_marginal_likelihood(theta), rel=1e-9
    )


@pytest.mark.parametrize("multi_class", ["one_vs_rest", "one_vs_one"])
def test_integer_weights_equal_repeated_rows_for_three_classes(multi_class):
    X, y = _three_classes(30, 5)
    w = np.random.RandomState(3).randint(0, 4, len(y))
    params = dict(optimizer=None, tol=1e-10, max_iter=1000, multi_class=multi_class)
    weighted = TAPGaussianProcessClassifier(**params).fit(X, y, sample_weight=w)
    repeated = TAPGaussianProcessClassifier(**params).fit(
        np.repeat(X, w, axis=0), np.repeat(y, w)
    )
    X_new = np.random.RandomState(1).randn(40, 4)
    for method in ("predict_proba", "decision_function"):
        np.testing.assert_allclose(
            getattr(weighted, method)(X_new),
            getattr(repeated, method)(X_new),
            rtol=1e-7,
            atol=1e-9,
        )
    np.testing.assert_array_equal(weighted.predict(X_new), repeated.predict(X_new))
    assert weighted.log_marginal_likelihood_value_ == pytest.approx(
        repeated.log_marginal_likelihood_value_, rel=1e-9
    )


def test_zero_weight_is_a_dropped_row():
    X, y, w = _weighted_data(seed=1)
    assert np.any(w == 0)
    params = dict(optimizer=None, tol=1e-10)
    weighted = TAPGaussianProcessClassifier(**params).fit(X, y, sample_weight=w)
    kept = w > 0
    dropped = TAPGaussianProcessClassifier(**params).fit(
        X[kept], y[kept], sample_weight=w[kept]
    )
    X_new = np.random.RandomState(2).randn(30, 2)
    np.testing.assert_allclose(
        weighted.predict_proba(X_new), dropped.predict_proba(X_new), rtol=1e-12
    )
    assert weighted.log_marginal_likelihood_value_ == pytest.approx(
        dropped.log_marginal_likelihood_value_, rel=1e-12
    )
    np.testing.assert_allclose(
        weighted.loo_proba_[kept], dropped.loo_proba_, rtol=1e-12
    )
    # Leaving out a row of weight zero changes nothing: its leave-one-out
    # prediction is the model's own.
    np.testing.assert_allclose(
        weighted.loo_proba_[~kept], weighted.predict_proba(X[~kept]), rtol=1e-12
    )
    assert weighted.loo_error_ == pytest.approx(dropped.loo_error_)


@pytest.mark.parametrize("likelihood", ["probit", "logistic"])
def test_weighted_leave_one_out_matches_refits_without_the_row(likelihood):
    X, y = _noisy_labels(36, 3)
    w = np.random.RandomState(4).randint(1, 4, len(y)).astype(float)
    w[::5] = 0.5  # fractional weights too
    params = dict(
        kernel=C(1.0) * RBF(0.8),
        likelihood=likelihood,
        optimizer=None,
        tol=1e-9,
        max_iter=1000,
    )
    model = TAPGaussianProcessClassifier(**params).fit(X, y, sample_weight=w)
    brute = np.empty((len(y), 2))
    for i in range(len(y)):
        keep = np.arange(len(y)) != i
        refit = TAPGaussianProcessClassifier(**params)
        refit.fit(X[keep], y[keep], sample_weight=w[keep])
        brute[i] = refit.predict_proba(X[i : i + 1])[0]
    gap = np.abs(model.loo_proba_ - brute)[:, 1]
    assert gap.max() < 0.03 and gap.mean() < 0.006
    # The error rate counts a row as often as its weight.
    wrong = np.argmax(model.loo_proba_, axis=1) != y
    assert model.loo_error_ == pytest.approx(np.sum(w * wrong) / np.sum(w))
    brute_error = np.sum(w * (np.argmax(brute, axis=1) != y)) / np.sum(w)
    assert abs(model.loo_error_ - brute_error) <= w.max() / w.sum() + 1e-12


@pytest.mark.parametrize("multi_class", ["one_vs_rest", "one_vs_one"])
def test_class_weight_is_the_equivalent_sample_weight(multi_class):
    X, y = _three_classes(36, 6)
    y = np.array(["x", "y", "z"])[y]
    sample_weight = np.random.RandomState(0).randint(1, 3, len(y))
    for class_weight in ("balanced", {"x": 2.0, "y": 0.5, "z": 1.0}):
        with_classes = TAPGaussianProcessClassifier(
            optimizer=None, multi_class=multi_class, class_weight=class_weight
        ).fit(X, y, sample_weight=sample_weight)
        per_class = {
            "x": 2.0,
            "y": 0.5,
            "z": 1.0,
        }
        if class_weight == "balanced":
            # Classes counted by sample weight.
            counts = {c: np.sum(sample_weight[y == c]) for c in "xyz"}
            per_class = {c: sample_weight.sum() / (3 * counts[c]) for c in "xyz"}
        equivalent = sample_weight * np.array([per_class[c] for c in y])
        with_samples = TAPGaussianProcessClassifier(
            optimizer=None, multi_class=multi_class
        ).fit(X, y, sample_weight=equivalent)
        np.testing.assert_allclose(
            with_classes.predict_proba(X), with_samples.predict_proba(X), rtol=1e-12
        )
        np.testing.assert_allclose(
            with_classes.loo_proba_, with_samples.loo_proba_, rtol=1e-12
        )
        assert with_classes.loo_error_ == pytest.approx(with_samples.loo_error_)
    unweighted = TAPGaussianProcessClassifier(optimizer=None).fit(X, y)
    assert not np.allclose(unweighted.predict_proba(X), with_classes.predict_proba(X))


def test_balanced_class_weight_with_integer_weights_equals_repeated_rows():
    X, y = _three_classes(30, 2)
    w = np.random.RandomState(5).randint(0, 4, len(y))
    params = dict(optimizer=None, class_weight="balanced", tol=1e-10, max_iter=1000)
    weighted = TAPGaussianProcessClassifier(**params).fit(X, y, sample_weight=w)
    repeated = TAPGaussianProcessClassifier(**params).fit(
        np.repeat(X, w, axis=0), np.repeat(y, w)
    )
    np.testing.assert_allclose(
        weighted.predict_proba(X), repeated.predict_proba(X), rtol=1e-7, atol=1e-9
    )


def test_invalid_weights_are_refused():
    X, y = _noisy_labels(10, 0)
    model = TAPGaussianProcessClassifier(optimizer=None)
    with pytest.raises(ValueError, match="(?i)negative"):
        model.fit(X, y, sample_weight=-np.ones(10))
    with pytest.raises(ValueError, match="zero"):
        model.fit(X, y, sample_weight=np.zeros(10))
    X3, y3 = _three_classes(12)
    only_first = (y3 == 0).astype(float)
    with pytest.raises(ValueError, match="one-vs-one pair"):
        TAPGaussianProcessClassifier(optimizer=None, multi_class="one_vs_one").fit(
            X3, y3, sample_weight=only_first
        )


# ------------------------------------------------- stopping by a callback


def test_stop_during_the_search_keeps_the_best_point_so_far():
    pytest.importorskip("sklearn.callback")
    X, y = make_moons(40, noise=0.3, random_state=0)
    evaluations = []

    def recording_lbfgs(obj_func, initial_theta, bounds):
        # The fit's own L-BFGS-B call, recording every evaluation.
        def objective(theta):
            value, gradient = obj_func(theta)
            evaluations.append((np.array(theta), value))
            return value, gradient

        result = minimize(
            objective, initial_theta, method="L-BFGS-B", jac=True, bounds=bounds
        )
        return result.x, result.fun

    full = TAPGaussianProcessClassifier(optimizer=recording_lbfgs, n_jobs=1).fit(X, y)
    assert len(evaluations) > 6
    # The first five evaluations end before the deadline; the sixth asks to
    # stop.
    stopped = TAPGaussianProcessClassifier(n_jobs=1)
    stopped.set_callbacks(TickDeadline(6, task_name=None))
    with pytest.warns(ConvergenceWarning, match="callback asked the fit to stop"):
        stopped.fit(X, y)
    best_theta, best_value = min(evaluations[:6], key=lambda e: e[1])
    # The same point, up to the exp/log round trip of the kernel's parameters
    # (numpy's AVX-512 exp and log round it differently in the last bit);
    # any other evaluation differs by far more.
    np.testing.assert_allclose(stopped.kernel_.theta, best_theta, rtol=1e-13, atol=0)
    assert stopped.log_marginal_likelihood_value_ == pytest.approx(
        -best_value, rel=1e-9
    )
    assert stopped.log_marginal_likelihood_value_ < full.log_marginal_likelihood_value_
    # The stopped model is the model of that kernel: a fixed-kernel fit there,
    # up to the EP tolerance of the search's evaluations (at most 1e-3
    # posterior standard deviations, times the probit's slope below 0.4).
    at_best = TAPGaussianProcessClassifier(kernel=stopped.kernel_, optimizer=None)
    np.testing.assert_allclose(
        stopped.predict_proba(X), at_best.fit(X, y).predict_proba(X), atol=4e-4
    )


def test_stop_during_the_mean_field_solve_keeps_its_iterate():
    pytest.importorskip("sklearn.callback")
    X, y = _noisy_labels(40, 2)
    params = dict(kernel=C(4.0) * RBF(0.5), optimizer=None, tol=1e-10)
    converged = TAPGaussianProcessClassifier(**params).fit(X, y)
    assert converged.n_iter_ > 4
    stopped = TAPGaussianProcessClassifier(**params)
    stopped.set_callbacks(TickDeadline(4, task_name=None))  # stops at sweep 4
    with pytest.warns(ConvergenceWarning, match="callback asked the fit to stop"):
        stopped.fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        four = TAPGaussianProcessClassifier(**params, max_iter=4).fit(X, y)
    np.testing.assert_array_equal(stopped.predict_proba(X), four.predict_proba(X))
    np.testing.assert_array_equal(stopped.loo_proba_, four.loo_proba_)
    assert not np.allclose(stopped.predict_proba(X), converged.predict_proba(X))


# ------------------------------------- scikit-learn's checks, both configurations


@pytest.mark.parametrize(
    "params", [{}, {"optimizer": None}], ids=["optimised", "fixed kernel"]
)
def test_scikit_learn_decision_proba_consistency_check_passes(params):
    from sklearn.utils.estimator_checks import check_decision_proba_consistency

    model = TAPGaussianProcessClassifier(**params)
    check_decision_proba_consistency("TAPGaussianProcessClassifier", model)


def test_scikit_learn_class_weight_check_passes_with_a_kernel_of_the_data_scale():
    from sklearn.utils.estimator_checks import check_class_weight_classifiers

    # The check's blobs have standard deviation 20.  With RBF(1) fixed most
    # test points are out of reach of every training point, where the
    # prediction is the prior's 1/2 whatever the weights; a kernel of the
    # data's scale passes, and so does the default kernel, which starts at
    # the median distance between the inputs.
    for kernel in (C(1.0) * RBF(20.0), None):
        model = TAPGaussianProcessClassifier(kernel, optimizer=None)
        check_class_weight_classifiers("TAPGaussianProcessClassifier", model)
    with pytest.raises(AssertionError):
        check_class_weight_classifiers(
            "TAPGaussianProcessClassifier",
            TAPGaussianProcessClassifier(C(1.0) * RBF(1.0), optimizer=None),
        )


def test_scikit_learn_sample_weight_equivalence_check_passes():
    from sklearn.utils.estimator_checks import (
        check_sample_weight_equivalence_on_dense_data,
    )

    # The check compares to rtol 1e-7: the mean-field equations are solved
    # to well below that.
    model = TAPGaussianProcessClassifier(optimizer=None, tol=1e-8)
    check_sample_weight_equivalence_on_dense_data("TAPGaussianProcessClassifier", model)


def test_a_passed_deadline_stops_every_problem_in_its_worker():
    pytest.importorskip("sklearn.callback")

    X, y = _three_classes(30, 0)
    kernel = C(1.0) * RBF(1.0)
    model = TAPGaussianProcessClassifier(kernel, n_jobs=2)
    # A wall-clock budget already spent: every problem, in its worker, stops
    # at its first evaluation and keeps it, and its solve at the first sweep.
    model.set_callbacks(TickDeadline(0, task_name=None))  # already passed
    with pytest.warns(ConvergenceWarning, match="callback asked the fit to stop"):
        model.fit(X, y)
    np.testing.assert_array_equal(model.kernel_.theta, np.tile(kernel.theta, 3))
    assert model.n_iter_ == 1
    proba = model.predict_proba(X)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert model.score(X, y) > 0.7


def test_a_search_whose_steps_stall_ends_at_its_best_point():
    # An optimiser whose steps shrink below what EP resolves (1e-9 in the
    # log-hyperparameters) is ended after three such steps; the fit keeps the
    # best point it evaluated and finishes normally.
    X, y = _noisy_labels(40, 3)
    calls, values = [], []

    def shrinking(obj_func, initial_theta, bounds):
        for k in range(50):
            point = np.asarray(initial_theta) + 1e-9 * k
            calls.append(point)
            values.append(obj_func(point)[0])
        raise AssertionError("the search did not end")

    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        model = TAPGaussianProcessClassifier(optimizer=shrinking).fit(X, y)
    # The start, two stalled steps evaluated, the third ends the search.
    assert len(calls) == 4 and len(values) == 3
    best = calls[int(np.argmin(values))]
    np.testing.assert_allclose(model.kernel_.theta, best, rtol=0, atol=1e-12)
    assert np.isfinite(model.loo_error_)
