"""Gaussian integrals written once for the whole library.

Numerically stable forms of the Gaussian cumulative distribution function in the
tails, the ratio phi/Phi (the inverse Mills ratio) that every TAP / EP moment
update needs, the label-noise mixture ``kappa + (1 - 2 kappa) Phi(z)`` of Opper
and Winther, the logistic-normal integral ``E[sigma(u)]`` with its derivatives,
and Gauss-Hermite expectations under a normal distribution.
"""

import numpy as np
from scipy.special import erfcx, expit, log_ndtr, ndtr

__all__ = [
    "LOG_SQRT_2PI",
    "log_norm_pdf",
    "log_norm_cdf",
    "norm_pdf_cdf_ratio",
    "log_noisy_step",
    "log_with_label_noise",
    "noisy_step_moments",
    "hermite_rule",
    "gauss_hermite_expectation",
    "logistic_normal_moments",
]

LOG_SQRT_2PI = 0.5 * np.log(2.0 * np.pi)


def log_norm_pdf(z):
    """Logarithm of the standard normal density, ``-z**2 / 2 - log sqrt(2 pi)``.

    Parameters
    ----------
    z : array-like
        Points at which to evaluate.

    Returns
    -------
    ndarray
        ``log phi(z)``, of the shape of ``z``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield._gaussian import log_norm_pdf
    >>> bool(np.isclose(log_norm_pdf(0.0), -0.5 * np.log(2 * np.pi)))
    True
    >>> float(log_norm_pdf(40.0))  # finite where phi itself underflows
    -800.9189385332047
    """
    z = np.asarray(z, dtype=float)
    return -0.5 * z * z - LOG_SQRT_2PI


def log_norm_cdf(z):
    """Logarithm of the standard normal CDF, accurate in both tails.

    ``log Phi(z)`` without underflow for very negative ``z`` (where ``Phi``
    underflows) and without cancellation for large positive ``z`` (where
    ``log Phi(z) ~ -Phi(-z)``).

    Parameters
    ----------
    z : array-like
        Points at which to evaluate.

    Returns
    -------
    ndarray
        ``log Phi(z)``, of the shape of ``z``.

    Examples
    --------
    >>> from sklearn_meanfield._gaussian import log_norm_cdf
    >>> float(log_norm_cdf(-40.0))  # doctest: +ELLIPSIS
    -804.608...
    """
    z = np.asarray(z, dtype=float)
    # scipy's log_ndtr loses relative accuracy in the upper tail (about 1e-7 at
    # z = 14); there log1p(-Phi(-z)) is exact to rounding.
    upper = np.log1p(-ndtr(-np.abs(z)))
    return np.where(z > 0, upper, log_ndtr(np.minimum(z, 0.0)))


def norm_pdf_cdf_ratio(z):
    """The ratio ``phi(z) / Phi(z)`` (inverse Mills ratio), stable for all ``z``.

    For very negative ``z`` both ``phi`` and ``Phi`` underflow while their ratio
    grows like ``-z``.  With the scaled complementary error function
    ``erfcx(x) = exp(x**2) erfc(x)`` the Gaussian factors cancel analytically:
    ``phi(z) / Phi(z) = sqrt(2 / pi) / erfcx(-z / sqrt(2))``.

    Parameters
    ----------
    z : array-like
        Points at which to evaluate.

    Returns
    -------
    ndarray
        ``phi(z) / Phi(z)``, of the shape of ``z``.

    Examples
    --------
    >>> from sklearn_meanfield._gaussian import norm_pdf_cdf_ratio
    >>> round(float(norm_pdf_cdf_ratio(-40.0)), 6)
    40.024969
    """
    z = np.asarray(z, dtype=float)
    return np.sqrt(2.0 / np.pi) / erfcx(-z / np.sqrt(2.0))


def log_noisy_step(z, label_noise=0.0):
    """``log(kappa + (1 - 2 kappa) Phi(z))`` with ``kappa = label_noise``.

    The label-noise likelihood of Opper and Winther, integrated over a Gaussian
    field.  Computed as a log-sum-exp so that neither term underflows.

    Parameters
    ----------
    z : array-like
        Standardised field ``y m / sqrt(s)``.
    label_noise : float in [0, 0.5), default=0.0
        Probability ``kappa`` that a label was flipped.

    Returns
    -------
    ndarray
        The log-likelihood, of the shape of ``z``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield._gaussian import log_noisy_step
    >>> bool(np.isclose(log_noisy_step(0.0), np.log(0.5)))
    True
    >>> # Far on the wrong side only the flip probability is left.
    >>> bool(np.isclose(log_noisy_step(-50.0, label_noise=0.1), np.log(0.1)))
    True
    """
    return log_with_label_noise(log_norm_cdf(z), label_noise)


def log_with_label_noise(log_p, label_noise=0.0):
    """``log(kappa + (1 - 2 kappa) p)`` from ``log p``, ``kappa = label_noise``.

    The label-noise mixture of any likelihood ``p`` of a label, as a
    log-sum-exp so that neither term underflows.

    Parameters
    ----------
    log_p : array-like
        Log-likelihood of the label without noise.
    label_noise : float in [0, 0.5), default=0.0
        Probability ``kappa`` that a label was flipped.

    Returns
    -------
    ndarray
        The log-likelihood with label noise, of the shape of ``log_p``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield._gaussian import log_with_label_noise
    >>> float(np.exp(log_with_label_noise(np.log(0.5), 0.1)))  # 0.1 + 0.8 / 2
    0.5
    """
    log_p = np.asarray(log_p, dtype=float)
    if label_noise == 0.0:
        return log_p
    return np.logaddexp(np.log(label_noise), np.log1p(-2.0 * label_noise) + log_p)


def noisy_step_moments(z, label_noise=0.0):
    """Log normaliser and score of ``Z(z) = kappa + (1 - 2 kappa) Phi(z)``.

    Parameters
    ----------
    z : array-like
        Standardised field ``y m / sqrt(s)``.
    label_noise : float in [0, 0.5), default=0.0
        Probability ``kappa`` that a label was flipped.

    Returns
    -------
    log_z : ndarray
        ``log Z(z)``.
    dlog_z : ndarray
        ``d log Z / dz = (1 - 2 kappa) phi(z) / Z(z)``, finite for all ``z``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield._gaussian import noisy_step_moments
    >>> log_z, dlog_z = noisy_step_moments(np.array([0.0, -40.0]))
    >>> np.round(dlog_z, 4).tolist()  # phi(0) / Phi(0), then about -z
    [0.7979, 40.025]
    """
    z = np.asarray(z, dtype=float)
    log_z = log_noisy_step(z, label_noise)
    if label_noise == 0.0:
        dlog_z = norm_pdf_cdf_ratio(z)
    else:
        dlog_z = np.exp(np.log1p(-2.0 * label_noise) + log_norm_pdf(z) - log_z)
    return log_z, dlog_z


def hermite_rule(n_points):
    """Gauss-Hermite nodes and weights for the standard normal density.

    Parameters
    ----------
    n_points : int
        Number of nodes.

    Returns
    -------
    nodes : ndarray of shape (n_points,)
        Quadrature nodes.
    weights : ndarray of shape (n_points,)
        ``sum(weights * f(nodes)) ~ E[f(Z)]`` for ``Z ~ N(0, 1)``; the weights
        sum to one.

    Examples
    --------
    >>> from sklearn_meanfield._gaussian import hermite_rule
    >>> nodes, weights = hermite_rule(5)
    >>> round(float(weights @ nodes**4), 12)  # E[Z**4] = 3
    3.0
    """
    nodes, weights = np.polynomial.hermite_e.hermegauss(int(n_points))
    return nodes, weights / weights.sum()


def gauss_hermite_expectation(function, mean, std, n_points=32):
    """``E[function(X)]`` for ``X ~ N(mean, std**2)`` by Gauss-Hermite quadrature.

    Vectorised: ``mean`` and ``std`` broadcast against each other and
    ``function`` must accept arrays of shape ``broadcast_shape + (n_points,)``.
    Exact for polynomials of degree below ``2 * n_points``.

    Parameters
    ----------
    function : callable
        Elementwise function of the Gaussian variable.
    mean, std : array-like
        Mean and standard deviation (broadcastable).
    n_points : int, default=32
        Number of quadrature nodes.

    Returns
    -------
    ndarray
        The expectations, of the broadcast shape of ``mean`` and ``std``.

    Examples
    --------
    >>> from sklearn_meanfield._gaussian import gauss_hermite_expectation
    >>> round(float(gauss_hermite_expectation(lambda x: x**2, 1.0, 2.0)), 12)
    5.0
    """
    nodes, weights = hermite_rule(n_points)
    mean = np.asarray(mean, dtype=float)[..., np.newaxis]
    std = np.asarray(std, dtype=float)[..., np.newaxis]
    return np.sum(weights * function(mean + std * nodes), axis=-1)


# ``logistic_normal_moments``.  Narrow and moderate Gaussians: the trapezoid
# rule on a uniform grid around the mode of sigma(u) N(u; a, v).  The integrand
# is analytic in the strip |Im u| < pi (the poles of the logistic), so a
# spacing of at most _LOGISTIC_SPACING (in u, and in standard deviations when
# v < 1) leaves a relative error near exp(-2 pi * 2.5 / 0.75) ~ 1e-9; the grid
# ends where the log integrand has fallen by at least _LOGISTIC_TAIL.  Grids
# come in a few sizes so that sites of similar width are done together.
_LOGISTIC_SPACING = 0.75
_LOGISTIC_TAIL = 24.0
_LOGISTIC_GRID_SIZES = 2 ** np.arange(4, 11) + 1  # 17 ... 1025
_LOGISTIC_MAX_NODES = 4097
# Wide Gaussians (v above _LOGISTIC_WIDE): sigma(u) = Phi(lam u) + d(u) with
# lam^2 = pi / 8; the probit part is closed-form and d, smooth, below 0.02 and
# decaying like exp(-|u|), is integrated on a fixed grid over [-40, 40]
# (truncation below 1e-17).  Used while the probit part keeps Z above 1e-9
# (z above _LOGISTIC_WIDE_MIN_Z), so that the truncation stays relative.
_LOGISTIC_WIDE = 64.0
_LOGISTIC_WIDE_MIN_Z = -6.0
_PROBIT_SCALE = np.sqrt(np.pi / 8.0)


def _wide_grid():
    u = np.linspace(-40.0, 40.0, 161)
    lam = _PROBIT_SCALE
    probit_pdf = lam * np.exp(log_norm_pdf(lam * u))
    sigmoid = expit(u)
    slope = sigmoid * expit(-u)
    return (
        u,
        np.stack(
            [
                sigmoid - ndtr(lam * u),  # d
                slope - probit_pdf,  # d'
                slope * (1.0 - 2.0 * sigmoid) + lam**2 * u * probit_pdf,  # d''
            ]
        ),
    )


_WIDE_U, _WIDE_DIFFERENCES = _wide_grid()


def _newton_step(a, v, offset):
    s = expit(-(a + offset))
    slope = s - offset / v
    return slope, offset + slope / (s * (1.0 - s) + 1.0 / v)


def _logistic_mode_offset(a, v, max_steps=80):
    """Offset ``m - a`` of the mode ``m`` of ``log sigma(u) - (u - a)^2 / 2v``,
    and a bound on its error.

    The offset solves ``sigma(-(a + d)) = d / v``, whose left side minus the
    right falls from positive at ``d = 0`` to negative at ``d = v``.  Three
    Newton steps settle almost every site; the rest (far outliers under wide
    Gaussians) go on with Newton safeguarded by bisection of that bracket,
    until the step is below 1e-4 of the Gaussian's width (the grid only has
    to be centred near the mode).  The log density's curvature is at most
    ``-1/v``, so the mode is within ``|slope| v`` of the returned point, and
    the grid is widened by that.
    """
    offset = v * expit(-a) / (1.0 + 0.25 * v)
    for _ in range(3):
        offset = np.clip(_newton_step(a, v, offset)[1], 0.0, v)
    tolerance = 1e-4 * np.sqrt(v)
    slope, newton = _newton_step(a, v, offset)
    pending = np.flatnonzero(np.abs(newton - offset) > tolerance)
    if pending.size:
        aa, vv, d = a[pending], v[pending], offset[pending]
        low, high = np.zeros_like(d), vv.copy()
        for _ in range(max_steps):
            slope, newton = _newton_step(aa, vv, d)
            rising = slope > 0
            low = np.where(rising, d, low)
            high = np.where(rising, high, d)
            settled = np.abs(newton - d) <= tolerance[pending]
            # Newton while it stays strictly inside the bracket (or has
            # settled); otherwise bisect.
            inside = ((newton > low) & (newton < high)) | settled
            step = np.where(inside, newton, 0.5 * (low + high))
            done = np.all(settled)
            d = step
            if done:
                break
        offset[pending] = d
    slope, newton = _newton_step(a, v, offset)
    # |slope| v bounds the distance to the mode (curvature below -1/v) but is
    # loose where the logistic's own curvature dominates; ten Newton steps
    # are then the better bound.
    return offset, np.minimum(np.abs(slope) * v, 10.0 * np.abs(newton - offset))


def _logistic_moments_trapezoid(a, v):
    offset, error = _logistic_mode_offset(a, v)
    half = error + np.sqrt(2.0 * _LOGISTIC_TAIL * v)
    spacing = _LOGISTIC_SPACING * np.minimum(1.0, np.sqrt(v))
    needed = 2.0 * half / spacing + 1.0
    sizes = _LOGISTIC_GRID_SIZES
    size = sizes[np.minimum(np.searchsorted(sizes, needed), len(sizes) - 1)]
    # Beyond the largest grid (far outliers under Gaussians wider than v = 64
    # only) the grid grows with the width, up to _LOGISTIC_MAX_NODES, which
    # bounds the work; past that (v above 5e4) the spacing no longer resolves
    # the step and the accuracy falls to about 1e-2 (see the docstring).
    size = np.where(
        needed > sizes[-1],
        np.minimum(2 * np.ceil(needed / 2) + 1, _LOGISTIC_MAX_NODES),
        size,
    )
    log_z, score, curvature = np.empty_like(a), np.empty_like(a), np.empty_like(a)
    for n_nodes in np.unique(size):
        i = np.flatnonzero(size == n_nodes)
        # In offsets from a: u - a keeps its digits when |a| >> sqrt(v).
        x = offset[i, None] + half[i, None] * np.linspace(-1.0, 1.0, int(n_nodes))
        u = a[i, None] + x
        e = np.exp(-np.abs(u))
        reciprocal = 1.0 / (1.0 + e)
        log_density = np.minimum(u, 0.0) - np.log1p(e)  # log sigma(u)
        log_density -= x * x * (0.5 / v[i, None])
        top = log_density.max(axis=1, keepdims=True)
        w = np.exp(log_density - top)
        total = w.sum(axis=1)
        # sigma(-u), not 1 - sigma(u): it keeps its digits where it is tiny.
        s = np.where(u >= 0, e * reciprocal, reciprocal)
        mean_s = np.einsum("ij,ij->i", w, s) / total
        deviation = s - mean_s[:, None]
        # sigma(u) sigma(-u) = e / (1 + e)^2.
        slope = e * reciprocal * reciprocal
        score[i] = mean_s
        curvature[i] = (
            np.einsum("ij,ij->i", w, slope)
            - np.einsum("ij,ij->i", w, deviation * deviation)
        ) / total
        step = 2.0 * half[i] / (n_nodes - 1)
        log_z[i] = (
            np.log(total) + top[:, 0] + np.log(step) - 0.5 * np.log(v[i]) - LOG_SQRT_2PI
        )
    return log_z, score, curvature


def _logistic_moments_wide(a, v, z):
    lam2 = _PROBIT_SCALE**2
    scale = np.sqrt(1.0 + lam2 * v)
    density = (
        np.exp(log_norm_pdf((_WIDE_U[None, :] - a[:, None]) / np.sqrt(v)[:, None]))
        / np.sqrt(v)[:, None]
    )
    spacing = _WIDE_U[1] - _WIDE_U[0]
    d0, d1, d2 = spacing * (density @ _WIDE_DIFFERENCES.T).T
    probit_pdf = np.exp(log_norm_pdf(z))
    z0 = ndtr(z) + d0
    z1 = _PROBIT_SCALE * probit_pdf / scale + d1
    z2 = -lam2 * z * probit_pdf / scale**2 + d2
    score = z1 / z0
    return np.log(z0), score, score * score - z2 / z0


def logistic_normal_moments(a, v):
    """``log E[sigma(u)]`` for ``u ~ N(a, v)`` and its first two derivatives in ``a``.

    ``sigma(u) = 1 / (1 + exp(-u))`` is the logistic function.  The
    expectation has no closed form; it is computed by the trapezoid rule on a
    grid around the mode of the integrand (exponentially accurate, the
    integrand being analytic in a strip) or, for wide Gaussians, as the
    closed-form probit integral ``Phi(lam a / sqrt(1 + lam^2 v))``,
    ``lam^2 = pi / 8``, plus the integral of the small, smooth difference
    between the two sigmoids.  On the grid both derivatives are expectations
    under the tilted density ``sigma(u) N(u; a, v) / Z`` of positive
    quantities (``sigma(-u)`` is never formed as ``1 - sigma(u)``), so they
    keep their relative accuracy where they are small.

    Parameters
    ----------
    a : array-like
        Means.
    v : array-like
        Variances (>= 0; 0 gives ``log sigma(a)``), broadcastable with ``a``.

    Returns
    -------
    log_z : ndarray
        ``log Z = log E[sigma(u)]``; absolute error about 1e-9 or better,
        except for a point more than six widths on the wrong side of a
        Gaussian wider than ``v = 5e4`` (a grid of at most 4097 nodes no
        longer resolves both the step and the tail): there about 1e-2.
    score : ndarray
        ``d log Z / da = E_tilted[sigma(-u)]``, in (0, 1).
    curvature : ndarray
        ``-d^2 log Z / da^2 = E_tilted[sigma(u) sigma(-u)] - Var_tilted[sigma(u)]``,
        non-negative (the logistic is log-concave).

    References
    ----------
    .. [1] L. N. Trefethen and J. A. C. Weideman, "The exponentially convergent
       trapezoidal rule", SIAM Review 56 (2014).
    .. [2] C. E. Rasmussen and C. K. I. Williams, *Gaussian Processes for
       Machine Learning*, MIT Press (2006), sec. 3.6 (EP moments) and 3.9.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield._gaussian import logistic_normal_moments
    >>> log_z, score, curvature = logistic_normal_moments(
    ...     np.array([0.0, 3.0]), np.array([1e-300, 1e-300]))
    >>> np.exp(log_z).round(6).tolist()  # sigma(0), sigma(3)
    [0.5, 0.952574]
    >>> log_z, _, _ = logistic_normal_moments(np.array([0.0]), np.array([100.0]))
    >>> float(np.exp(log_z[0]).round(12))  # symmetric: 1/2 whatever the width
    0.5
    """
    a, v = np.broadcast_arrays(
        np.asarray(a, dtype=float), np.maximum(np.asarray(v, dtype=float), 1e-300)
    )
    shape = a.shape
    a, v = a.ravel(), v.ravel()
    log_z, score, curvature = np.empty_like(a), np.empty_like(a), np.empty_like(a)
    z = _PROBIT_SCALE * a / np.sqrt(1.0 + _PROBIT_SCALE**2 * v)
    wide = (v > _LOGISTIC_WIDE) & (z > _LOGISTIC_WIDE_MIN_Z)
    for mask, compute in (
        (~wide, lambda i: _logistic_moments_trapezoid(a[i], v[i])),
        (wide, lambda i: _logistic_moments_wide(a[i], v[i], z[i])),
    ):
        if np.any(mask):
            log_z[mask], score[mask], curvature[mask] = compute(mask)
    # Rounding only: the score is a mean of values in [0, 1], the curvature
    # that of a log-concave function.
    score = np.clip(score, 0.0, 1.0)
    curvature = np.maximum(curvature, 0.0)
    return log_z.reshape(shape), score.reshape(shape), curvature.reshape(shape)
