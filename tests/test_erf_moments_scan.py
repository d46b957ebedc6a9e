"""Every closed-form Gaussian expectation of erf products, scanned against mpmath.

The ensemble-learning bound is built from ``bvn_cdf``, ``erf_moments`` and the
jet ``erf_pair_moments`` (whose higher entries are the derivatives of the
lower ones, so they also make the gradient).  Here they are compared with
high-precision numerical integration (mpmath, 25 digits, composite
Gauss-Legendre rules split at every feature of the integrand) over arguments
from 1e-300 to 1e3 in magnitude, of both signs, with variances from 0 to 1e3
and correlations from -1 to 1.

Tiny arguments get their own tests: the sign agreement of ``h`` and ``k`` must
not be taken from ``h * k > 0``, which underflows for ``|h k| < 1e-308``.
"""

import mpmath as mp
import numpy as np
import pytest
from mpmath.calculus.quadrature import GaussLegendre

from sklearn_meanfield.variational._erf_network import (
    bvn_cdf,
    erf_moments,
    erf_pair_moments,
)

DPS = 25
_NODES = {}

# Magnitudes of the scanned means: the tiny ones are where the bug was.
MAGNITUDES = [1e-300, 1e-170, 1e-30, 1e-8, 0.3, 2.5, 30.0, 1e3]
MEANS = [0.0] + [s * m for m in MAGNITUDES for s in (1.0, -1.0)]
VARIANCES = [0.0, 1e-300, 1e-30, 1e-8, 0.5, 3.0, 1e3]


def _gl_nodes(degree):
    """Gauss-Legendre nodes and weights on [-1, 1], 3 * 2**(degree - 1) of them."""
    if degree not in _NODES:
        with mp.workdps(DPS):
            _NODES[degree] = GaussLegendre(mp.mp).calc_nodes(degree, mp.mp.prec + 20)
    return _NODES[degree]


def _integrate(func, breaks, degree=5):
    """Composite Gauss-Legendre of a vector-valued ``func`` over ``breaks``."""
    total = None
    for a, b in zip(breaks[:-1], breaks[1:]):
        half, mid = (b - a) / 2, (b + a) / 2
        for x, w in _gl_nodes(degree):
            part = [w * half * v for v in func(mid + half * x)]
            total = part if total is None else [t + v for t, v in zip(total, part)]
    return total


def _g_derivatives(x, order):
    """``d^p/dx^p erf(x / sqrt 2)`` for ``p = 0..order`` (at most 4), in mpmath.

    ``g' = 2 phi`` and ``g^(p) = 2 (-1)^(p-1) He_(p-1) phi``.
    """
    two_phi = 2 * mp.exp(-x * x / 2) / mp.sqrt(2 * mp.pi)
    hermite = (1, x, x * x - 1, x**3 - 3 * x)
    return [mp.erf(x / mp.sqrt(2))] + [
        (-1) ** (p - 1) * hermite[p - 1] * two_phi for p in range(1, order + 1)
    ]


def _breaks(centres, limit=40):
    """Split points: the standard normal's scale and each feature +-8 widths."""
    limit = mp.mpf(limit)
    points = {mp.mpf(0), mp.mpf(-8), mp.mpf(8), -limit, limit}
    for centre, width in centres:
        for t in (-8, -2, 0, 2, 8):
            points.add(centre + t * width)
    return sorted(x for x in points if -limit <= x <= limit)


def reference_moments(mean, var, order=4, degree=5):
    """``E[g^(p)(a)]``, ``a ~ N(mean, var)``: the integral over ``a = mean + sd z``."""
    with mp.workdps(DPS):
        mean, var = mp.mpf(float(mean)), mp.mpf(float(var))
        if var == 0:
            return _g_derivatives(mean, order)
        sd = mp.sqrt(var)

        def integrand(z):
            weight = mp.exp(-z * z / 2) / mp.sqrt(2 * mp.pi)
            return [weight * v for v in _g_derivatives(mean + sd * z, order)]

        return _integrate(integrand, _breaks([(-mean / sd, 1 / sd)]), degree)


def reference_pair(m1, m2, s11, s12, s22, order=4, degree=5):
    """``E[g^(p)(a1) g^(q)(a2)]`` for ``p + q <= order``, as a dict.

    ``a1 = m1 + sd1 z`` and, given ``z``, ``a2 ~ N(m2 + c z, tau)`` with
    ``c = s12 / sd1``, ``tau = s22 - c^2``; the inner Gaussian expectation is
    the classical ``E[g(b)] = g(mu / sqrt(1 + tau))`` differentiated ``q``
    times in ``mu``, the outer one is integrated numerically.
    """
    pq = [(p, q) for p in range(order + 1) for q in range(order + 1 - p)]
    with mp.workdps(DPS):
        m1, m2, s11, s12, s22 = (mp.mpf(float(a)) for a in (m1, m2, s11, s12, s22))

        def inner(mu, tau):
            scale = mp.sqrt(1 + tau)
            values = _g_derivatives(mu / scale, order)
            return [v / scale**q for q, v in enumerate(values)]

        if s11 == 0:
            g1, g2 = _g_derivatives(m1, order), inner(m2, s22)
            return {(p, q): g1[p] * g2[q] for p, q in pq}
        sd1 = mp.sqrt(s11)
        c = s12 / sd1
        tau = max(s22 - c * c, mp.mpf(0))

        def integrand(z):
            weight = mp.exp(-z * z / 2) / mp.sqrt(2 * mp.pi)
            g1 = _g_derivatives(m1 + sd1 * z, order)
            g2 = inner(m2 + c * z, tau)
            return [weight * g1[p] * g2[q] for p, q in pq]

        centres = [(-m1 / sd1, 1 / sd1)]
        if c != 0:
            centres.append((-m2 / c, mp.sqrt(1 + tau) / abs(c)))
        return dict(zip(pq, _integrate(integrand, _breaks(centres), degree)))


def reference_bvn(h, k, rho, degree=5):
    """``P(X <= h, Y <= k)`` = the integral over ``z < h`` of
    ``phi(z) Phi((k - rho z) / sqrt(1 - rho^2))``."""
    with mp.workdps(DPS):
        h, k, rho = (mp.mpf(float(a)) for a in (h, k, rho))
        root = mp.sqrt(1 - rho * rho)

        def integrand(z):
            return [mp.npdf(z) * mp.ncdf((k - rho * z) / root)]

        centres = [] if rho == 0 else [(k / rho, root / abs(rho))]
        points = [x for x in _breaks(centres) if x < h] + [min(h, mp.mpf(40))]
        if h <= -40:
            return mp.mpf(0)
        return _integrate(integrand, points, degree)[0]


def _close(value, reference, rtol=1e-9, atol=1e-14):
    """Absolute accuracy for these O(1)-bounded quantities, relative above it."""
    return abs(value - float(reference)) <= atol + rtol * abs(float(reference))


# ---------------------------------------------------------------- references


def test_references_against_closed_forms_and_finer_rules():
    # The arcsine law at zero means, the probit identity for one activation,
    # and a rule of twice the nodes: the references are right to far below
    # the tolerances used in the scans.
    J = reference_pair(0.0, 0.0, 1.0, 0.9, 2.0, order=0)
    with mp.workdps(DPS):
        arcsine = 2 / mp.pi * mp.asin(mp.mpf(0.9) / mp.sqrt(6))
        assert abs(J[0, 0] - arcsine) < 1e-18
    for mean, var in [(0.7, 2.0), (-3.0, 1e3), (1e-170, 1e-300)]:
        E = reference_moments(mean, var, order=0)[0]
        with mp.workdps(DPS):
            exact = mp.erf(mp.mpf(mean) / mp.sqrt(2 * (1 + mp.mpf(var))))
            assert abs(E - exact) <= 1e-18 * (1 + abs(exact))
    case = (2.0, 2.0, 1e3, 1e3, 1e3)  # broad and singular: the hardest one
    coarse, fine = reference_pair(*case), reference_pair(*case, degree=6)
    bvn = reference_bvn(0.3, -0.4, 0.5, degree=4)
    bvn_fine = reference_bvn(0.3, -0.4, 0.5, degree=6)
    with mp.workdps(DPS):
        assert max(abs(coarse[key] - fine[key]) for key in coarse) < 1e-15
        assert abs(bvn - bvn_fine) < 1e-18


# -------------------------------------------------------------- the bug itself


def test_tiny_equal_means():
    # E[erf(a/sqrt 2)^2] for a ~ N(-1e-170, 1): (2 / pi) arcsin(1/2) = 1/3.
    J = erf_pair_moments(-1e-170, -1e-170, 1.0, 1.0, 1.0, order=0)
    assert J[0, 0] == pytest.approx(1.0 / 3.0, rel=1e-12)
    # Opposite signs: (2 / pi) arcsin(1/2) again (the means are negligible).
    J = erf_pair_moments(1e-170, -1e-170, 1.0, 1.0, 1.0, order=0)
    assert J[0, 0] == pytest.approx(1.0 / 3.0, rel=1e-12)


def test_subnormal_arguments_are_finite():
    # Subnormal h must not make Owen's slopes 0 / 0 (a NaN predictive std
    # far from the data).
    tiny = np.array([5e-324, -5e-324, 1e-310, -0.0, 0.0])
    value = bvn_cdf(tiny[:, None], tiny[None, :], 0.9)
    assert np.all(np.isfinite(value))
    np.testing.assert_allclose(value, bvn_cdf(0.0, 0.0, 0.9), rtol=0, atol=1e-15)
    J = erf_pair_moments(tiny[:, None], tiny[None, :], 1e3, 999.0, 1e3, order=4)
    assert np.all(np.isfinite(J))


# ------------------------------------------------------------------- the scans


def _scan_bvn(values, rhos):
    failures = []
    for rho in rhos:
        for h in values:
            for k in values:
                ours = float(bvn_cdf(h, k, rho))
                if not _close(ours, reference_bvn(h, k, rho, degree=4)):
                    failures.append((h, k, rho, ours))
    return failures


def test_bvn_cdf_scan():
    values = [0.0] + [s * m for m in (1e-300, 1e-170, 1e-30, 0.3) for s in (1, -1)]
    failures = _scan_bvn(values, (-0.9, 0.9))
    assert not failures, failures[:5]


@pytest.mark.slow
def test_bvn_cdf_wide_scan():
    values = [0.0] + [s * m for m in MAGNITUDES[:7] for s in (1.0, -1.0)]
    failures = _scan_bvn(values, (-0.999, -0.5, 0.0, 0.5, 0.999))
    assert not failures, failures[:5]


def test_erf_moments_scan():
    failures = []
    for mean in MEANS:
        for var in VARIANCES:
            ours = erf_moments(mean, var, order=4)
            for p, ref in enumerate(reference_moments(mean, var)):
                if not _close(ours[p], ref):
                    failures.append((mean, var, p, ours[p], float(ref)))
    assert not failures, failures[:5]


def _pair_cases():
    """Tiny means with every sign pattern, at unit, mixed and tiny variances,
    one-sided tiny/large pairs, and the singular ``a1 = a2`` of a unit."""
    cases = []
    for mag in (1e-300, 1e-170, 1e-30):
        for s1, s2 in [(1, 1), (1, -1), (-1, 1), (-1, -1)]:
            for cov in [(1.0, 1.0, 1.0), (1.0, 0.5, 2.0), (1e-300, 0, 1e-300)]:
                cases.append((s1 * mag, s2 * mag, *cov))
    cases += [
        (1e-170, 1e3, 1e3, -900.0, 1e3),
        (-1e-300, -30.0, 1e-8, 0.0, 3.0),
        (2.5, -2.5, 3.0, -3.0, 3.0),
        (1e3, 1e3, 0.0, 0.0, 0.0),
        (0.3, 0.3, 1e3, 1e3, 1e3),
    ]
    return cases


def _random_pair_cases(n, seed):
    """Log-uniform magnitudes in [1e-300, 1e3], random signs and correlations."""
    rng = np.random.RandomState(seed)
    cases = []
    for _ in range(n):
        m = 10.0 ** rng.uniform(-300, 3, size=2) * rng.choice([-1.0, 1.0], size=2)
        v = 10.0 ** rng.uniform(-300, 3, size=2)
        r = rng.choice([-1.0, 1.0]) if rng.rand() < 0.2 else rng.uniform(-1, 1)
        cases.append((m[0], m[1], v[0], r * np.sqrt(v[0] * v[1]), v[1]))
    return cases


def _scan_pairs(cases):
    failures = []
    for case in cases:
        ours = erf_pair_moments(*case, order=4)
        for (p, q), ref in reference_pair(*case).items():
            if not _close(ours[p, q], ref):
                failures.append((case, (p, q), ours[p, q], float(ref)))
    return failures


# The jet is also checked against finer rules and closed forms above, and its
# first entries by the erf_moments scan; the full scan runs with -m slow.
@pytest.mark.slow
def test_erf_pair_moments_scan():
    failures = _scan_pairs(_pair_cases() + _random_pair_cases(6, seed=0))
    assert not failures, failures[:5]


@pytest.mark.slow
def test_erf_pair_moments_wide_scan():
    # Magnitudes drawn on a log scale, plus a grid of O(1)-to-large means.
    grid = [
        (m1, m2, s11, r * np.sqrt(s11 * s22), s22)
        for m1 in (-1e3, -2.5, 0.3, 30.0)
        for m2 in (-30.0, 1e-8, 2.5)
        for s11, s22 in [(0.5, 3.0), (1e3, 1e-8)]
        for r in (-1.0, 0.6)
    ]
    failures = _scan_pairs(grid + _random_pair_cases(150, seed=1))
    assert not failures, failures[:5]
