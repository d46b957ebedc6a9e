"""Gaussian integrals written once for the whole library.

Numerically stable forms of the Gaussian cumulative distribution function in the
tails, the ratio phi/Phi (the inverse Mills ratio) that every TAP / EP moment
update needs, the label-noise mixture ``kappa + (1 - 2 kappa) Phi(z)`` of Opper
and Winther, and Gauss-Hermite expectations under a normal distribution.
"""

import numpy as np
from scipy.special import erfcx, log_ndtr, ndtr

__all__ = [
    "LOG_SQRT_2PI",
    "log_norm_pdf",
    "log_norm_cdf",
    "norm_pdf_cdf_ratio",
    "log_noisy_step",
    "noisy_step_moments",
    "hermite_rule",
    "gauss_hermite_expectation",
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
    log_phi = log_norm_cdf(z)
    if label_noise == 0.0:
        return log_phi
    return np.logaddexp(np.log(label_noise), np.log1p(-2.0 * label_noise) + log_phi)


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


def norm_cdf(z):
    """Standard normal CDF (``scipy.special.ndtr``), exported for symmetry.

    Parameters
    ----------
    z : array-like
        Points at which to evaluate.

    Returns
    -------
    ndarray
        ``Phi(z)``, of the shape of ``z``.

    Examples
    --------
    >>> from sklearn_meanfield._gaussian import norm_cdf
    >>> float(norm_cdf(0.0))
    0.5
    """
    return ndtr(np.asarray(z, dtype=float))
