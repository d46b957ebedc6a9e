"""Weighted sites of the TAP / EP core against EP on repeated points.

A site of weight ``w`` stands for the likelihood raised to ``w``: for an
integer weight everything EP computes must equal EP on the data with the
point repeated ``w`` times (scikit-learn's meaning of ``sample_weight``).
"""

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import RBF
from sklearn.gaussian_process.kernels import ConstantKernel as C

from sklearn_meanfield.tap._ep import expectation_propagation
from sklearn_meanfield.tap._evidence import (
    ep_evidence_gradient,
    ep_label_noise_gradient,
)
from sklearn_meanfield.tap._likelihoods import NoisyStepLikelihood, make_likelihood
from sklearn_meanfield.tap._mean_field import PriorVariance, mean_field_iteration
from sklearn_meanfield.tap._posterior import KernelPosterior
from sklearn_meanfield.tap._weight_space import WeightSpacePosterior
from sklearn_meanfield.tap._weights import positive_site_weights, weighted_error_rate

LIKELIHOODS = [
    ("probit", 0.0),
    ("probit", 0.1),
    ("step", 0.1),
    ("logistic", 0.0),
    ("logistic", 0.1),
]
TIGHT = dict(tol=1e-13, max_iter=3000)


def _problem(n, seed):
    rng = np.random.RandomState(seed)
    X = rng.uniform(-2, 2, size=(n, 2))
    t = np.where(
        np.sin(2 * X[:, 0]) + 0.5 * X[:, 1] + 0.3 * rng.randn(n) > 0, 1.0, -1.0
    )
    weights = rng.randint(1, 4, size=n).astype(float)
    return X, t, weights


def _repeat_index(weights):
    """Rows of the repeated data set and the first copy of each point."""
    index = np.repeat(np.arange(len(weights)), weights.astype(int))
    first = np.searchsorted(index, np.arange(len(weights)))
    return index, first


@pytest.mark.parametrize("name, label_noise", LIKELIHOODS)
def test_integer_weights_equal_repeated_points(name, label_noise):
    X, t, w = _problem(14, 0)
    kernel = C(1.5) * RBF(0.9)
    K, K_gradient = kernel(X, eval_gradient=True)
    likelihood = make_likelihood(name, label_noise)
    index, first = _repeat_index(w)
    weighted = expectation_propagation(
        KernelPosterior(K), t, likelihood, site_weights=w, **TIGHT
    )
    repeated = expectation_propagation(
        KernelPosterior(K[np.ix_(index, index)]), t[index], likelihood, **TIGHT
    )
    assert weighted.converged and repeated.converged
    # The repeated fixed point is symmetric: every copy holds 1/w of the site.
    np.testing.assert_allclose(
        weighted.tau, np.bincount(index, repeated.tau), rtol=1e-8, atol=1e-12
    )
    np.testing.assert_allclose(
        weighted.nu, np.bincount(index, repeated.nu), rtol=1e-8, atol=1e-12
    )
    np.testing.assert_allclose(weighted.mean, repeated.mean[first], rtol=1e-8)
    np.testing.assert_allclose(weighted.var, repeated.var[first], rtol=1e-8)
    # One copy's cavity is the repeated EP's cavity of that copy.
    np.testing.assert_allclose(
        weighted.copy_cavity_mean, repeated.cavity_mean[first], rtol=1e-8, atol=1e-12
    )
    np.testing.assert_allclose(
        weighted.copy_cavity_var, repeated.cavity_var[first], rtol=1e-8
    )
    assert weighted.log_evidence == pytest.approx(repeated.log_evidence, rel=1e-9)
    np.testing.assert_allclose(
        ep_evidence_gradient(weighted, K_gradient),
        ep_evidence_gradient(
            repeated, K_gradient[np.ix_(index, index, np.arange(K_gradient.shape[2]))]
        ),
        rtol=1e-7,
        atol=1e-10,
    )
    if label_noise > 0:
        assert ep_label_noise_gradient(weighted, t, likelihood) == pytest.approx(
            ep_label_noise_gradient(repeated, t[index], likelihood), rel=1e-7
        )


@pytest.mark.parametrize("name, label_noise", [("probit", 0.0), ("step", 0.1)])
def test_weighted_evidence_gradients_match_finite_differences(name, label_noise):
    # The weighted (power-EP) evidence is stationary in the sites, so its
    # gradient is the explicit one: checked against central differences.
    X, t, w = _problem(12, 1)
    w = w * 0.7  # non-integer weights: the analytic continuation
    likelihood = make_likelihood(name, label_noise)

    def solve(log_amplitude, kappa=label_noise):
        K = np.exp(log_amplitude) * RBF(0.9)(X)
        return expectation_propagation(
            KernelPosterior(K),
            t,
            make_likelihood(name, kappa),
            site_weights=w,
            **TIGHT,
        )

    theta, h = 0.3, 1e-5
    solution = solve(theta)
    gradient = ep_evidence_gradient(solution, (np.exp(theta) * RBF(0.9)(X))[..., None])
    numeric = (solve(theta + h).log_evidence - solve(theta - h).log_evidence) / (2 * h)
    assert gradient[0] == pytest.approx(numeric, rel=1e-6, abs=1e-8)
    if label_noise > 0:
        analytic = ep_label_noise_gradient(solution, t, likelihood)
        numeric = (
            solve(theta, label_noise + h).log_evidence
            - solve(theta, label_noise - h).log_evidence
        ) / (2 * h)
        assert analytic == pytest.approx(numeric, rel=1e-6)


@pytest.mark.parametrize("name, label_noise", [("probit", 0.0), ("step", 0.1)])
def test_weight_space_weights_equal_repeated_rows(name, label_noise):
    rng = np.random.RandomState(3)
    Phi = rng.randn(40, 4) / 2.0
    t = np.where(Phi @ np.array([1.0, -1.0, 0.5, 0.0]) + 0.3 * rng.randn(40) > 0, 1, -1)
    t = t.astype(float)
    w = rng.randint(1, 4, size=40).astype(float)
    index, first = _repeat_index(w)
    likelihood = make_likelihood(name, label_noise)
    weighted = expectation_propagation(
        WeightSpacePosterior(Phi), t, likelihood, site_weights=w, **TIGHT
    )
    repeated = expectation_propagation(
        WeightSpacePosterior(Phi[index]), t[index], likelihood, **TIGHT
    )
    dual = expectation_propagation(
        KernelPosterior(Phi @ Phi.T), t, likelihood, site_weights=w, **TIGHT
    )
    np.testing.assert_allclose(
        weighted.posterior.weight_mean, repeated.posterior.weight_mean, rtol=1e-8
    )
    np.testing.assert_allclose(weighted.var, repeated.var[first], rtol=1e-8)
    np.testing.assert_allclose(weighted.copy_cavity_var, repeated.cavity_var[first])
    assert weighted.log_evidence == pytest.approx(repeated.log_evidence, rel=1e-9)
    # The weight-space and kernel forms of the weighted problem agree.
    np.testing.assert_allclose(weighted.mean, dual.mean, rtol=1e-7, atol=1e-10)
    assert weighted.log_evidence == pytest.approx(dual.log_evidence, rel=1e-8)


def test_power_ep_with_weights_equals_repeated_power_ep():
    # The perceptron's fractional fallback: power 0.5 on p, with weights,
    # is power 0.5 on every repeated copy (the likelihood passed is p**0.5).
    X, t, w = _problem(14, 2)
    K = RBF(0.9)(X)
    index, first = _repeat_index(w)
    powered = NoisyStepLikelihood(1.0 / (1.0 + (0.9 / 0.1) ** 0.5), sigma=0.0)
    weighted = expectation_propagation(
        KernelPosterior(K), t, powered, power=0.5, site_weights=w, **TIGHT
    )
    repeated = expectation_propagation(
        KernelPosterior(K[np.ix_(index, index)]), t[index], powered, power=0.5, **TIGHT
    )
    np.testing.assert_allclose(
        weighted.tau, np.bincount(index, repeated.tau), rtol=1e-8
    )
    np.testing.assert_allclose(weighted.mean, repeated.mean[first], rtol=1e-8)
    np.testing.assert_allclose(
        weighted.copy_cavity_var, repeated.cavity_var[first], rtol=1e-8
    )


@pytest.mark.parametrize("label_noise", [0.0, 0.1])
def test_naive_mean_field_weights_equal_repeated_points(label_noise):
    X, t, w = _problem(14, 4)
    K = (C(2.0) * RBF(0.9))(X)
    index, first = _repeat_index(w)
    likelihood = make_likelihood("probit", label_noise)
    settings = dict(tol=1e-13, max_iter=5000, damping=0.2)
    weighted = mean_field_iteration(
        KernelPosterior(K),
        t,
        likelihood,
        PriorVariance(np.diag(K).copy()),
        site_weights=w,
        **settings,
    )
    K_rep = K[np.ix_(index, index)]
    repeated = mean_field_iteration(
        KernelPosterior(K_rep),
        t[index],
        likelihood,
        PriorVariance(np.diag(K_rep).copy()),
        **settings,
    )
    assert weighted.converged and repeated.converged
    np.testing.assert_allclose(
        weighted.alpha, np.bincount(index, repeated.alpha), rtol=1e-8
    )
    np.testing.assert_allclose(weighted.mean, repeated.mean[first], rtol=1e-8)
    np.testing.assert_allclose(weighted.var, repeated.var[first], rtol=1e-7)
    np.testing.assert_allclose(
        weighted.copy_cavity_mean, repeated.cavity_mean[first], rtol=1e-8, atol=1e-12
    )
    # The whole point removed: every copy's reaction term.
    np.testing.assert_allclose(
        weighted.cavity_mean,
        repeated.mean[first] - np.diag(K) * np.bincount(index, repeated.alpha),
        rtol=1e-8,
        atol=1e-12,
    )


def test_zero_weight_equals_dropping_the_point():
    X, t, w = _problem(14, 5)
    w[[2, 9]] = 0.0
    K = RBF(0.9)(X)
    likelihood = make_likelihood("probit", 0.05)
    keep, site_weights = positive_site_weights(w, len(w))
    assert keep.tolist() == [i for i in range(14) if i not in (2, 9)]
    dropped = expectation_propagation(
        KernelPosterior(K[np.ix_(keep, keep)]),
        t[keep],
        likelihood,
        site_weights=site_weights,
        **TIGHT,
    )
    index, first = _repeat_index(w)  # zero weights: no copy at all
    repeated = expectation_propagation(
        KernelPosterior(K[np.ix_(index, index)]), t[index], likelihood, **TIGHT
    )
    np.testing.assert_allclose(dropped.tau, np.bincount(index, repeated.tau)[keep])
    assert dropped.log_evidence == pytest.approx(repeated.log_evidence, rel=1e-9)
    assert positive_site_weights(np.ones(3), 3)[1] is None
    with pytest.raises(ValueError, match="positive"):
        expectation_propagation(KernelPosterior(K), t, likelihood, site_weights=w)


def test_weighted_cavity_removes_the_whole_site():
    # The leave-one-out cavity is the Gaussian posterior without any copy of
    # the point, computed from scratch.
    X, t, w = _problem(16, 6)
    K = RBF(0.9)(X)
    solution = expectation_propagation(
        KernelPosterior(K), t, NoisyStepLikelihood(0.1, 0.0), site_weights=w, **TIGHT
    )
    for i in range(0, 16, 3):
        keep = np.arange(16) != i
        precision = np.linalg.inv(K) + np.diag(np.where(keep, solution.tau, 0.0))
        covariance = np.linalg.inv(precision)
        mean = covariance @ np.where(keep, solution.nu, 0.0)
        assert solution.cavity_var[i] == pytest.approx(covariance[i, i], rel=1e-7)
        assert solution.cavity_mean[i] == pytest.approx(mean[i], rel=1e-6, abs=1e-9)


def test_weighted_leave_one_out_matches_refits_without_the_point():
    # The built-in leave-one-out predictive (whole weighted site removed)
    # against EP refitted without the point (probit, where the cavity
    # argument is accurate: the unweighted gap is below 0.02 per point).
    X, t, w = _problem(30, 7)
    K = (C(2.0) * RBF(0.8))(X)
    likelihood = make_likelihood("probit", 0.0)
    solution = expectation_propagation(
        KernelPosterior(K), t, likelihood, site_weights=w, **TIGHT
    )
    builtin = likelihood.predictive_positive(solution.cavity_mean, solution.cavity_var)
    brute = np.empty(30)
    for i in range(30):
        keep = np.flatnonzero(np.arange(30) != i)
        refit = expectation_propagation(
            KernelPosterior(K[np.ix_(keep, keep)]),
            t[keep],
            likelihood,
            site_weights=w[keep],
            **TIGHT,
        )
        # The refit's predictive at point i (GP conditional on its sites).
        k = K[keep, i]
        mean = k @ refit.alpha
        var = K[i, i] - refit.posterior.variance_reduction(k[:, None])[0]
        brute[i] = likelihood.predictive_positive(np.array([mean]), np.array([var]))[0]
    gap = np.abs(builtin - brute)
    assert np.max(gap) < 0.03
    assert np.mean(gap) < 0.008
    # And the weighted error of the two predictives (labels +-1).
    loo_pred = np.where(builtin > 0.5, 1.0, -1.0)
    brute_pred = np.where(brute > 0.5, 1.0, -1.0)
    assert (
        abs(weighted_error_rate(t, loo_pred, w) - weighted_error_rate(t, brute_pred, w))
        <= np.max(w) / np.sum(w) + 1e-12
    )


@pytest.mark.parametrize("name, label_noise", LIKELIHOODS)
def test_unit_weights_are_the_unweighted_code_bit_for_bit(name, label_noise):
    X, t, _ = _problem(14, 8)
    K = RBF(0.9)(X)
    likelihood = make_likelihood(name, label_noise)
    plain = expectation_propagation(KernelPosterior(K), t, likelihood, tol=1e-9)
    ones = expectation_propagation(
        KernelPosterior(K), t, likelihood, tol=1e-9, site_weights=np.ones(14)
    )
    for attribute in ("tau", "nu", "mean", "var", "cavity_mean", "cavity_var", "log_z"):
        np.testing.assert_array_equal(
            getattr(plain, attribute), getattr(ones, attribute)
        )
    assert plain.log_evidence == ones.log_evidence
    assert plain.n_iter == ones.n_iter
    naive = [
        mean_field_iteration(
            KernelPosterior(K),
            t,
            likelihood,
            PriorVariance(np.diag(K).copy()),
            tol=1e-9,
            site_weights=weights,
        )
        for weights in (None, np.ones(14))
    ]
    np.testing.assert_array_equal(naive[0].alpha, naive[1].alpha)
    np.testing.assert_array_equal(naive[0].cavity_mean, naive[1].cavity_mean)


def test_weighted_error_rate_counts_each_point_by_its_weight():
    y = np.array([0, 1, 1, 0])
    pred = np.array([1, 1, 0, 0])
    assert weighted_error_rate(y, pred, np.array([3.0, 1.0, 1.0, 5.0])) == 0.4
    assert weighted_error_rate(y, pred) == 0.5


# ------------------------------------------ weights below one (the step)


def test_noise_free_step_weights_below_one_change_nothing():
    # Theta**w = Theta: a noise-free step site of weight below one is the
    # unweighted site (plain EP on p**w), not a power above one, whose
    # cavities would be improper.
    X, t, w = _problem(16, 9)
    K = (C(2.0) * RBF(0.9))(X)
    likelihood = make_likelihood("step", 0.0)
    plain = expectation_propagation(KernelPosterior(K), t, likelihood, **TIGHT)
    light = expectation_propagation(
        KernelPosterior(K), t, likelihood, site_weights=w / 4.0, **TIGHT
    )
    assert light.converged
    np.testing.assert_allclose(light.tau, plain.tau, rtol=1e-8)
    np.testing.assert_allclose(light.nu, plain.nu, rtol=1e-8)
    assert light.log_evidence == pytest.approx(plain.log_evidence, rel=1e-9)


def test_noisy_step_weights_below_one_are_ep_on_the_powered_likelihood():
    # (k + (1 - 2k) Theta)**w = c * noisy step with label noise k_w, so equal
    # weights w < 1 give unweighted EP with k_w; the evidence adds n log c.
    X, t, _ = _problem(16, 10)
    K = (C(2.0) * RBF(0.9))(X)
    kappa, w = 0.1, 0.4
    kappa_w = kappa**w / (kappa**w + (1 - kappa) ** w)
    light = expectation_propagation(
        KernelPosterior(K),
        t,
        make_likelihood("step", kappa),
        site_weights=np.full(16, w),
        **TIGHT,
    )
    reference = expectation_propagation(
        KernelPosterior(K), t, make_likelihood("step", kappa_w), **TIGHT
    )
    np.testing.assert_allclose(light.tau, reference.tau, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(light.mean, reference.mean, rtol=1e-8)
    log_c = np.log(kappa**w + (1 - kappa) ** w)
    assert light.log_evidence == pytest.approx(
        reference.log_evidence + 16 * log_c, rel=1e-9
    )


def test_mixed_weights_evidence_gradients_match_finite_differences():
    # Weights on both sides of one (power 1 / w above, plain EP on p**w
    # below): the evidence is stationary in the sites, its gradients in the
    # kernel and in the label noise are the explicit ones.
    X, t, w = _problem(14, 11)
    w = w * np.where(np.arange(14) % 2 == 0, 0.35, 1.0)
    assert np.any(w < 1) and np.any(w > 1)
    K0 = RBF(0.9)(X)

    def solve(log_amplitude, kappa):
        return expectation_propagation(
            KernelPosterior(np.exp(log_amplitude) * K0),
            t,
            make_likelihood("step", kappa),
            site_weights=w,
            **TIGHT,
        )

    theta, kappa, h = 0.4, 0.1, 1e-6
    solution = solve(theta, kappa)
    assert solution.converged
    gradient = ep_evidence_gradient(solution, (np.exp(theta) * K0)[..., None])[0]
    numeric = (
        solve(theta + h, kappa).log_evidence - solve(theta - h, kappa).log_evidence
    ) / (2 * h)
    assert gradient == pytest.approx(numeric, rel=1e-6, abs=1e-8)
    analytic = ep_label_noise_gradient(solution, t, make_likelihood("step", kappa))
    numeric = (
        solve(theta, kappa + h).log_evidence - solve(theta, kappa - h).log_evidence
    ) / (2 * h)
    assert analytic == pytest.approx(numeric, rel=1e-6)


# -------------------------- weights below one (probit, logistic: quadrature)


def _tilted_by_quad(log_p, m, v, e):
    """log Z, tilted mean and variance of N(h; m, v) p(h)**e by adaptive
    quadrature (scipy), around the integrand's peak."""
    from scipy.integrate import quad
    from scipy.optimize import minimize_scalar

    sd = np.sqrt(v)

    def log_f(h):
        return -0.5 * ((h - m) / sd) ** 2 + e * log_p(h)

    peak = minimize_scalar(lambda h: -log_f(h), bracket=(m - sd, m + sd)).x
    top = log_f(peak)
    span = 40.0 * sd
    points = [peak - 1.0, peak, peak + 1.0]
    moments = [
        quad(
            lambda h, k=k: h**k * np.exp(log_f(h) - top),
            peak - span,
            peak + span,
            points=points,
            limit=500,
            epsabs=0.0,
            epsrel=1e-13,
        )[0]
        for k in range(3)
    ]
    log_z = np.log(moments[0]) + top - np.log(sd * np.sqrt(2 * np.pi))
    mean = moments[1] / moments[0]
    return log_z, mean, moments[2] / moments[0] - mean**2


def _reference_log_likelihood(name, label_noise):
    """``log p(+1 | h)`` with label noise, from scipy's own functions."""
    from scipy.special import log_expit, log_ndtr

    base = log_ndtr if name == "probit" else log_expit
    log_noise = np.log(label_noise) if label_noise > 0 else -np.inf
    return lambda h: np.logaddexp(log_noise, np.log1p(-2 * label_noise) + base(h))


@pytest.mark.parametrize("name", ["probit", "logistic"])
@pytest.mark.parametrize("label_noise", [0.0, 0.1])
def test_powered_likelihood_moments_match_quadrature(name, label_noise):
    likelihood = make_likelihood(name, label_noise)
    log_p = _reference_log_likelihood(name, label_noise)

    cases = [(0.3, 1.0), (-2.0, 4.0), (-25.0, 1.0), (5.0, 1e4), (-300.0, 1e4)]
    e = np.full(len(cases), 0.35)
    m = np.array([c[0] for c in cases])
    v = np.array([c[1] for c in cases])
    t = np.ones(len(cases))
    powered = likelihood.powered(e)
    log_z, first, second = powered.moments(t, m, v)
    for i, (mi, vi) in enumerate(cases):
        ref_log_z, ref_mean, ref_var = _tilted_by_quad(log_p, mi, vi, 0.35)
        assert log_z[i] == pytest.approx(ref_log_z, rel=1e-8, abs=1e-10)
        # first = (E h - m) / v, second = (1 - Var h / v) / v.
        assert first[i] == pytest.approx((ref_mean - mi) / vi, rel=1e-6, abs=1e-12)
        assert second[i] == pytest.approx((1 - ref_var / vi) / vi, rel=1e-5, abs=1e-12)
    # The labels' sign enters through t h; exponent one is the likelihood.
    flipped = powered.moments(-t, -m, v)
    np.testing.assert_allclose(flipped[0], log_z)
    np.testing.assert_allclose(flipped[1], -first)
    same = likelihood.powered(np.ones(len(cases))).moments(t, m, v)
    for ours, theirs in zip(same, likelihood.moments(t, m, v)):
        np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("name", ["probit", "logistic"])
@pytest.mark.parametrize("label_noise", [0.0, 0.01])
def test_powered_moments_of_wide_cavities_match_a_dense_grid(name, label_noise):
    # Cavities a thousand likelihood widths wide (a large kernel amplitude):
    # the tilted density turns within a thousandth of the cavity's sd.  The
    # reference is the trapezoid rule on a uniform grid of 2e6 nodes over
    # 40 cavity sds either side (25 nodes per likelihood width), exact to
    # rounding here.
    likelihood = make_likelihood(name, label_noise)
    log_p = _reference_log_likelihood(name, label_noise)
    xi = np.linspace(-40.0, 40.0, 2_000_001)
    cases = [
        (0.0, 1e6, 0.7),
        (-300.0, 4e5, 0.3),
        (2500.0, 9e5, 0.05),
        (-40.0, 1e4, 0.9),
    ]
    m, v, e = (np.array(column) for column in zip(*cases))
    log_z, first, second = likelihood.powered(e).moments(np.ones(len(m)), m, v)
    for i in range(len(cases)):
        sd = np.sqrt(v[i])
        h = m[i] + sd * xi
        log_f = -0.5 * xi**2 + e[i] * log_p(h)
        peak = log_f.max()
        f = np.exp(log_f - peak)
        mass = f.sum()
        mean = f @ xi / mass
        var = f @ (xi - mean) ** 2 / mass
        ref_log_z = np.log(mass * (xi[1] - xi[0])) + peak - 0.5 * np.log(2 * np.pi)
        assert log_z[i] == pytest.approx(ref_log_z, abs=1e-9)
        # In cavity units: first = E[xi] / sd, second = (1 - Var xi) / v.
        assert first[i] * sd == pytest.approx(mean, abs=1e-9)
        assert 1.0 - second[i] * v[i] == pytest.approx(var, rel=1e-9)


@pytest.mark.parametrize("name", ["probit", "logistic"])
def test_probit_and_logistic_weights_below_one_converge(name):
    # With the power 1 / w above one these did not converge in 2000 sweeps
    # (amplitude 100, weights 0.3); plain EP on p**w converges, its evidence
    # is stationary (gradient == central differences in the amplitude and
    # in the label noise).
    rng = np.random.RandomState(0)
    X = rng.uniform(-2, 2, (40, 2))
    t = np.where(X[:, 0] + 0.3 * rng.randn(40) > 0.8, 1.0, -1.0)
    K0 = RBF(0.3)(X)
    w = np.where(t < 0, 0.3, 1.0)

    def solve(log_amplitude, kappa):
        return expectation_propagation(
            KernelPosterior(np.exp(log_amplitude) * K0),
            t,
            make_likelihood(name, kappa),
            site_weights=w,
            tol=1e-11,
            max_iter=2000,
            weights_below_power="tempered",
        )

    theta, kappa, h = np.log(100.0), 0.05, 1e-5
    solution = solve(theta, kappa)
    assert solution.converged
    gradient = ep_evidence_gradient(solution, (np.exp(theta) * K0)[..., None])[0]
    numeric = (
        solve(theta + h, kappa).log_evidence - solve(theta - h, kappa).log_evidence
    ) / (2 * h)
    assert gradient == pytest.approx(numeric, rel=1e-5, abs=1e-7)
    analytic = ep_label_noise_gradient(solution, t, make_likelihood(name, kappa))
    numeric = (
        solve(theta, kappa + h).log_evidence - solve(theta, kappa - h).log_evidence
    ) / (2 * h)
    assert analytic == pytest.approx(numeric, rel=1e-5)


@pytest.mark.parametrize("name", ["probit", "logistic"])
def test_power_mode_is_consistent_under_splitting_fractional_weights(name):
    # weights_below_power="power": k copies of weight w / k are one site of
    # weight w, for fractional w too (here 0.9 as three copies of 0.3).
    X, t, w = _problem(12, 15)
    w = w * 0.3
    K = RBF(0.9)(X)
    index, first = _repeat_index(np.full(12, 3.0))
    likelihood = make_likelihood(name, 0.0)
    one = expectation_propagation(
        KernelPosterior(K),
        t,
        likelihood,
        site_weights=3 * w,
        weights_below_power="power",
        **TIGHT,
    )
    copies = expectation_propagation(
        KernelPosterior(K[np.ix_(index, index)]),
        t[index],
        likelihood,
        site_weights=w[index],
        weights_below_power="power",
        **TIGHT,
    )
    assert one.converged and copies.converged
    np.testing.assert_allclose(one.tau, np.bincount(index, copies.tau), rtol=1e-8)
    np.testing.assert_allclose(one.mean, copies.mean[first], rtol=1e-8)
    assert one.log_evidence == pytest.approx(copies.log_evidence, rel=1e-9)


@pytest.mark.parametrize("name", ["probit", "logistic"])
@pytest.mark.parametrize("weight", [0.2, 0.5])
def test_default_mode_converges_for_light_sites_of_strong_sites(name, weight):
    # Power EP's cavity removes 1 / w of a site: below AUTO_TEMPERED_BELOW it
    # turns improper where the site dominates (amplitude 1000, the default
    # kernel's largest).  The default mode tempers those sites; a site of
    # weight 1 or more is untouched (repeated rows stay exact).
    rng = np.random.RandomState(0)
    X = rng.uniform(-2, 2, (40, 2))
    t = np.where(X[:, 0] + 0.3 * rng.randn(40) > 0.2, 1.0, -1.0)
    w = np.where(t > 0, weight, 1.0)
    solution = expectation_propagation(
        KernelPosterior(1000.0 * RBF(0.5)(X)),
        t,
        make_likelihood(name, 0.0),
        site_weights=w,
        max_iter=500,
    )
    assert solution.converged
    assert np.all(np.isfinite(solution.cavity_mean))
    assert np.all(solution.cavity_var > 0)
