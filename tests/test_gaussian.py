"""The Gaussian helpers against 50-digit references from mpmath."""

import mpmath
import numpy as np
import pytest
from scipy.special import log_ndtr, logsumexp

from sklearn_meanfield._gaussian import (
    _logistic_mode_offset,
    gauss_hermite_expectation,
    hermite_rule,
    log_noisy_step,
    log_norm_cdf,
    log_norm_pdf,
    logistic_normal_moments,
    noisy_step_moments,
    norm_pdf_cdf_ratio,
)

mpmath.mp.dps = 50
Z_GRID = np.concatenate([np.linspace(-40, 40, 161), [-1e-8, 1e-8, -37.5, 8.3]])


def _mp_cdf(z):
    return mpmath.ncdf(mpmath.mpf(z))


def _mp_pdf(z):
    z = mpmath.mpf(z)
    return mpmath.exp(-z * z / 2) / mpmath.sqrt(2 * mpmath.pi)


def _mp_log_cdf(z):
    # log Phi(z) = log1p(-Phi(-z)) keeps the upper tail's tiny value at 50 digits.
    z = mpmath.mpf(z)
    return mpmath.log(_mp_cdf(z)) if z <= 0 else mpmath.log1p(-_mp_cdf(-z))


def _relative_error(got, expected):
    """Relative error, absolute below the normal range of doubles."""
    expected = float(expected)
    return abs(got - expected) / max(abs(expected), 1e-290)


@pytest.mark.parametrize("z", Z_GRID)
def test_log_norm_cdf_matches_mpmath(z):
    got = float(log_norm_cdf(z))
    assert _relative_error(got, _mp_log_cdf(z)) < 1e-10
    if z <= 0:
        assert got == pytest.approx(float(log_ndtr(z)), rel=1e-14)


@pytest.mark.parametrize("z", Z_GRID)
def test_pdf_cdf_ratio_matches_mpmath(z):
    expected = _mp_pdf(z) / _mp_cdf(z)
    if float(expected) == 0.0:  # below the smallest double: only check finiteness
        assert np.isfinite(norm_pdf_cdf_ratio(z))
        return
    assert _relative_error(float(norm_pdf_cdf_ratio(z)), expected) < 1e-10


def test_pdf_cdf_ratio_tail_asymptotics():
    # phi/Phi(z) = -z - 1/z + 2/z^3 + O(z^-5) for z -> -inf: no underflow to nan.
    z = np.array([-1e3, -1e5])
    got = norm_pdf_cdf_ratio(z)
    np.testing.assert_allclose(got, -z - 1 / z + 2 / z**3, rtol=1e-12)


@pytest.mark.parametrize("kappa", [0.0, 1e-6, 0.05, 0.3])
@pytest.mark.parametrize("z", [-40.0, -12.0, -3.0, 0.0, 2.5, 9.0, 40.0])
def test_noisy_step_log_and_score(kappa, z):
    k = mpmath.mpf(kappa)
    exact = k + (1 - 2 * k) * _mp_cdf(z)
    exact_score = (1 - 2 * k) * _mp_pdf(z) / exact
    log_z, score = noisy_step_moments(z, kappa)
    exact_log = mpmath.log(exact) if kappa > 0 else _mp_log_cdf(z)
    assert _relative_error(float(log_z), exact_log) < 1e-10
    assert float(log_noisy_step(z, kappa)) == float(log_z)
    if float(exact_score) > 1e-300:
        assert _relative_error(float(score), exact_score) < 1e-10
    else:
        assert 0.0 <= float(score) < 1e-290


def test_log_norm_pdf_closed_form():
    z = np.linspace(-40, 40, 9)
    expected = [float(mpmath.log(_mp_pdf(v))) for v in z]
    np.testing.assert_allclose(log_norm_pdf(z), expected, rtol=1e-14)


def test_hermite_rule_integrates_normal_moments_exactly():
    nodes, weights = hermite_rule(20)
    assert weights.sum() == pytest.approx(1.0, abs=1e-15)
    # E[Z^(2k)] = (2k - 1)!!
    for k, double_factorial in enumerate([1, 1, 3, 15, 105, 945]):
        assert np.sum(weights * nodes ** (2 * k)) == pytest.approx(double_factorial)
        assert abs(np.sum(weights * nodes ** (2 * k + 1))) < 1e-10


def test_gauss_hermite_expectation_broadcasts_and_matches_closed_forms():
    mean = np.array([[-1.0], [0.5]])
    std = np.array([0.3, 2.0, 4.0])
    # E[exp(X)] = exp(m + s^2 / 2): smooth, so 64 nodes give ~ machine accuracy.
    got = gauss_hermite_expectation(np.exp, mean, std, n_points=64)
    np.testing.assert_allclose(got, np.exp(mean + std**2 / 2), rtol=1e-10)
    # E[Phi(X)] = Phi(m / sqrt(1 + s^2)) (the probit integral).
    got = gauss_hermite_expectation(
        lambda x: np.exp(log_norm_cdf(x)), mean, std, n_points=80
    )
    expected = np.exp(log_norm_cdf(mean / np.sqrt(1 + std**2)))
    # Phi is not entire in the scaled variable: Gauss-Hermite converges slower.
    np.testing.assert_allclose(got, expected, atol=1e-5)


@pytest.mark.parametrize(
    "z", np.concatenate([-np.logspace(-3, 12, 46), np.linspace(-200, 40, 49)])
)
def test_probit_curvature_matches_mpmath_far_into_the_tail(z):
    # -d^2 log Phi / dz^2 = nu (nu + z): nu + z cancels for z << 0, where a
    # diverging naive mean-field run once met curvatures of -3e5 (|z| 1e11),
    # i.e. negative site precisions under a log-concave likelihood.
    from sklearn_meanfield.tap._likelihoods import make_likelihood

    with mpmath.workdps(120):  # nu + z cancels some 50 digits at |z| = 1e12
        ratio = _mp_pdf(z) / _mp_cdf(z)
        expected = ratio * (ratio + mpmath.mpf(z))
    # Cavity N(z, 1) and label +1: the probit's z is m / sqrt(1 + v) = z / sqrt 2.
    _, _, second = make_likelihood("probit", 0.0).moments(
        np.array([1.0]), np.array([z * np.sqrt(2.0)]), np.array([1.0])
    )
    got = 2.0 * second[0]  # second = curvature / (1 + v)
    assert 0.0 <= got <= 1.0
    assert _relative_error(got, expected) < 1e-10


def _mp_logistic_normal(a, v):
    """log Z, score and curvature of E[sigma(u)], u ~ N(a, v), by mpmath
    quadrature in the standardised variable, from their definitions as
    tilted expectations (the variance by a second, centred pass)."""
    with mpmath.workdps(20):
        a, sd = mpmath.mpf(a), mpmath.sqrt(mpmath.mpf(v))

        def sigmoid(u):
            return 1 / (1 + mpmath.exp(-u))

        # The tilted density's mode in z lies in [0, sd] (its log is concave);
        # split there and at the logistic's step u = 0.
        mode = mpmath.findroot(
            lambda z: sigmoid(-(a + sd * z)) * sd - z, (0, sd), solver="anderson"
        )
        points = [-mpmath.inf, mode - 10, mode - 3, mode, mode + 3, mode + 10]
        if abs(a / sd) < 1e6:
            points.append(-a / sd)
        points = sorted(set(points)) + [mpmath.inf]

        def expect(f):
            return mpmath.quad(
                lambda z: f(a + sd * z) * sigmoid(a + sd * z) * _mp_pdf(z), points
            )

        z = expect(lambda u: 1)
        score = expect(lambda u: sigmoid(-u)) / z
        mean_c = expect(sigmoid) / z
        var_c = expect(lambda u: (sigmoid(u) - mean_c) ** 2) / z
        curvature = expect(lambda u: sigmoid(-u) * sigmoid(u)) / z - var_c
        return mpmath.log(z), score, curvature


@pytest.mark.parametrize("v", [1e-6, 3.0, 63.0, 65.0, 400.0, 1e4])
@pytest.mark.parametrize("a", [-40.0, -5.0, 0.0, 2.0, 12.0])
def test_logistic_normal_moments_match_mpmath(a, v):
    # Both ways of computing (the trapezoid rule around the mode, and the
    # probit plus a correction above v = 64) and their common boundary.
    log_z, score, curvature = logistic_normal_moments(np.array([a]), np.array([v]))
    expected_log_z, expected_score, expected_curvature = _mp_logistic_normal(a, v)
    assert abs(log_z[0] - float(expected_log_z)) < 1e-8
    # Relative accuracy where the derivatives matter for EP; below 1e-8 (a
    # site of precision 1e-8 or less) an absolute one.
    for got, expected in ((score, expected_score), (curvature, expected_curvature)):
        expected = float(expected)
        assert abs(got[0] - expected) < max(1e-6 * abs(expected), 1e-14)


def test_logistic_normal_moments_limits():
    # v -> 0: the logistic itself and its derivatives.
    a = np.array([-30.0, -2.0, 0.0, 3.0])
    log_z, score, curvature = logistic_normal_moments(a, np.zeros(4))
    sigma = 1 / (1 + np.exp(-a))
    np.testing.assert_allclose(log_z, np.log(sigma), rtol=0, atol=1e-10)
    np.testing.assert_allclose(score, 1 - sigma, rtol=1e-9)
    np.testing.assert_allclose(curvature, sigma * (1 - sigma), rtol=1e-9)
    # Symmetry: Z(-a) = 1 - Z(a) for every width, in both regimes.
    v = np.array([0.5, 5.0, 50.0, 500.0])
    plus, _, _ = logistic_normal_moments(np.full(4, 1.3), v)
    minus, _, _ = logistic_normal_moments(np.full(4, -1.3), v)
    np.testing.assert_allclose(np.exp(plus) + np.exp(minus), 1.0, atol=1e-9)
    # Shapes broadcast and are kept.
    log_z, _, _ = logistic_normal_moments(np.zeros((2, 3)), 1.0)
    assert log_z.shape == (2, 3)


@pytest.mark.parametrize(
    "a, v, rel",
    [
        (-1e4, 4e4, 1e-5),
        (-800.0, 1e5, 1e-5),
        (-200.0, 63.0, 1e-5),
        (-60.0, 1e4, 1e-5),
        # Beyond the grid's cap (v above 5e4 and z below -6): a few percent.
        (-1e7, 1e12, 0.05),
    ],
)
def test_logistic_normal_moments_far_outliers_under_wide_gaussians(a, v, rel):
    # A point far on the wrong side under a very wide cavity (a GP fit of
    # wine with a large amplitude met such sites) once sent the mode search
    # into an oscillation between the ends of its bracket, and the grid to
    # millions of nodes.  The mode solves sigma(-(a + d)) = d / v.
    offset, error = _logistic_mode_offset(np.array([a]), np.array([v]))
    assert 0.0 <= offset[0] <= v
    assert error[0] < 1e-3 * np.sqrt(v)
    s = 1 / (1 + np.exp(a + offset[0]))
    newton_step = (s - offset[0] / v) / (s * (1 - s) + 1 / v)
    assert abs(newton_step) < 1e-3 * np.sqrt(v)
    # The derivatives are those of log Z (central differences in a) ...
    log_z, score, curvature = logistic_normal_moments(np.array([a]), np.array([v]))
    h = 1e-2
    up, _, _ = logistic_normal_moments(np.array([a + h]), np.array([v]))
    down, _, _ = logistic_normal_moments(np.array([a - h]), np.array([v]))
    assert score[0] == pytest.approx((up[0] - down[0]) / (2 * h), rel=rel)
    assert curvature[0] == pytest.approx(
        -(up[0] - 2 * log_z[0] + down[0]) / h**2, rel=100 * rel, abs=1e-9
    )
    # ... and log Z lies between the bounds from e^u - e^2u <= sigma(u) <= e^u
    # below 0 and 1 - e^-u <= sigma(u) <= 1 above, each term a closed-form
    # Gaussian integral.
    sd = np.sqrt(v)

    def below(k):  # log E[e^(k u); u < 0]
        return k * a + k * k * v / 2 + log_ndtr(-(a + k * v) / sd)

    step = log_ndtr(a / sd)  # log P(u > 0)
    above = -a + v / 2 + log_ndtr((a - v) / sd)  # log E[e^-u; u > 0]
    upper = logsumexp([step, below(1)])
    lower = logsumexp([step, above, below(1), below(2)], b=[1, -1, 1, -1])
    slack = 1e-9 if rel < 1e-3 else rel
    assert lower - slack <= log_z[0] <= upper + slack
