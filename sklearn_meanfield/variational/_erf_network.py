"""Closed-form ensemble learning for the two-layer erf network.

The network is ``f_m(x, w) = sum_i v_im g(u_i . x~)`` with
``g(a) = erf(a / sqrt 2) = 2 Phi(a) - 1`` and ``x~ = (x, 1)`` (hidden biases).
The posterior approximation is ``Q(w) = N(wbar, C)`` with
``C = diag(d**2) + F F^T``: ``F`` lower triangular and ``d = 0`` for a full
covariance, ``F`` of rank ``r`` for diagonal-plus-low-rank, no ``F`` for a
diagonal covariance.

Every expectation the bound needs is exact (Barber & Bishop 1998, section 2):
for one data point the activations ``a_i`` and the output weights ``v_k`` are
jointly Gaussian, Stein's lemma moves the ``v``'s out of the expectation, and
what is left are the "jets" ``E[g^(p)(a_1) g^(q)(a_2)]`` of a bivariate
Gaussian.  These have closed forms: Owen's T for ``p = q = 0`` (the bivariate
normal CDF), Gaussian densities times Hermite moments otherwise.  Derivatives
of an expectation with respect to the Gaussian's mean and covariance are again
jets (Bonnet's and Price's theorems), so the gradient of the bound is exact too
and costs one jet of order 4.

All functions are pure and vectorised over data points and hidden-unit pairs.

References
----------
Barber, D. and Bishop, C. M. (1998). Ensemble learning for multi-layer
networks. Advances in Neural Information Processing Systems 10, 395-401.
"""

from typing import NamedTuple

import numpy as np
from scipy.special import erf, ndtr, owens_t

from .._layout import ParameterLayout

__all__ = [
    "erf_moments",
    "erf_pair_moments",
    "bvn_cdf",
    "NetworkShape",
    "unpack",
    "init_params",
    "output_moments",
    "sample_outputs",
    "cavity_loo",
    "psis_loo",
    "negative_bound",
    "natural_gradient_terms",
    "joint_negative_bound",
    "reestimate_from_stats",
    "BoundStats",
    "bound_at_hyperparameters",
    "weight_groups",
]

_LOG_2PI = np.log(2.0 * np.pi)
_SQRT2 = np.sqrt(2.0)
# Working memory of output_moments per chunk of rows.
_PREDICT_CHUNK_BYTES = 64 * 2**20
# Arguments of the bivariate normal CDF below this size are moved to it.
_TINY = 1e-30


def _norm_density(x, var):
    """Density of ``N(0, var)`` at ``x``."""
    return np.exp(-0.5 * x * x / var) / np.sqrt(2.0 * np.pi * var)


def _hermite_moment(degree, mu, var):
    """``E[He_degree(X)]`` for ``X ~ N(mu, var)``, probabilists' Hermite."""
    if degree == 0:
        return np.ones_like(mu)
    if degree == 1:
        return mu
    if degree == 2:
        return mu * mu + var - 1.0
    if degree == 3:
        return mu * (mu * mu + 3.0 * var - 3.0)
    raise ValueError("degree must be at most 3")


def erf_moments(mean, var, order=3):
    """``E[g^(k)(a)]`` for ``a ~ N(mean, var)``, ``g(a) = erf(a / sqrt 2)``.

    ``g' = 2 phi`` and ``g^(k) = 2 (-1)^(k-1) He_(k-1) phi``; multiplying the
    Gaussian density by ``phi(a)`` gives ``N(mean; 0, 1 + var)`` times a
    Gaussian with mean ``mean / (1 + var)`` and variance ``var / (1 + var)``.

    Parameters
    ----------
    mean, var : array-like
        Mean and variance (broadcastable; ``var >= 0``).
    order : int, default=3
        Highest derivative, at most 4.

    Returns
    -------
    moments : ndarray of shape (order + 1,) + broadcast shape
        ``moments[k] = E[g^(k)(a)]``.

    Examples
    --------
    >>> from sklearn_meanfield.variational._erf_network import erf_moments
    >>> float(erf_moments(0.0, 1.0)[1]) == float(2 / (2 * 3.141592653589793) ** 0.5
    ...     / 2 ** 0.5)
    True
    """
    mean, var = np.broadcast_arrays(
        np.asarray(mean, dtype=float), np.asarray(var, dtype=float)
    )
    out = np.empty((order + 1,) + mean.shape)
    total = 1.0 + var
    out[0] = erf(mean / np.sqrt(2.0 * total))
    if order >= 1:
        scale = 2.0 * _norm_density(mean, total)
        mu = mean / total
        tilted_var = var / total
        for k in range(1, order + 1):
            sign = 1.0 if k % 2 == 1 else -1.0
            out[k] = sign * scale * _hermite_moment(k - 1, mu, tilted_var)
    return out


def bvn_cdf(h, k, rho):
    """Standard bivariate normal CDF ``P(X <= h, Y <= k)``, correlation ``rho``.

    Owen's (1956) formula through ``scipy.special.owens_t``, vectorised.
    Arguments smaller than ``1e-30`` in magnitude (exact zeros included) are
    moved to ``+-1e-30``, keeping their sign: the CDF is continuous, so this
    changes the result by less than ``1e-30``, and the slopes
    ``(k - rho h) / (h sqrt(1 - rho^2))`` of Owen's formula stay finite (a
    subnormal ``h`` makes them ``0 / 0``).  Whether ``h`` and ``k`` have the
    same sign is read from their sign bits, not from ``h k > 0``, which
    underflows to zero for ``|h k| < 1e-308`` and picks the wrong branch.

    Parameters
    ----------
    h, k, rho : array-like
        Broadcastable; ``|rho| < 1``.

    Returns
    -------
    ndarray
    Examples
    --------
    >>> from sklearn_meanfield.variational._erf_network import bvn_cdf
    >>> round(float(bvn_cdf(0.0, 0.0, 0.5)), 6)  # 1/4 + arcsin(1/2) / (2 pi)
    0.333333
    """
    h, k, rho = np.broadcast_arrays(
        np.asarray(h, dtype=float),
        np.asarray(k, dtype=float),
        np.asarray(rho, dtype=float),
    )
    rho = np.clip(rho, -1.0 + 1e-15, 1.0 - 1e-15)
    h = np.where(np.abs(h) < _TINY, np.copysign(_TINY, h), h)
    k = np.where(np.abs(k) < _TINY, np.copysign(_TINY, k), k)
    root = np.sqrt((1.0 - rho) * (1.0 + rho))
    with np.errstate(over="ignore"):
        a_h = (k - rho * h) / (h * root)
        a_k = (h - rho * k) / (k * root)
    beta = np.where(np.signbit(h) == np.signbit(k), 0.0, 0.5)
    # owens_t handles infinite slopes: T(h, +-inf) = +-Phi(-|h|) / 2.
    return (0.5 * (ndtr(h) + ndtr(k)) - owens_t(h, a_h) - owens_t(k, a_k) - beta).clip(
        0.0, 1.0
    )


def _moments_against_g(m1, m2, s11, s12, s22, max_p):
    """``E[g^(p)(a1) g(a2)]`` for ``p = 1..max_p``.

    Multiplying by ``phi(a1)`` conditions on a noisy observation ``0 = a1 + e``;
    under that tilted Gaussian, ``E[a1^k g^(j)(a2)]`` follows from Stein's lemma
    ``E[a1 F] = mu1 E[F] + S11 E[d1 F] + S12 E[d2 F]``.
    """
    v1 = 1.0 + s11
    scale = 2.0 * _norm_density(m1, v1)
    mu1 = m1 / v1
    mu2 = m2 - s12 * m1 / v1
    t11 = s11 / v1
    t12 = s12 / v1
    t22 = np.maximum(s22 - s12 * s12 / v1, 0.0)
    n_k = max_p  # powers of a1 needed: 0..max_p-1
    univariate = erf_moments(mu2, t22, order=max_p - 1)
    # K[k][j] = E[a1^k g^(j)(a2)], k + j <= max_p - 1.
    K = [[None] * n_k for _ in range(n_k)]
    for j in range(n_k):
        K[0][j] = univariate[j]
    for kk in range(n_k - 1):
        for j in range(n_k - 1 - kk):
            value = mu1 * K[kk][j] + t12 * K[kk][j + 1]
            if kk >= 1:
                value = value + kk * t11 * K[kk - 1][j]
            K[kk + 1][j] = value
    hermite = [K[0][0]]
    if max_p >= 2:
        hermite.append(K[1][0])
    if max_p >= 3:
        hermite.append(K[2][0] - K[0][0])
    if max_p >= 4:
        hermite.append(K[3][0] - 3.0 * K[1][0])
    return [
        (1.0 if p % 2 == 1 else -1.0) * scale * hermite[p - 1]
        for p in range(1, max_p + 1)
    ]


def erf_pair_moments(m1, m2, s11, s12, s22, order=2):
    """The jet ``J[p, q] = E[g^(p)(a1) g^(q)(a2)]`` of a bivariate Gaussian.

    ``(a1, a2) ~ N((m1, m2), [[s11, s12], [s12, s22]])``, ``g = erf(. / sqrt 2)``.
    ``J[p, q]`` is also the ``(p, q)``-th derivative of ``J[0, 0]`` with respect
    to ``(m1, m2)`` and, by Price's theorem, ``dJ/ds12 = J[p+1, q+1]``,
    ``dJ/ds11 = J[p+2, q] / 2``.  The covariance may be singular (``a1 = a2``):
    only ``S + I`` must be positive definite.

    ``J[0, 0] = 4 Phi2(h, k; rho) - 2 Phi(h) - 2 Phi(k) + 1`` with
    ``h = m1 / sqrt(1 + s11)``, ``k = m2 / sqrt(1 + s22)``,
    ``rho = s12 / sqrt((1 + s11) (1 + s22))``.  For ``p, q >= 1`` the product
    ``phi(a1) phi(a2)`` turns the Gaussian into ``N(m; 0, S + I)`` times a
    Gaussian with mean ``(S + I)^-1 m`` and covariance ``I - (S + I)^-1``,
    leaving Hermite moments of degree ``p + q - 2``.

    Parameters
    ----------
    m1, m2, s11, s12, s22 : array-like
        Broadcastable means, variances and covariance.
    order : int, default=2
        Largest ``p + q``, at most 4.

    Returns
    -------
    J : ndarray of shape (order + 1, order + 1) + broadcast shape
        Entries with ``p + q > order`` are zero.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.variational._erf_network import erf_pair_moments
    >>> J = erf_pair_moments(0.0, 0.0, 1.0, 0.5, 1.0)
    >>> bool(np.isclose(J[0, 0], 2 / np.pi * np.arcsin(0.25)))
    True
    """
    if not 0 <= order <= 4:
        raise ValueError("order must be between 0 and 4")
    m1, m2, s11, s12, s22 = np.broadcast_arrays(
        *(np.asarray(a, dtype=float) for a in (m1, m2, s11, s12, s22))
    )
    J = np.zeros((order + 1, order + 1) + m1.shape)
    v1 = 1.0 + s11
    v2 = 1.0 + s22
    h = m1 / np.sqrt(v1)
    k = m2 / np.sqrt(v2)
    rho = s12 / np.sqrt(v1 * v2)
    J[0, 0] = 4.0 * bvn_cdf(h, k, rho) - 2.0 * ndtr(h) - 2.0 * ndtr(k) + 1.0
    if order == 0:
        return J
    for p, value in enumerate(_moments_against_g(m1, m2, s11, s12, s22, order), 1):
        J[p, 0] = value
    for q, value in enumerate(_moments_against_g(m2, m1, s22, s12, s11, order), 1):
        J[0, q] = value
    if order >= 2:
        # det(S + I) = 1 + s11 + s22 + det(S), with det(S) >= 0 computed on its
        # own: v1 v2 - s12^2 cancels catastrophically for broad activations.
        det_s = np.maximum(s11 * s22 - s12 * s12, 0.0)
        det = 1.0 + s11 + s22 + det_s
        quad = (v2 * m1 * m1 - 2.0 * s12 * m1 * m2 + v1 * m2 * m2) / det
        scale = 4.0 * np.exp(-0.5 * quad) / (2.0 * np.pi * np.sqrt(det))
        mu1 = (v2 * m1 - s12 * m2) / det
        mu2 = (v1 * m2 - s12 * m1) / det
        t11 = (s11 + det_s) / det
        t22 = (s22 + det_s) / det
        t12 = s12 / det
        for p in range(1, order):
            for q in range(1, order + 1 - p):
                a, b = p - 1, q - 1
                if a == 0:
                    moment = _hermite_moment(b, mu2, t22)
                elif b == 0:
                    moment = _hermite_moment(a, mu1, t11)
                else:  # a == b == 1, since a + b <= 2
                    moment = mu1 * mu2 + t12
                sign = 1.0 if (p + q) % 2 == 0 else -1.0
                J[p, q] = sign * scale * moment
    return J


class NetworkShape:
    """Sizes and the covariance family of a variational erf network.

    The blocks of the flat vectors live in two
    :class:`~sklearn_meanfield._layout.ParameterLayout` s, so that no code
    computes an offset: :attr:`weights` splits a weight vector (or the rows
    of a matrix with one row per weight) into the input-to-hidden weights
    ``U`` (hidden unit by unit, the bias last) and the hidden-to-output
    weights ``V``; :attr:`params` splits the variational parameters
    ``theta`` into the mean ``mean``, the log diagonal ``log_diag`` and the
    family's covariance factor: ``lower`` (the strictly lower triangle of the
    Cholesky factor ``L``, row by row) for ``"full"``, ``factor`` (the
    ``k x r`` matrix ``F``) for ``"lowrank"``, nothing for ``"diag"``.

    Parameters
    ----------
    n_inputs : int
        Number of input features ``D`` (a constant 1 is appended for biases).
    n_hidden : int
    n_outputs : int
    covariance : {"full", "lowrank", "diag"}
    rank : int
        Rank of ``F`` for ``"lowrank"``.

    Attributes
    ----------
    n_aug : int
        ``n_inputs + 1``, the inputs with the bias.
    n_u : int
        Number of input-to-hidden weights ``n_hidden * n_aug``.
    n_weights : int
        Number of weights ``k``.
    rank : int
        Columns of the covariance factor (``k`` for ``"full"``, 0 for
        ``"diag"``).
    weights : ParameterLayout
        Blocks ``U`` (n_hidden, n_aug) and ``V`` (n_hidden, n_outputs).
    params : ParameterLayout
        Blocks ``mean`` (k,), ``log_diag`` (k,) and ``lower`` (k (k - 1) / 2,)
        or ``factor`` (k, rank).
    n_params : int
        Length of ``theta``.
    joint : ParameterLayout
        Blocks ``theta`` (n_params,), ``log_alpha`` (n_outputs,) and
        ``log_lambda`` (n_inputs + 2,): the variables of
        :func:`joint_negative_bound`.

    Examples
    --------
    >>> from sklearn_meanfield.variational._erf_network import NetworkShape
    >>> shape = NetworkShape(3, 4, 1, "full")
    >>> shape.n_weights, shape.n_params  # 4 * (3 + 1) + 4 weights
    (20, 230)
    >>> shape.params.names, shape.weights.shapes
    (('mean', 'log_diag', 'lower'), ((4, 4), (4, 1)))
    """

    def __init__(self, n_inputs, n_hidden, n_outputs, covariance="full", rank=2):
        self.n_inputs = int(n_inputs)
        self.n_hidden = int(n_hidden)
        self.n_outputs = int(n_outputs)
        self.covariance = covariance
        self.n_aug = self.n_inputs + 1
        self.weights = ParameterLayout.of(
            U=(self.n_hidden, self.n_aug), V=(self.n_hidden, self.n_outputs)
        )
        self.n_u = self.weights.sizes[0]
        self.n_weights = k = self.weights.n_params
        if covariance == "full":
            self.rank = k
            factor = {"lower": k * (k - 1) // 2}
        elif covariance == "lowrank":
            self.rank = int(min(rank, k))
            factor = {"factor": (k, self.rank)}
        elif covariance == "diag":
            self.rank = 0
            factor = {}
        else:
            raise ValueError(f"unknown covariance {covariance!r}")
        self.params = ParameterLayout.of(mean=k, log_diag=k, **factor)
        self.n_params = self.params.n_params
        self.joint = ParameterLayout.of(
            theta=self.n_params,
            log_alpha=self.n_outputs,
            log_lambda=self.n_inputs + 2,
        )

    @property
    def _tril(self):
        """Indices of the strictly lower triangle of ``L`` (full family).

        Built on first use: ``k (k - 1)`` indices, so that a shape can be
        sized (and a fit refused) without them.
        """
        if not hasattr(self, "_tril_cache"):
            self._tril_cache = np.tril_indices(self.n_weights, -1)
        return self._tril_cache


def unpack(theta, shape):
    """Split the flat parameter vector into ``(wbar, log_diag, F)``.

    ``full``: ``C = L L^T`` with ``L = diag(exp(log_diag)) + strictly lower``;
    returned ``F = L`` and the diagonal part ``d`` of ``C`` is zero.
    ``lowrank``/``diag``: ``C = diag(exp(2 log_diag)) + F F^T``.
    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.variational._erf_network import (
    ...     NetworkShape, init_params, unpack)
    >>> shape = NetworkShape(2, 2, 1, "full")
    >>> wbar, log_diag, F = unpack(init_params(shape, np.random.RandomState(0)), shape)
    >>> wbar.shape, F.shape, bool(np.allclose(np.diag(F), np.exp(log_diag)))
    ((8,), (8, 8), True)
    """
    k = shape.n_weights
    blocks = shape.params.unpack(theta)
    # A wild L-BFGS trial step must not overflow exp (or underflow it to a
    # zero variance); the bound's optimum lies far inside this range.
    log_diag = np.clip(blocks.log_diag, -20.0, 10.0)
    if shape.covariance == "full":
        F = np.zeros((k, k))
        F[shape._tril] = blocks.lower
        F[np.diag_indices(k)] = np.exp(log_diag)
    elif shape.covariance == "lowrank":
        F = blocks.factor
    else:
        F = np.zeros((k, 0))
    return blocks.mean, log_diag, F


def _diag_part(log_diag, shape):
    """The diagonal ``d**2`` of ``C`` outside ``F F^T`` (zero for full)."""
    if shape.covariance == "full":
        return np.zeros_like(log_diag)
    return np.exp(2.0 * log_diag)


def covariance_matrix(theta, shape):
    """The dense covariance ``C`` of ``Q``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.variational._erf_network import (
    ...     NetworkShape, covariance_matrix, init_params)
    >>> shape = NetworkShape(2, 2, 1, "diag")
    >>> C = covariance_matrix(init_params(shape, np.random.RandomState(0)), shape)
    >>> bool(np.allclose(C, 0.01 * np.eye(8)))  # init_std = 0.1
    True
    """
    _, log_diag, F = unpack(theta, shape)
    return np.diag(_diag_part(log_diag, shape)) + F @ F.T


def init_params(shape, rng, init_std=0.1):
    """Random mean weights and a small isotropic covariance.

    Input-to-hidden weights are drawn with variance ``1 / n_inputs`` so that
    hidden units start in the non-saturated range of ``g`` for standardised
    inputs; output weights with variance ``1 / n_hidden``.
    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.variational._erf_network import (
    ...     NetworkShape, init_params)
    >>> shape = NetworkShape(2, 3, 1, "lowrank", rank=2)
    >>> init_params(shape, np.random.RandomState(0)).shape == (shape.n_params,)
    True
    """
    k = shape.n_weights
    H, P, M = shape.n_hidden, shape.n_aug, shape.n_outputs
    U = rng.normal(scale=1.0 / np.sqrt(max(shape.n_inputs, 1)), size=(H, P))
    U[:, -1] = rng.normal(scale=0.5, size=H)
    V = rng.normal(scale=1.0 / np.sqrt(H), size=(H, M))
    factor = {}
    if shape.covariance == "full":
        factor["lower"] = 0.0
    elif shape.covariance == "lowrank":
        # F = 0 is a stationary point of the bound, so start off it.
        factor["factor"] = rng.normal(
            scale=init_std / np.sqrt(shape.rank), size=(k, shape.rank)
        )
    return shape.params.pack(
        mean=shape.weights.pack(U=U, V=V), log_diag=np.log(init_std), **factor
    )


def weight_groups(shape):
    """Group index of every weight: one per input (ARD), biases, outputs.

    Returns an int array of length ``n_weights`` with values in
    ``0..n_inputs + 1``: ``d < n_inputs`` for the weights from input ``d``,
    ``n_inputs`` for hidden biases, ``n_inputs + 1`` for hidden-to-output.
    Examples
    --------
    >>> from sklearn_meanfield.variational._erf_network import (
    ...     NetworkShape, weight_groups)
    >>> weight_groups(NetworkShape(2, 2, 1)).tolist()
    [0, 1, 2, 0, 1, 2, 3, 3]
    """
    P = shape.n_aug
    # Every unit's weight from input d is in group d, its bias in group P - 1.
    return shape.weights.pack(U=np.arange(P), V=P)


class LocalMoments(NamedTuple):
    """Moments of the activations ``a`` and output weights ``v`` per point.

    ``Ubar`` (H, P) and ``Vbar`` (H, M) are the mean weights, ``abar`` (n, H)
    the mean activations, ``S`` (n, H, H) their covariances,
    ``c[n, m, k, i] = Cov(v_km, a_ni)`` (n, M, H, H) and
    ``D[m, k, l] = Cov(v_km, v_lm)`` (M, H, H).
    """

    Ubar: np.ndarray
    Vbar: np.ndarray
    abar: np.ndarray
    S: np.ndarray
    c: np.ndarray
    D: np.ndarray


class _PairTerms(NamedTuple):
    """Coefficients of the jet entries in ``<f_m^2>`` for every pair (i, j).

    ``<v_i g(a_i) v_j g(a_j)>`` by Stein's lemma is
    ``A J00 + w10 J10 + w01 J01 + w20 J20 + w11 J11 + w02 J02``; ``ci1, ci2``
    (``cj1, cj2``) are the covariances of ``v_i`` (``v_j``) with ``(a_i,
    a_j)`` and ``vi, vj`` the mean output weights, broadcast to (n, M, H, H).
    """

    A: np.ndarray
    w10: np.ndarray
    w01: np.ndarray
    w20: np.ndarray
    w11: np.ndarray
    w02: np.ndarray
    ci1: np.ndarray
    ci2: np.ndarray
    cj1: np.ndarray
    cj2: np.ndarray
    vi: np.ndarray
    vj: np.ndarray


class _Jets(NamedTuple):
    """What the backward pass reuses from :func:`_data_moments`: the
    univariate moments ``e``, the pair jet ``J``, the :class:`_PairTerms` and
    ``cdiag[n, m, i] = Cov(v_im, a_ni)``."""

    e: np.ndarray
    J: np.ndarray
    terms: _PairTerms
    cdiag: np.ndarray


class BoundStats(NamedTuple):
    """What the hyperparameters' re-estimates and gradients need from ``Q``.

    ``sq_err`` (n_outputs,) is ``sum_n s_n l_nm``, the weighted expected
    squared errors; ``n_samples`` is ``sum_n s_n`` (the number of rows
    without weights); ``second_moment`` (n_weights,) is ``wbar_j^2 + C_jj``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.variational._erf_network import BoundStats
    >>> BoundStats(np.array([5.0]), 10, np.array([0.5])).n_samples
    10
    """

    sq_err: np.ndarray
    n_samples: float
    second_moment: np.ndarray


class BoundGradients(NamedTuple):
    """The backward pass of the bound (:func:`_evaluate`).

    ``g_wbar`` (k,) is the gradient of minus the bound in the mean weights;
    ``g_S``, ``g_c``, ``g_D`` those of the expected loss in the local moments
    (:class:`LocalMoments`), from which ``dL/dC`` follows; ``diag`` and ``F``
    are ``Q``'s covariance factors and ``woodbury`` ``(C^-1 F, diag(C^-1))``
    for the factored families (None for ``"full"``).
    """

    g_wbar: np.ndarray
    g_S: np.ndarray
    g_c: np.ndarray
    g_D: np.ndarray
    diag: np.ndarray
    F: np.ndarray
    woodbury: tuple


def _local(X1, wbar, C, shape):
    """Moments of ``(a, v)`` at every data point, from the dense ``C``.

    ``S_nij = x_n^T C[u_i, u_j] x_n``, ``c_nmki = Cov(v_km, a_ni)`` and
    ``D_mkl = C[v_km, v_lm]``: two BLAS products with ``X1``.
    """
    H, P, M = shape.n_hidden, shape.n_aug, shape.n_outputs
    n = X1.shape[0]
    Ubar, Vbar = shape.weights.unpack(wbar)
    abar = X1 @ Ubar.T  # (n, H)
    Cuu, Cvu, Cvv = _weight_blocks(C, shape)
    half = X1 @ Cuu.transpose(1, 0, 2, 3).reshape(P, H * H * P)  # (n, i j q)
    S = np.matmul(half.reshape(n, H * H, P), X1[:, :, None]).reshape(n, H, H)
    c = (X1 @ Cvu.transpose(3, 1, 0, 2).reshape(P, M * H * H)).reshape(n, M, H, H)
    D = np.einsum("kmlm->mkl", Cvv)
    return LocalMoments(Ubar, Vbar, abar, S, c, D)


def _weight_blocks(C, shape):
    """Views ``(C_uu, C_vu, C_vv)`` of a ``k x k`` matrix over the weights.

    Of shapes (H, P, H, P), (H, M, H, P) and (H, M, H, M): row and column
    indices split by :attr:`NetworkShape.weights`.
    """
    rows = shape.weights.unpack(C, axis=0)
    u_columns, v_columns = shape.weights.unpack(rows.V)
    return shape.weights.unpack(rows.U).U, u_columns, v_columns


def _local_factored(X1, wbar, diag, F, shape):
    """:func:`_local` for ``C = diag(diag) + F F^T`` without forming ``C``.

    With ``A_nir = sum_p x_np F[(i, p), r]`` (the activations' loadings):
    ``S_nij = A_ni . A_nj + [i = j] sum_p x_np^2 d_(i,p)^2``,
    ``c_nmki = F[v_km] . A_ni`` (the diagonal part couples no ``v`` to a
    ``u``) and ``D_mkl = F[v_km] . F[v_lm] + [k = l] d_(v_km)^2``: memory
    ``O(n H r + k r)`` instead of ``k^2``.
    """
    Ubar, Vbar = shape.weights.unpack(wbar)
    abar = X1 @ Ubar.T
    Fu, Fv = shape.weights.unpack(F, axis=0)  # (H, P, r), (H, M, r)
    diag_u, diag_v = shape.weights.unpack(diag)
    A = np.einsum("np,ipr->nir", X1, Fu)
    S = np.einsum("nir,njr->nij", A, A)
    idx = np.arange(shape.n_hidden)
    S[:, idx, idx] += (X1 * X1) @ diag_u.T
    c = np.einsum("kmr,nir->nmki", Fv, A)
    D = np.einsum("kmr,lmr->mkl", Fv, Fv)
    D[:, idx, idx] += diag_v.T
    return LocalMoments(Ubar, Vbar, abar, S, c, D)


def _local_moments(X1, theta, shape):
    """The local moments and ``diag(C)``, dense only for the full family."""
    wbar, log_diag, F = unpack(theta, shape)
    diag = _diag_part(log_diag, shape)
    if shape.covariance == "full":
        C = np.diag(diag) + F @ F.T
        return _local(X1, wbar, C, shape), np.diagonal(C).copy()
    loc = _local_factored(X1, wbar, diag, F, shape)
    return loc, diag + np.einsum("jr,jr->j", F, F)


def output_moments(X1, theta, shape):
    """Predictive ``<f>`` and ``<f^2>`` for every row of ``X1`` and output.

    Parameters
    ----------
    X1 : ndarray of shape (n_samples, n_inputs + 1)
        Standardised inputs with a trailing column of ones.
    theta : ndarray
        Flat variational parameters.
    shape : NetworkShape

    Returns
    -------
    mean, second : ndarray of shape (n_samples, n_outputs)
    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.variational._erf_network import (
    ...     NetworkShape, init_params, output_moments)
    >>> rng = np.random.RandomState(0)
    >>> X1 = np.column_stack([rng.normal(size=(4, 2)), np.ones(4)])
    >>> shape = NetworkShape(2, 3, 1)
    >>> mean, second = output_moments(X1, init_params(shape, rng), shape)
    >>> mean.shape, bool(np.all(second >= mean**2))
    ((4, 1), True)
    """
    # Rows in chunks: the per-row moments hold O(H^2 (P + M)) numbers each.
    H, P, M = shape.n_hidden, shape.n_aug, shape.n_outputs
    per_row = 8 * H * H * (P + 20 * M + 10)
    chunk = max(1, int(_PREDICT_CHUNK_BYTES // per_row))
    first = np.empty((X1.shape[0], M))
    second = np.empty((X1.shape[0], M))
    for start in range(0, X1.shape[0], chunk):
        rows = slice(start, start + chunk)
        loc, _ = _local_moments(X1[rows], theta, shape)
        first[rows], second[rows], _ = _data_moments(loc, order=2)
    return first, second


def _symmetric_pair_moments(loc, order):
    """The jet for every pair (i, j), computed on i <= j only.

    ``J[p, q]`` at ``(i, j)`` equals ``J[q, p]`` at ``(j, i)``, which halves
    the cost of the most expensive step.
    """
    abar, S = loc.abar, loc.S
    n, H = abar.shape
    iu, ju = np.triu_indices(H)
    sdiag = np.diagonal(S, axis1=1, axis2=2)
    half = erf_pair_moments(
        abar[:, iu], abar[:, ju], sdiag[:, iu], S[:, iu, ju], sdiag[:, ju], order
    )
    # Scattering into both triangles costs far less than the jet itself.
    J = np.empty(half.shape[:3] + (H, H))
    J[..., iu, ju] = half
    J[..., ju, iu] = np.swapaxes(half, 0, 1)
    return J


def _data_moments(loc, order):
    """``<f_m>`` and ``<f_m^2>`` (n, M) by Stein's lemma on every pair (i, j)."""
    abar, S, c, D, Vbar = loc.abar, loc.S, loc.c, loc.D, loc.Vbar
    sdiag = np.diagonal(S, axis1=1, axis2=2)
    e = erf_moments(abar, sdiag, order=order - 1)
    J = _symmetric_pair_moments(loc, order)
    cdiag = np.diagonal(c, axis1=2, axis2=3)  # (n, M, H)
    # <v_i g(a_i)> = vbar_i <g> + Cov(v_i, a_i) <g'>.
    first = e[0] @ Vbar + np.einsum("nmi,ni->nm", cdiag, e[1])
    # Pair (i, j): c_i = Cov(v_i, (a_i, a_j)) = (ci1, ci2), c_j = (cj1, cj2).
    ci1 = cdiag[:, :, :, None]
    ci2 = c
    cj1 = np.swapaxes(c, 2, 3)
    cj2 = cdiag[:, :, None, :]
    vi = Vbar.T[None, :, :, None]  # (1, M, H, 1)
    vj = Vbar.T[None, :, None, :]
    A = vi * vj + D[None]
    t = _PairTerms(
        A=A,
        w10=vi * cj1 + vj * ci1,
        w01=vi * cj2 + vj * ci2,
        w20=ci1 * cj1,
        w11=ci1 * cj2 + ci2 * cj1,
        w02=ci2 * cj2,
        ci1=ci1,
        ci2=ci2,
        cj1=cj1,
        cj2=cj2,
        vi=vi,
        vj=vj,
    )
    Jn = J[:, :, :, None]  # broadcast the jet over outputs
    second = (
        t.A * Jn[0, 0]
        + t.w10 * Jn[1, 0]
        + t.w01 * Jn[0, 1]
        + t.w20 * Jn[2, 0]
        + t.w11 * Jn[1, 1]
        + t.w02 * Jn[0, 2]
    ).sum(axis=(2, 3))
    return first, second, _Jets(e, J, t, cdiag)


def _row_weights(sample_weight, n):
    """``(w, sum w)``: the weights as a column (n, 1), or ``(1, n)`` unweighted."""
    if sample_weight is None:
        return 1.0, float(n)
    w = np.asarray(sample_weight, dtype=float)
    return w[:, None], float(w.sum())


def _evaluate(theta, X1, T, alpha, lam, shape, return_grad, sample_weight):
    """Minus the bound, its :class:`BoundStats` and, if asked, its gradient
    with respect to ``wbar`` and the local moments of every data point (the
    backward pass shared by :func:`negative_bound` and
    :func:`natural_gradient_terms`; else None)."""
    M = shape.n_outputs
    k = shape.n_weights
    n = X1.shape[0]
    weight, n_eff = _row_weights(sample_weight, n)
    wbar, log_diag, F = unpack(theta, shape)
    diag = _diag_part(log_diag, shape)
    loc, cdiag_C = _local_moments(X1, theta, shape)
    order = 4 if return_grad else 2
    first, second, jets = _data_moments(loc, order=order)
    # Row n counts sample_weight[n] times: its log-likelihood is multiplied.
    sq_err = weight * (second - 2.0 * T * first + T * T)

    data = 0.5 * n_eff * np.sum(np.log(alpha) - _LOG_2PI) - 0.5 * np.sum(sq_err * alpha)
    second_moment = wbar * wbar + cdiag_C
    prior = 0.5 * np.sum(np.log(lam) - _LOG_2PI) - 0.5 * np.sum(lam * second_moment)
    if shape.covariance == "full":
        logdet = 2.0 * np.sum(log_diag)
        woodbury = None
    else:
        logdet, woodbury = _lowrank_logdet(diag, F)
    entropy = 0.5 * logdet + 0.5 * k * (1.0 + _LOG_2PI)
    value = data + prior + entropy
    stats = BoundStats(sq_err.sum(axis=0), n_eff, second_moment)
    if not return_grad:
        return -value, stats, None

    # d(-value) = d(sum_nm alpha_m l_nm / 2) - d(prior) - ...
    gF2 = np.broadcast_to(0.5 * alpha * weight, (n, M))  # d loss / d <f^2>
    gF1 = -alpha * T * weight  # d loss / d <f>
    g_U, g_vbar, g_S, g_c, g_D = _backward(loc, jets, gF1, gF2, X1)
    # Prior (as a loss) adds lam wbar to the mean gradient.
    g_wbar = shape.weights.pack(U=g_U, V=g_vbar) + lam * wbar
    return -value, stats, BoundGradients(g_wbar, g_S, g_c, g_D, diag, F, woodbury)


def _backward(loc, jets, gF1, gF2, X1):
    """Gradients of the expected loss from those in ``<f>`` and ``<f^2>``.

    ``gF1`` and ``gF2`` (n, M) are the derivatives of the loss with respect
    to ``<f_m>`` and ``<f_m^2>`` at every point; the chain rule runs back
    through the jets (Bonnet's and Price's theorems: a derivative in a mean or
    a covariance is a jet of higher order) to the mean input weights
    ``g_U`` (H, P), the mean output weights ``g_vbar`` (H, M) and the local
    moments ``g_S`` (n, H, H), ``g_c`` (n, M, H, H), ``g_D`` (M, H, H).
    """
    e, J, t, cdiag = jets
    Vbar = loc.Vbar
    H = Vbar.shape[0]
    g4 = gF2[:, :, None, None]  # (n, M, 1, 1)
    # Coefficients of each jet entry, summed over outputs.
    W = {
        (0, 0): (g4 * t.A).sum(axis=1),
        (1, 0): (g4 * t.w10).sum(axis=1),
        (0, 1): (g4 * t.w01).sum(axis=1),
        (2, 0): (g4 * t.w20).sum(axis=1),
        (1, 1): (g4 * t.w11).sum(axis=1),
        (0, 2): (g4 * t.w02).sum(axis=1),
    }
    g_m1 = sum(w * J[p + 1, q] for (p, q), w in W.items())
    g_m2 = sum(w * J[p, q + 1] for (p, q), w in W.items())
    g_s11 = 0.5 * sum(w * J[p + 2, q] for (p, q), w in W.items())
    g_s22 = 0.5 * sum(w * J[p, q + 2] for (p, q), w in W.items())
    g_s12 = sum(w * J[p + 1, q + 1] for (p, q), w in W.items())
    g_abar = g_m1.sum(axis=2) + g_m2.sum(axis=1)
    g_sdiag = g_s11.sum(axis=2) + g_s22.sum(axis=1)

    # Terms through the output weights (per output m).
    Jn = J[:, :, :, None]
    J00, J10, J01 = Jn[0, 0], Jn[1, 0], Jn[0, 1]
    J20, J11, J02 = Jn[2, 0], Jn[1, 1], Jn[0, 2]
    gA = g4 * J00  # (n, M, H, H)
    g_D = gA.sum(axis=0)  # (M, H, H)
    vi, vj = t.vi, t.vj
    ci1, ci2, cj1, cj2 = t.ci1, t.ci2, t.cj1, t.cj2
    # d/d vbar: A = vi vj + D, w10 = vi cj1 + vj ci1, w01 = vi cj2 + vj ci2.
    g_vi = g4 * (J00 * vj + J10 * cj1 + J01 * cj2)
    g_vj = g4 * (J00 * vi + J10 * ci1 + J01 * ci2)
    g_vbar = (g_vi.sum(axis=(0, 3)) + g_vj.sum(axis=(0, 2))).T  # (H, M)
    g_ci1 = g4 * (vj * J10 + J20 * cj1 + J11 * cj2)
    g_ci2 = g4 * (vj * J01 + J11 * cj1 + J02 * cj2)
    g_cj1 = g4 * (vi * J10 + ci1 * J20 + ci2 * J11)
    g_cj2 = g4 * (vi * J01 + ci1 * J11 + ci2 * J02)
    g_c = g_ci2 + np.swapaxes(g_cj1, 2, 3)
    g_cdiag = g_ci1.sum(axis=3) + g_cj2.sum(axis=2)  # (n, M, H)
    # First moment: <f_m> = sum_i vbar_im e0_i + c_mii e1_i.
    g_vbar += e[0].T @ gF1
    g_cdiag = g_cdiag + gF1[:, :, None] * e[1][:, None, :]
    g_e0 = gF1 @ Vbar.T  # (n, H)
    g_e1 = np.einsum("nm,nmi->ni", gF1, cdiag)
    g_abar = g_abar + g_e0 * e[1] + g_e1 * e[2]
    g_sdiag = g_sdiag + 0.5 * (g_e0 * e[2] + g_e1 * e[3])
    idx = np.arange(H)
    g_c[:, :, idx, idx] += g_cdiag
    g_S = g_s12
    g_S[:, idx, idx] += g_sdiag
    g_U = g_abar.T @ X1  # (H, P)
    return g_U, g_vbar, g_S, g_c, g_D


def negative_bound(
    theta,
    X1,
    T,
    alpha,
    lam,
    shape,
    return_grad=True,
    return_stats=False,
    sample_weight=None,
):
    """Minus the variational lower bound and its gradient.

    ``F = <log p(T | w, alpha)> + <log p(w | lambda)> + H[Q]`` with
    ``<log p(T | w)> = sum_nm [log(alpha_m / 2 pi) - alpha_m l_nm] / 2``,
    ``l_nm = <f_m^2> - 2 t_nm <f_m> + t_nm^2`` (Barber & Bishop 1998, eqs. 9-11),
    prior term ``sum_j [log(lambda_j / 2 pi) - lambda_j (wbar_j^2 + C_jj)] / 2``
    and entropy ``log|C| / 2 + k (1 + log 2 pi) / 2``.

    Parameters
    ----------
    theta : ndarray of shape (shape.n_params,)
    X1 : ndarray of shape (n_samples, n_inputs + 1)
    T : ndarray of shape (n_samples, n_outputs)
    alpha : ndarray of shape (n_outputs,)
        Noise precisions.
    lam : ndarray of shape (n_weights,)
        Prior precision of every weight.
    shape : NetworkShape
    return_grad : bool, default=True
    return_stats : bool, default=False
        Also return the :class:`BoundStats` at ``Q`` (what the
        hyperparameters' gradients and re-estimates need).
    sample_weight : ndarray of shape (n_samples,) or None, default=None
        Weights ``s_n`` of the rows: row ``n``'s log-likelihood counts
        ``s_n`` times (an integer weight is the row repeated, zero drops it).

    Returns
    -------
    value : float
    grad : ndarray of shape (shape.n_params,), only if ``return_grad``.
    stats : BoundStats, only if ``return_stats``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.variational._erf_network import (
    ...     NetworkShape, init_params, negative_bound)
    >>> rng = np.random.RandomState(0)
    >>> X1 = np.column_stack([rng.normal(size=(5, 2)), np.ones(5)])
    >>> T = rng.normal(size=(5, 1))
    >>> shape = NetworkShape(2, 3, 1, "full")
    >>> theta = init_params(shape, rng)
    >>> value, grad = negative_bound(theta, X1, T, np.ones(1), np.ones(12), shape)
    >>> grad.shape == theta.shape, bool(np.isfinite(value))
    (True, True)
    """
    value, stats, local = _evaluate(
        theta, X1, T, alpha, lam, shape, return_grad, sample_weight
    )
    if not return_grad:
        return (value, stats) if return_stats else value
    F, diag = local.F, local.diag
    # C = diag(d^2) + F F^T: dL/dF = 2 (dL/dC) F, dL/d(d^2) = diag(dL/dC).
    if shape.covariance == "full":
        target = _covariance_gradient(local, X1, lam, shape)
        g_F = target @ F
        g_diag = 0.5 * np.diagonal(target)
    else:  # without the k x k matrix
        target_diag, g_F = covariance_gradient_products(local, X1, lam, shape, F)
        g_diag = 0.5 * target_diag

    grad = np.empty_like(theta)
    blocks = shape.params.unpack(grad)
    blocks.mean[:] = local.g_wbar
    if shape.covariance == "full":
        # Entropy: log|C| / 2 = sum log_diag; d L_jj / d log_diag_j = L_jj.
        blocks.log_diag[:] = np.diagonal(g_F) * np.diagonal(F) - 1.0
        blocks.lower[:] = g_F[shape._tril]
    else:
        CinvF, cinv_diag = local.woodbury
        # d log|C| / dF = 2 C^-1 F; d log|C| / d d_j^2 = (C^-1)_jj.
        g_diag = g_diag - 0.5 * cinv_diag
        blocks.log_diag[:] = g_diag * 2.0 * diag
        if shape.covariance == "lowrank":
            blocks.factor[:] = g_F - CinvF
    return (value, grad, stats) if return_stats else (value, grad)


def natural_gradient_terms(theta, X1, T, alpha, lam, shape, sample_weight=None):
    """Minus the bound, its gradient in ``wbar`` and twice its gradient in ``C``.

    The expected loss ``L = -<log p(T, w)>`` depends on ``C`` only through the
    moments of each point's activations and output weights, so
    ``G = dL / dC`` (a symmetric matrix) follows from the same backward pass as
    :func:`negative_bound`.  The bound is stationary in ``C`` where
    ``C^-1 = 2 G`` (Opper & Archambeau 2009), and ``2 G`` is the prior
    precision plus the expected Hessian of the data term (Price's theorem):
    the target of a natural-gradient step on the precision.

    Returns
    -------
    value : float
    g_wbar : ndarray of shape (n_weights,)
    target_precision : ndarray of shape (n_weights, n_weights) or TargetOperator
        ``2 G``; for a diagonal ``C`` a :class:`TargetOperator` (its diagonal
        and products with vectors), so that no ``k x k`` matrix is formed.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.variational._erf_network import (
    ...     NetworkShape, init_params, natural_gradient_terms)
    >>> rng = np.random.RandomState(0)
    >>> X1 = np.column_stack([rng.normal(size=(5, 2)), np.ones(5)])
    >>> shape = NetworkShape(2, 3, 1, "full")
    >>> theta = init_params(shape, rng)
    >>> _, g, P = natural_gradient_terms(
    ...     theta, X1, rng.normal(size=(5, 1)), np.ones(1), np.ones(12), shape)
    >>> P.shape, bool(np.allclose(P, P.T))
    ((12, 12), True)
    """
    if shape.covariance == "lowrank":
        raise ValueError("natural-gradient terms are for full or diag covariances")
    value, _, local = _evaluate(theta, X1, T, alpha, lam, shape, True, sample_weight)
    if shape.covariance == "diag":
        return value, local.g_wbar, TargetOperator(local, X1, lam, shape)
    return value, local.g_wbar, _covariance_gradient(local, X1, lam, shape)


class TargetOperator:
    """``2 dL/dC`` as an operator: its diagonal and its products with vectors.

    What the natural-gradient step of a diagonal ``Q`` needs (the diagonal for
    the precision, products for the mean's conjugate-gradient solve) in
    ``O(n H^2 + k)`` memory, through :func:`covariance_gradient_products`.

    Attributes
    ----------
    diagonal : ndarray of shape (n_weights,)
    """

    def __init__(self, local, X1, lam, shape):
        self._args = (local, X1, lam, shape)
        self.diagonal = covariance_gradient_products(
            local, X1, lam, shape, np.zeros((shape.n_weights, 0))
        )[0]

    def dot(self, v):
        """``(2 dL/dC) v`` for a vector ``v`` of length ``n_weights``."""
        return covariance_gradient_products(*self._args, v[:, None])[1][:, 0]


def covariance_gradient_products(local, X1, lam, shape, V):
    """``diag(2 dL/dC)`` and ``(2 dL/dC) V`` without forming ``dL/dC``.

    The same matrix as :func:`_covariance_gradient`, applied to the columns of
    ``V`` (shape (n_weights, r)) through its structure: its
    input-to-hidden block is ``sum_n x_n x_n^T`` weighted by ``g_S``, its
    coupling to the output weights ``sum_n x_n`` weighted by ``g_c``.  Costs
    ``O(n H^2 r + n H P r)`` and memory ``O(n H r + k r)``.

    Parameters
    ----------
    local : BoundGradients
        From the backward pass of the bound.
    X1 : ndarray of shape (n_samples, n_inputs + 1)
    lam : ndarray of shape (n_weights,)
    shape : NetworkShape
    V : ndarray of shape (n_weights, r)

    Returns
    -------
    diagonal : ndarray of shape (n_weights,)
    product : ndarray of shape (n_weights, r)
    """
    g_S, g_c, g_D = local.g_S, local.g_c, local.g_D
    idx = np.arange(shape.n_hidden)
    diagonal = shape.weights.pack(
        U=2.0 * (np.diagonal(g_S, axis1=1, axis2=2).T @ (X1 * X1)),
        V=2.0 * g_D[:, idx, idx].T,
    )
    diagonal += lam
    Vu, Vv = shape.weights.unpack(V, axis=0)  # (H, P, r), (H, M, r)
    B = np.einsum("nq,jqr->njr", X1, Vu)
    inner = np.einsum("nij,njr->nir", g_S + np.swapaxes(g_S, 1, 2), B)
    inner += np.einsum("nmki,kmr->nir", g_c, Vv)
    product = np.empty_like(V, dtype=float)
    product_u, product_v = shape.weights.unpack(product, axis=0)
    product_u[...] = np.einsum("np,nir->ipr", X1, inner)
    product_v[...] = np.einsum("nmki,nir->kmr", g_c, B)
    product_v += np.einsum("mkl,lmr->kmr", g_D + np.swapaxes(g_D, 1, 2), Vv)
    product += lam[:, None] * V
    return diagonal, product


def _covariance_gradient(local, X1, lam, shape):
    """``2 dL/dC`` (symmetric, prior included) from the local gradients."""
    H, P, M = shape.n_hidden, shape.n_aug, shape.n_outputs
    n, k = X1.shape[0], shape.n_weights
    g_S, g_c, g_D = local.g_S, local.g_c, local.g_D
    G = np.zeros((k, k))  # its upper right block (u rows, v columns) stays 0
    Guu, Gvu, Gvv = _weight_blocks(G, shape)
    # S_nij = x_n^T C[u_i, u_j] x_n: dL/dC[(i, p), (j, q)] = sum_n g_S x_np x_nq.
    weighted = g_S.reshape(n, H * H, 1) * X1[:, None, :]
    Guu[...] = (
        np.tensordot(weighted, X1, axes=([0], [0]))
        .reshape(H, H, P, P)
        .transpose(0, 2, 1, 3)
    )
    # c_nmki = sum_p C[v_km, (i, p)] x_np.
    Gvu[...] = np.tensordot(g_c, X1, axes=([0], [0])).transpose(1, 0, 2, 3)
    # D_mkl = C[v_km, v_lm].
    for m in range(M):
        Gvv[:, m, :, m] = g_D[m]
    target = G + G.T  # 2 * the symmetric gradient
    target[np.diag_indices(k)] += lam
    return target


def _lowrank_logdet(diag, F):
    """``log|diag + F F^T|``, ``C^-1 F`` and ``diag(C^-1)`` by Woodbury."""
    r = F.shape[1]
    scaled = F / diag[:, None]  # D^-1 F
    inner = np.eye(r) + F.T @ scaled
    chol = np.linalg.cholesky(inner)
    logdet = np.sum(np.log(diag)) + 2.0 * np.sum(np.log(np.diagonal(chol)))
    # C^-1 F = D^-1 F M^-1 with M = I + F^T D^-1 F.
    CinvF = np.linalg.solve(inner, scaled.T).T if r else scaled
    cinv_diag = 1.0 / diag - np.einsum("jr,jr->j", CinvF, scaled)
    return logdet, (CinvF, cinv_diag)


def reestimate_from_stats(stats, n_samples, groups, max_precision=1e8):
    """Hyperparameters that maximise the bound at fixed ``Q``.

    ``alpha_m = N / sum_n l_nm`` (with sample weights ``s_n``:
    ``sum_n s_n / sum_n s_n l_nm``) and, for each weight group ``g`` of ``W_g``
    weights, ``lambda_g = W_g / sum_{j in g} (wbar_j^2 + C_jj)`` (NOTES.md 3;
    Barber & Bishop 1998, section 2.1), from the :class:`BoundStats` that
    :func:`negative_bound` returns at ``Q``.  Each is the exact maximiser of a
    concave function of one hyperparameter, so the bound cannot decrease;
    clipping to ``[1 / max_precision, max_precision]`` keeps that property.

    Returns
    -------
    alpha : ndarray of shape (n_outputs,)
    lambda_groups : ndarray of shape (n_groups,)

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.variational._erf_network import (
    ...     BoundStats, reestimate_from_stats)
    >>> stats = BoundStats(np.array([5.0]), 10, np.array([0.5, 1.5]))
    >>> alpha, lam = reestimate_from_stats(stats, 10, np.array([0, 0]))
    >>> alpha.tolist(), lam.tolist()
    ([2.0], [1.0])
    """
    sq_err = np.maximum(stats.sq_err, 0.0)
    alpha = n_samples / np.maximum(sq_err, n_samples / max_precision)
    n_groups = groups.max() + 1
    counts = np.bincount(groups, minlength=n_groups)
    sums = np.bincount(groups, weights=stats.second_moment, minlength=n_groups)
    lam = counts / np.maximum(sums, counts / max_precision)
    return np.clip(alpha, 1.0 / max_precision, max_precision), np.clip(
        lam, 1.0 / max_precision, max_precision
    )


def bound_at_hyperparameters(value, stats, alpha_old, lam_old, alpha, lam, n):
    """Minus the bound after the hyperparameters change from old to new.

    The bound depends on ``alpha`` and ``lambda`` (per weight) only through
    ``n/2 sum log alpha - sum alpha sq_err / 2`` and
    ``sum (log lambda - lambda second_moment) / 2``; ``stats`` the
    :class:`BoundStats` of :func:`negative_bound` at the same ``Q``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.variational._erf_network import (
    ...     BoundStats, bound_at_hyperparameters)
    >>> stats = BoundStats(np.array([5.0]), 10, np.array([0.5]))
    >>> one = np.ones(1)
    >>> float(bound_at_hyperparameters(3.0, stats, one, one, one, one, 10))
    3.0
    """

    def part(a, lam_):
        return (
            0.5 * n * np.sum(np.log(a))
            - 0.5 * np.sum(a * stats.sq_err)
            + (0.5 * np.sum(np.log(lam_) - lam_ * stats.second_moment))
        )

    return value + part(alpha_old, lam_old) - part(alpha, lam)


def joint_negative_bound(params, X1, T, shape, groups, sample_weight=None):
    """Minus the bound as a function of ``Q`` and the log hyperparameters.

    ``params = (theta, log alpha, log lambda_groups)``; ``sample_weight`` as
    in :func:`negative_bound`.  Used inside each
    optimisation phase so that ``Q`` and the hyperparameters move together
    (plain alternation converges slowly when they are coupled); the exact
    re-estimation of :func:`reestimate_from_stats` still closes every phase.

    Returns
    -------
    value : float
    grad : ndarray of the shape of ``params``
    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.variational._erf_network import (
    ...     NetworkShape, init_params, joint_negative_bound, weight_groups)
    >>> rng = np.random.RandomState(0)
    >>> X1 = np.column_stack([rng.normal(size=(5, 2)), np.ones(5)])
    >>> shape = NetworkShape(2, 2, 1, "diag")
    >>> groups = weight_groups(shape)
    >>> params = np.concatenate([init_params(shape, rng), np.zeros(1 + 4)])
    >>> value, grad = joint_negative_bound(
    ...     params, X1, rng.normal(size=(5, 1)), shape, groups)
    >>> grad.shape == params.shape
    True
    """
    theta, log_alpha, log_lambda = shape.joint.unpack(params)
    alpha = np.exp(log_alpha)
    lam_groups = np.exp(log_lambda)
    value, grad_theta, stats = negative_bound(
        theta,
        X1,
        T,
        alpha,
        lam_groups[groups],
        shape,
        return_stats=True,
        sample_weight=sample_weight,
    )
    n = stats.n_samples  # sum of the sample weights
    counts = np.bincount(groups, minlength=lam_groups.size)
    sums = np.bincount(groups, weights=stats.second_moment, minlength=counts.size)
    # d(-F)/d log alpha_m = alpha_m sum_n l_nm / 2 - N / 2, likewise for lambda.
    grad_alpha = 0.5 * (alpha * stats.sq_err - n)
    grad_lam = 0.5 * (lam_groups * sums - counts)
    return value, shape.joint.pack(
        theta=grad_theta, log_alpha=grad_alpha, log_lambda=grad_lam
    )


def sample_outputs(X1, theta, shape, rng, n_draws):
    """Network outputs for ``n_draws`` weight vectors drawn from ``Q``.

    Parameters
    ----------
    X1 : ndarray of shape (n_samples, n_inputs + 1)
    theta : ndarray
    shape : NetworkShape
    rng : numpy.random.RandomState
    n_draws : int

    Returns
    -------
    f : ndarray of shape (n_draws, n_samples, n_outputs)
    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.variational._erf_network import (
    ...     NetworkShape, init_params, sample_outputs)
    >>> rng = np.random.RandomState(0)
    >>> X1 = np.column_stack([rng.normal(size=(4, 2)), np.ones(4)])
    >>> shape = NetworkShape(2, 3, 1)
    >>> sample_outputs(X1, init_params(shape, rng), shape, rng, 5).shape
    (5, 4, 1)
    """
    wbar, log_diag, F = unpack(theta, shape)
    scale = np.sqrt(_diag_part(log_diag, shape))
    w = wbar + rng.standard_normal((n_draws, shape.n_weights)) * scale
    w = w + rng.standard_normal((n_draws, F.shape[1])) @ F.T
    U, V = shape.weights.unpack(w)  # (n_draws, H, P), (n_draws, H, M)
    hidden = erf(np.einsum("np,shp->snh", X1, U) / _SQRT2)
    return np.einsum("snh,shm->snm", hidden, V)


def cavity_loo(T, mean, second, alpha, max_leverage=0.9, sample_weight=None):
    """Leave-one-out means by removing each point's Gaussian site.

    Under ``Q`` the output at a training point is ``N(<f>, s^2)``; dividing out
    the likelihood ``N(t; f, 1 / alpha)`` leaves the cavity, whose mean is
    ``t - (t - <f>) / (1 - alpha s^2)`` (exact for a linear-Gaussian model,
    where ``alpha s^2`` is the leverage).  The leverage is capped at
    ``max_leverage`` so that a point the fit cannot explain stays finite.
    A row of weight ``s_n`` contributes the likelihood to the power ``s_n``
    (precision ``s_n alpha``), and all of it is removed: the leverage is
    ``s_n alpha s^2`` (a zero-weight row's cavity is ``Q`` itself).

    Returns
    -------
    loo_mean : ndarray of the shape of ``T``
    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.variational._erf_network import cavity_loo
    >>> T, mean = np.array([[1.0]]), np.array([[0.8]])
    >>> # leverage alpha s^2 = 4 * 0.125 = 0.5 doubles the residual
    >>> cavity_loo(T, mean, mean**2 + 0.125, np.array([4.0])).round(6).tolist()
    [[0.6]]
    """
    var_f = np.maximum(second - mean * mean, 0.0)
    if sample_weight is not None:
        var_f = var_f * np.asarray(sample_weight, dtype=float)[:, None]
    leverage = np.minimum(alpha * var_f, max_leverage)
    return T - (T - mean) / (1.0 - leverage)


def psis_loo(X1, T, theta, shape, alpha, rng, n_draws=2000, sample_weight=None):
    """Leave-one-out means by Pareto-smoothed importance sampling from ``Q``.

    ``Q`` stands in for the posterior; the leave-one-out posterior of point
    ``n`` is reached with weights ``1 / p(t_n | w)``, smoothed by PSIS
    (:func:`sklearn_meanfield._loo.psis_smooth`), one output at a time.  A
    row of weight ``s_n`` is removed whole: weights ``p(t_n | w)^-s_n``.

    Returns
    -------
    loo_mean : ndarray of the shape of ``T``
    pareto_k : ndarray of the shape of ``T``
    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.variational._erf_network import (
    ...     NetworkShape, init_params, psis_loo)
    >>> rng = np.random.RandomState(0)
    >>> X1 = np.column_stack([rng.normal(size=(6, 2)), np.ones(6)])
    >>> shape = NetworkShape(2, 2, 1)
    >>> loo, k = psis_loo(X1, rng.normal(size=(6, 1)), init_params(shape, rng),
    ...     shape, np.ones(1), rng, n_draws=200)
    >>> loo.shape, k.shape
    ((6, 1), (6, 1))
    """
    from .._loo import psis_smooth

    f = sample_outputs(X1, theta, shape, rng, n_draws)  # (S, n, M)
    loo = np.empty_like(T)
    pareto_k = np.empty_like(T)
    for m in range(T.shape[1]):
        log_w = 0.5 * alpha[m] * (T[:, m] - f[:, :, m]) ** 2
        if sample_weight is not None:
            log_w = log_w * sample_weight
        smoothed, k = psis_smooth(log_w)
        loo[:, m] = np.sum(np.exp(smoothed) * f[:, :, m], axis=0)
        pareto_k[:, m] = k
    return loo, pareto_k
