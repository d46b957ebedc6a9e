"""The Gaussian posterior of the latent fields for given Gaussian sites.

Every training point carries a *site* ``exp(-tau_i h_i**2 / 2 + nu_i h_i)``;
with the prior ``N(0, K)`` the posterior of the fields is ``N(mu, Sigma)``,
``Sigma = (K^-1 + diag(tau))^-1`` and ``mu = Sigma nu``.
:class:`KernelPosterior` computes its marginals from the kernel matrix,
choosing the factorisation by the signs of the site precisions (label noise
makes a few of them negative).  The solvers see it only through the posterior
interface described in :func:`~sklearn_meanfield.tap._ep.expectation_propagation`,
which :class:`~sklearn_meanfield.tap._weight_space.WeightSpacePosterior` and
:class:`~sklearn_meanfield.tap._sparse.FITCPosterior` implement as well.
"""

import numpy as np
from scipy.linalg import LinAlgError, blas, cholesky, lapack, solve_triangular

__all__ = ["KernelPosterior", "proper_solution"]


def _cholesky_lower(matrix):
    return cholesky(matrix, lower=True, check_finite=False)


# Below this value of tau_i K_ii the marginal variance is computed as
# K_ii - |V_i|^2; above it as (1 - [B^-1]_ii) / tau_i, whose cancellation costs
# about 1e-14 / (tau_i K_ii) in relative accuracy (4e-11 at the threshold).
_SMALL_SITE_THRESHOLD = 1e-3


class _PositiveSiteSolution:
    """Posterior for non-negative site precisions, through B = I + S^1/2 K S^1/2.

    This is the numerically preferred form (GPML algorithm 3.5): B's eigenvalues
    are at least one, and no Cholesky factor of K is needed.  With
    ``B = L L^T`` the marginal variances come from
    ``Sigma = S^-1/2 (I - B^-1) S^-1/2``, i.e. from the column norms of
    ``L^-1`` (a triangular inverse, ``n^3 / 3`` flops); only the sites with
    ``tau_i K_ii`` below ``_SMALL_SITE_THRESHOLD`` take ``K_ii - |V_i|^2``
    with ``V = L^-1 S^1/2 K`` (one column each).  A sweep therefore costs
    about ``2 n^3 / 3`` flops instead of ``4 n^3 / 3`` with the full ``V``.
    """

    def __init__(self, K, tau, nu):
        n = len(tau)
        sqrt_tau = np.sqrt(tau)
        # B, its Cholesky factor and the factor's inverse share one n x n
        # buffer (LAPACK in place; B is symmetric, so its C-ordered buffer is
        # a Fortran-ordered B as well).
        B = np.multiply(K, sqrt_tau[:, None])
        B *= sqrt_tau
        B.flat[:: n + 1] += 1.0
        chol, info = lapack.dpotrf(B.T, lower=1, clean=1, overwrite_a=1)
        if info != 0:
            raise LinAlgError("I + S^1/2 K S^1/2 is not positive definite")
        self.logdet = 2.0 * np.sum(np.log(np.diag(chol)))
        chol_inv, info = lapack.dtrtri(chol, lower=1, overwrite_c=1)
        if info != 0:
            raise LinAlgError("singular Cholesky factor")
        self._chol_inv = chol_inv
        self._sqrt_tau = sqrt_tau
        prior_var = np.diag(K)
        b_inv_diag = np.einsum("ij,ij->j", chol_inv, chol_inv)
        small = tau * prior_var < _SMALL_SITE_THRESHOLD
        with np.errstate(divide="ignore", invalid="ignore"):
            self.var = np.where(small, prior_var, (1.0 - b_inv_diag) / tau)
        # The other sites still inform a site of (near-)zero precision; only
        # when every site is zero (a cold start) is the prior the posterior.
        if np.any(small) and np.any(tau > 0):
            V = blas.dtrmm(1.0, chol_inv, sqrt_tau[:, None] * K[:, small], lower=1)
            self.var[small] = prior_var[small] - np.einsum("ij,ij->j", V, V)
        K_nu = K @ nu
        projected = chol_inv @ (sqrt_tau * K_nu)
        self.mean = K_nu - K @ (sqrt_tau * (chol_inv.T @ projected))

    def variance_reduction(self, K_cross):
        """Row-wise ``k*^T (K + S^-1)^-1 k*`` for columns ``k*`` of ``K_cross``."""
        # L^-1 is triangular: trmm does half the flops of a general product.
        U = blas.dtrmm(1.0, self._chol_inv, self._sqrt_tau[:, None] * K_cross, lower=1)
        return np.einsum("ij,ij->j", U, U)

    def site_correction(self):
        """``S - S Sigma S = S^1/2 B^-1 S^1/2``, free of cancellation.

        ``A = L^-1 S^1/2`` is lower triangular, so ``A^T A`` is LAPACK's
        ``lauum`` (``n^3 / 3`` flops, half those of a general product), which
        fills the lower triangle; the upper one is its mirror.
        """
        n = len(self._sqrt_tau)
        scaled = self._chol_inv * self._sqrt_tau[None, :]  # lower, zero above
        correction, info = lapack.dlauum(scaled, lower=1, overwrite_c=1)
        if info != 0:
            raise LinAlgError(f"lauum failed (info={info})")
        correction += correction.T
        correction.flat[:: n + 1] *= 0.5
        return correction

    def release(self):
        """Nothing to drop: ``L^-1`` is what prediction needs."""


class _SignedSiteSolution:
    """Posterior for site precisions of any sign (label noise), NOTES.md sec. 1.

    With ``K = L_K L_K^T``: ``C = I + L_K^T S L_K = L_C L_C^T``,
    ``W = L_C^-1 L_K^T`` and ``Sigma = W^T W``; no square root of ``tau`` is
    taken, and ``log|I + K S| = 2 sum log diag(L_C)``.
    """

    def __init__(self, chol_K, tau, nu):
        C = chol_K.T @ (tau[:, None] * chol_K)
        C[np.diag_indices_from(C)] += 1.0
        chol_C = _cholesky_lower(C)
        W = solve_triangular(chol_C, chol_K.T, lower=True, check_finite=False)
        self.var = np.einsum("ij,ij->j", W, W)
        self.mean = W.T @ (W @ nu)
        self.logdet = 2.0 * np.sum(np.log(np.diag(chol_C)))
        self._W = W
        self._tau = tau

    def variance_reduction(self, K_cross):
        """Row-wise ``k*^T (S - S Sigma S) k*``, the same quantity for any sign."""
        scaled = self._tau[:, None] * K_cross
        projected = self._W @ scaled
        return np.einsum("ij,ij->j", K_cross, scaled) - np.einsum(
            "ij,ij->j", projected, projected
        )

    def site_correction(self):
        """``S - S Sigma S`` (the evidence gradient's matrix), any sign."""
        scaled = self._W * self._tau[None, :]
        correction = -(scaled.T @ scaled)
        correction[np.diag_indices_from(correction)] += self._tau
        return correction

    def release(self):
        """Nothing to drop: W is what prediction needs."""


class _FewNegativeSiteSolution:
    """Posterior with a few negative site precisions, as a low-rank correction.

    Label noise leaves negative precisions on a few sites only (the points on
    the wrong side of the boundary, typically a few percent).  With
    ``S = S+ - R^2`` (``R`` nonzero on the negative set ``N``),
    ``Sigma+ = (K^-1 + S+)^-1`` comes from :class:`_PositiveSiteSolution` and
    Woodbury's identity adds the rest::

        Sigma = Sigma+ + G R M^-1 R G^T,  G = Sigma+[:, N],
        M = I - R Sigma+[N, N] R = L_M L_M^T,

    so ``Sigma = Sigma+ + U^T U`` with ``U = L_M^-1 R G^T``.  ``K^-1 + S`` is
    positive definite exactly when ``M`` is, and
    ``log|I + K S| = log|I + K S+| + log|M|``.  The cost over the positive
    sites' ``2 n^3 / 3`` flops is ``O(n^2 |N|)``, against about
    ``10 n^3 / 3`` for :class:`_SignedSiteSolution`.
    """

    def __init__(self, K, tau, nu):
        negative = np.flatnonzero(tau < 0)
        tau_plus = np.maximum(tau, 0.0)
        positive = _PositiveSiteSolution(K, tau_plus, nu)
        K_N = K[:, negative]
        # G = Sigma+[:, N] = K_N - K S+^1/2 L^-T L^-1 S+^1/2 K_N.
        sqrt_tau = positive._sqrt_tau
        Z = blas.dtrmm(1.0, positive._chol_inv, sqrt_tau[:, None] * K_N, lower=1)
        Z = blas.dtrmm(1.0, positive._chol_inv, Z, lower=1, trans_a=1)
        G = K_N - K @ (sqrt_tau[:, None] * Z)
        r = np.sqrt(-tau[negative])
        M = -(r[:, None] * G[negative] * r[None, :])
        M[np.diag_indices_from(M)] += 1.0
        chol_M = _cholesky_lower(M)  # LinAlgError: K^-1 + S is not definite
        U = solve_triangular(chol_M, r[:, None] * G.T, lower=True, check_finite=False)
        self.var = positive.var + np.einsum("ij,ij->j", U, U)
        self.mean = positive.mean + U.T @ (U @ nu)
        self.logdet = positive.logdet + 2.0 * np.sum(np.log(np.diag(chol_M)))
        self._positive = positive
        self._negative = negative
        self._tau = tau
        self._tau_plus = tau_plus
        self._G = G
        self._U = U

    def variance_reduction(self, K_cross):
        """Row-wise ``k*^T (S - S Sigma S) k*`` for columns ``k*`` of ``K_cross``.

        With ``P = S+ - S+ Sigma+ S+`` (the positive part's correction) and
        ``S- = S - S+``: ``S - S Sigma S = P + S- - S- Sigma+ S+ - S+ Sigma+ S-
        - S- Sigma+ S- - (U S)^T (U S)``; every term but ``P`` has rank
        ``|N|``.
        """
        N, G, tau = self._negative, self._G, self._tau
        scaled_N = tau[N, None] * K_cross[N]  # S- k*, on N
        reduction = self._positive.variance_reduction(K_cross)
        reduction += np.einsum("ij,ij->j", K_cross[N], scaled_N)
        reduction -= np.einsum("ij,ij->j", scaled_N, G[N] @ scaled_N)
        reduction -= 2.0 * np.einsum(
            "ij,ij->j", scaled_N, G.T @ (self._tau_plus[:, None] * K_cross)
        )
        projected = self._U @ (tau[:, None] * K_cross)
        reduction -= np.einsum("ij,ij->j", projected, projected)
        return reduction

    def site_correction(self):
        """``S - S Sigma S``, the same terms as :meth:`variance_reduction`."""
        N, G, tau = self._negative, self._G, self._tau
        correction = self._positive.site_correction()
        cross = self._tau_plus[:, None] * G * tau[None, N]  # S+ Sigma+ S-, cols N
        correction[:, N] -= cross
        correction[N, :] -= cross.T
        correction[np.ix_(N, N)] -= tau[N, None] * G[N] * tau[None, N]
        correction[N, N] += tau[N]
        scaled = self._U * tau[None, :]
        correction -= scaled.T @ scaled
        return correction

    def release(self):
        """Nothing to drop: prediction needs the positive part, G and U."""


# Beyond this share of negative sites the low-rank correction costs more than
# the direct factorisation (its O(n^2 |N|) terms pass the n^3 of the latter).
_MAX_NEGATIVE_SHARE = 0.25


class KernelPosterior:
    """The Gaussian posterior of the fields for a kernel matrix ``K``.

    Parameters
    ----------
    K : ndarray of shape (n, n)
        Prior covariance of the latent fields at the training points.
    jitter : float, default=1e-10
        Relative nugget added to ``K`` only where a Cholesky factor of ``K``
        itself is needed (site precisions of both signs); increased tenfold
        until the factorisation succeeds.

    Examples
    --------
    Gaussian sites ``tau = 1 / s2``, ``nu = y / s2`` give the posterior of
    Gaussian-process regression with noise variance ``s2``; a negative site
    precision is handled too (here ``K^-1 + S`` stays positive definite).

    >>> import numpy as np
    >>> from sklearn_meanfield.tap._posterior import KernelPosterior
    >>> K = np.array([[1.0, 0.5], [0.5, 1.0]])
    >>> y, s2 = np.array([1.0, -1.0]), 0.5
    >>> solved = KernelPosterior(K).solve(np.full(2, 1 / s2), y / s2)
    >>> G = np.linalg.solve(K + s2 * np.eye(2), K)
    >>> bool(np.allclose(solved.mean, G.T @ y))
    True
    >>> bool(np.allclose(solved.var, np.diag(K - K @ G)))
    True
    >>> tau = np.array([2.0, -0.3])
    >>> signed = KernelPosterior(K).solve(tau, np.zeros(2))
    >>> exact = np.linalg.inv(np.linalg.inv(K) + np.diag(tau))
    >>> bool(np.allclose(signed.var, np.diag(exact)))
    True
    """

    def __init__(self, K, jitter=1e-10):
        self.K = K
        self.prior_var = np.diag(K).copy()
        self.jitter = jitter
        self._chol_K = None

    @property
    def n(self):
        """Number of training points."""
        return self.K.shape[0]

    def matvec(self, alpha):
        """``K @ alpha``: the posterior mean of the fields for coefficients alpha."""
        return self.K @ alpha

    def subset(self, index):
        """The posterior object of the training points ``index`` only."""
        return KernelPosterior(self.K[np.ix_(index, index)], jitter=self.jitter)

    def _chol(self):
        if self._chol_K is None:
            scale = max(np.mean(self.prior_var), np.finfo(float).tiny)
            jitter = self.jitter
            while True:
                try:
                    K = self.K.copy()
                    K[np.diag_indices_from(K)] += jitter * scale
                    self._chol_K = _cholesky_lower(K)
                    break
                except LinAlgError:
                    if jitter > 1e-2:
                        raise
                    jitter *= 10.0
        return self._chol_K

    def solve(self, tau, nu):
        """Posterior marginals for sites ``(tau, nu)``.

        Returns an object with ``mean``, ``var`` (marginal variances),
        ``logdet`` (``log|I + K S|``), ``variance_reduction(K_cross)`` and
        ``site_correction()``.  Raises ``LinAlgError`` when ``K^-1 + S`` is not
        positive definite.
        """
        n_negative = np.count_nonzero(tau < 0)
        if n_negative == 0:
            return _PositiveSiteSolution(self.K, tau, nu)
        if n_negative <= _MAX_NEGATIVE_SHARE * len(tau):
            return _FewNegativeSiteSolution(self.K, tau, nu)
        return _SignedSiteSolution(self._chol(), tau, nu)


def proper_solution(posterior, tau, nu):
    """The posterior for sites ``(tau, nu)``, or None when it is improper."""
    try:
        solution = posterior.solve(tau, nu)
    except LinAlgError:
        return None
    if np.all(solution.var > 0) and np.all(np.isfinite(solution.mean)):
        return solution
    return None
