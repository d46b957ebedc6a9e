"""TAP mean-field theory / expectation propagation on a Gaussian prior.

Opper and Winther's adaptive TAP equations for Gaussian-process classification
reach the same fixed point as expectation propagation (EP): every training point
carries a Gaussian *site* ``exp(-tau_i h_i**2 / 2 + nu_i h_i)``, the posterior of
the fields is ``N(mu, Sigma)`` with ``Sigma = (K^-1 + diag(tau))^-1`` and
``mu = Sigma nu``, and the *cavity* distribution of ``h_i`` (the posterior with
point ``i``'s site removed) is the leave-one-out predictive distribution of the
field.  The naive mean-field theory replaces the cavity variance by the prior
variance ``K_ii``; the 1996 perceptron paper's closure by ``1 - |<w>|^2 / N``.

The loop below is written once against a small *posterior* interface so that the
same code serves a kernel matrix (Gaussian-process classifier, perceptron with
fewer samples than features) and a weight-space representation (perceptron with
many samples).  Formulas: NOTES.md section 1; Rasmussen and Williams (2006),
sections 3.6 and 5.5.2.

References
----------
.. [1] M. Opper and O. Winther, "Mean field methods for classification with
   Gaussian processes", NIPS 11, 1998.
.. [2] M. Opper and O. Winther, "A mean field algorithm for Bayes learning in
   large feed-forward neural networks", NIPS 9, 1996.
.. [3] C. E. Rasmussen and C. K. I. Williams, "Gaussian Processes for Machine
   Learning", MIT Press, 2006, algorithms 3.5 and 3.6.
"""

from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np
from scipy import sparse
from scipy.linalg import LinAlgError, blas, cholesky, lapack, solve_triangular

from ._weight_space import WeightSpacePosterior

__all__ = [
    "EPAcceleration",
    "EPOptions",
    "EPState",
    "KernelPosterior",
    "SiteUpdate",
    "Sweep",
    "WeightSpacePosterior",
    "PriorVariance",
    "TAPSolution",
    "ep_sweep",
    "expectation_propagation",
    "mean_field_iteration",
    "ep_log_evidence",
    "ep_evidence_gradient",
    "ep_label_noise_gradient",
    "MergedPoints",
    "merge_identical_points",
    "partial_cavities",
    "positive_site_weights",
    "weighted_error_rate",
]


def _cholesky_lower(matrix):
    return cholesky(matrix, lower=True, check_finite=False)


# Below this value of tau_i K_ii the marginal variance is computed as
# K_ii - |V_i|^2; above it as (1 - [B^-1]_ii) / tau_i, whose cancellation costs
# about 1e-14 / (tau_i K_ii) in relative accuracy (4e-11 at the threshold,
# measured against an 80-bit reference).
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
        ``lauum`` (``n^3 / 3`` flops, half the time of a general product at
        n = 1000-2000), which fills the lower triangle; the upper one is its
        mirror.
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
    the wrong side of the boundary: 2 of 250 and 19 of 1000 on the benchmark's
    data).  With ``S = S+ - R^2`` (``R`` nonzero on the negative set ``N``),
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
    >>> from sklearn_meanfield.tap._core import KernelPosterior
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


@dataclass
class TAPSolution:
    """The converged (or best) state of a TAP / EP run.

    Attributes
    ----------
    tau, nu : ndarray of shape (n,)
        Site precisions and precision-means.
    alpha : ndarray of shape (n,)
        Coefficients of the posterior mean, ``<h> = K alpha``.
    mean, var : ndarray of shape (n,)
        Posterior mean and variance of the fields at the training points.
    cavity_mean, cavity_var : ndarray of shape (n,)
        Cavity (leave-one-out) distribution of each field.
    log_z : ndarray of shape (n,)
        ``log`` of each point's leave-one-out predictive probability of its
        own label.
    log_evidence : float
        Approximate log marginal likelihood (EP only; NaN for the fixed
        cavity-variance mean-field theories).
    n_iter : int
    converged : bool
    posterior : object
        The solved posterior (for predictions and the evidence gradient).
    site_weights : ndarray of shape (n,) or None
        The sites' weights (None: all one).  Site ``i`` stands for the
        likelihood raised to ``site_weights[i]``, i.e. the point repeated
        that many times; ``tau, nu`` are the whole weighted site and the
        cavities above remove the whole of it (the fit without point ``i``).
    copy_cavity_mean, copy_cavity_var : ndarray of shape (n,) or None
        With weights: the cavities that remove one copy of each site,
        ``tau_i / w_i`` (the cavities of the repeated points' EP, at which
        the evidence and its derivative in the likelihood's parameters are
        computed).  None when unweighted (they are the cavities above).
    stopped : bool
        Whether the run ended because its ``on_iteration`` callable asked to
        stop; the best iterate is kept.
    fixed_cavity_variance : bool
        True for :func:`mean_field_iteration` (a closure's cavity variance,
        the cavity mean ``<h_i> - lambda_i alpha_i``), False for EP.
    weights_below_power : str
        How EP treated sites of weight below its power (see
        :func:`expectation_propagation`).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.tap._core import (
    ...     KernelPosterior, expectation_propagation)
    >>> from sklearn_meanfield.tap._likelihoods import make_likelihood
    >>> x = np.linspace(-2, 2, 6)
    >>> K = np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2)
    >>> t = np.sign(x)
    >>> solution = expectation_propagation(
    ...     KernelPosterior(K), t, make_likelihood("probit", 0.0), tol=1e-9)
    >>> solution.converged, solution.cavity_var.shape
    (True, (6,))
    >>> bool(np.all(t * solution.mean > 0))
    True
    """

    tau: np.ndarray
    nu: np.ndarray
    alpha: np.ndarray
    mean: np.ndarray
    var: np.ndarray
    cavity_mean: np.ndarray
    cavity_var: np.ndarray
    log_z: np.ndarray
    log_evidence: float
    n_iter: int
    converged: bool
    posterior: object = field(repr=False, default=None)
    site_weights: np.ndarray = field(repr=False, default=None)
    stopped: bool = False
    fixed_cavity_variance: bool = False
    weights_below_power: str = "auto"
    copy_cavity_mean: np.ndarray = field(repr=False, default=None)
    copy_cavity_var: np.ndarray = field(repr=False, default=None)


def ep_log_evidence(
    log_z, tau, nu, cavity_mean, cavity_tau, mean, var, logdet, site_weights=None
):
    """EP approximation of the log marginal likelihood (GPML eq. 3.65).

    Written with elementwise terms plus ``log|I + K S|`` and ``nu^T mu`` so it
    holds for any representation of the posterior (kernel or weight space) and
    for site precisions of either sign.

    With weights ``w`` (site ``i`` approximates ``p_i**w_i``, power EP with
    power ``1 / w_i``) the evidence is that of EP on the data with point ``i``
    repeated ``w_i`` times, each copy carrying the site ``(tau_i, nu_i) / w_i``
    and its cavity removing one copy::

        log Z = -1/2 log|I + K S| + 1/2 nu^T mu
                + sum_i w_i (log Z_i - log C_i),
        log C_i = log E_cavity_i[exp(-tau_i h^2 / (2 w_i) + nu_i h / w_i)],

    the first line being ``log`` of the prior times all sites, integrated, and
    ``Z_i`` the tilted normaliser at the one-copy cavity.  With ``w = 1`` this
    is GPML's eq. 3.65 term by term.

    Parameters
    ----------
    log_z : ndarray of shape (n,)
        Log normalisers of the tilted distributions.
    tau, nu : ndarray of shape (n,)
        Site precisions and precision-means.
    cavity_mean, cavity_tau : ndarray of shape (n,)
        Cavity means and precisions.
    mean, var : ndarray of shape (n,)
        Posterior marginals.
    logdet : float
        ``log|I + K S|``.
    site_weights : ndarray of shape (n,) or None, default=None
        Positive site weights; then ``log_z`` and the cavity are those that
        remove one copy, ``tau_i / w_i``, of each site.

    Returns
    -------
    float

    Examples
    --------
    With Gaussian sites EP is exact, so the value is the marginal likelihood
    of Gaussian-process regression, ``log N(y; 0, K + s2 I)``
    (:attr:`TAPSolution.log_evidence` is this function's value):

    >>> import numpy as np
    >>> from scipy.stats import multivariate_normal
    >>> from sklearn_meanfield.tap._core import (
    ...     KernelPosterior, expectation_propagation)
    >>> from sklearn_meanfield.tap._likelihoods import GaussianLikelihood
    >>> K = np.array([[1.0, 0.6, 0.2], [0.6, 1.0, 0.6], [0.2, 0.6, 1.0]])
    >>> y = np.array([0.5, -0.3, 1.2])
    >>> solution = expectation_propagation(
    ...     KernelPosterior(K), y, GaussianLikelihood(0.1), tol=1e-12)
    >>> exact = multivariate_normal(np.zeros(3), K + 0.1 * np.eye(3)).logpdf(y)
    >>> bool(abs(solution.log_evidence - exact) < 1e-9)
    True
    """
    total_precision = 1.0 / var  # tau + cavity_tau
    # w = 1 (a float) gives the unweighted terms bit for bit.
    w = 1.0 if site_weights is None else site_weights
    copy_tau, copy_nu = tau / w, nu / w  # one copy; total_precision too
    return float(
        np.sum(w * log_z)
        + 0.5 * np.sum(w * (np.log(total_precision) - np.log(cavity_tau)))
        - 0.5 * logdet
        + 0.5 * nu @ mean
        - 0.5 * np.sum(w * copy_nu**2 / total_precision)
        + 0.5
        * np.sum(
            w
            * cavity_mean
            * cavity_tau
            * (copy_tau * cavity_mean - 2.0 * copy_nu)
            / total_precision
        )
    )


def _next_step(step, residual, previous_residual, damping):
    """The damped iterations' step control, shared by both solvers.

    Oscillation (a growing residual) halves the step, down to 0.01; steady
    progress lets it grow back by 10% a sweep, up to ``damping``.
    """
    if residual > previous_residual:
        return max(0.5 * step, 0.01)
    return min(1.1 * step, damping)


def _cavities(solution, tau, nu):
    cavity_tau = 1.0 / solution.var - tau
    cavity_nu = solution.mean / solution.var - nu
    return cavity_tau, cavity_nu


# Anderson acceleration is used once the residual is below this: far from the
# fixed point (a cold start on a hard problem) its extrapolations overshoot,
# while the damped iteration makes steady progress there.
_ANDERSON_MAX_RESIDUAL = 0.5
# An accelerated sweep that multiplies the residual by more than this is
# undone and replaced by the damped step (a logistic-label perceptron went
# from residual 0.4 to 1e2 otherwise).  Smaller increases are kept: with label
# noise the accelerated residual is not monotone but still falls fastest
# (GPC benchmark, n=500: 153 sweeps; 193 when every increase is undone).
_ANDERSON_REJECT_RATIO = 2.0


class _AndersonMixing:
    """Anderson acceleration of the EP fixed-point map ``sites -> new sites``.

    Keeps the last ``memory`` differences of the iterates ``x`` and of their
    proposed changes ``f = g(x) - x`` and proposes the combination of past
    iterates whose changes cancel best (Walker and Ni's type-II form with
    mixing 1), in the coordinates of the residual (site precisions times the
    posterior variance, precision-means times its square root) so that no
    handful of near-hard-constraint sites dominates the least squares.  On the
    data of ``benchmarks/bench_tap_gpc.py`` it saves 17-24% of the damped
    iteration's sweeps over a probit fit with optimised kernel, and 31-40%
    with learned label noise, whose negative sites slow the damped iteration
    down.

    References
    ----------
    .. [1] H. F. Walker and P. Ni, "Anderson acceleration for fixed-point
       iterations", SIAM J. Numer. Anal. 49(4), 1715-1735, 2011.
    """

    def __init__(self, memory):
        self.memory = memory
        self.last = None  # (x, change) of the latest sweep
        self.d_iterates = []  # differences of consecutive iterates ...
        self.d_changes = []  # ... and of their changes, newest last

    def restart(self):
        """Forget all but the last sweep."""
        self.d_iterates.clear()
        self.d_changes.clear()

    def propose(self, x, change, weights):
        """The accelerated next iterate, or None while the history is short."""
        if self.last is not None:
            self.d_iterates.append(x - self.last[0])
            self.d_changes.append(change - self.last[1])
            if len(self.d_iterates) > self.memory:
                del self.d_iterates[0], self.d_changes[0]
        self.last = (x, change)
        if not self.d_iterates:
            return None
        # The least squares min |W (change - dF gamma)| through its m x m
        # normal equations: m <= memory is tiny, and at n = 1e5 sites a
        # dense (2n x m) solver costs a sixth of a sweep.
        weighted = np.array(self.d_changes) * weights  # (m, 2n)
        gram = weighted @ weighted.T
        rhs = weighted @ (change * weights)
        if not (np.all(np.isfinite(gram)) and np.all(np.isfinite(rhs))):
            return None
        gamma = np.linalg.lstsq(gram, rhs, rcond=1e-12)[0]
        step = (np.array(self.d_iterates) + np.array(self.d_changes)).T @ gamma
        proposal = x + change - step
        return proposal if np.all(np.isfinite(proposal)) else None


# Degenerate problems (a noise-free step on data it cannot separate) drive
# sites and cavities to overflow.  Every quantity of the iteration is checked
# (invalid cavities and overflowing updates keep their sites, improper or
# non-finite posteriors are refused, the best finite iterate is kept), so the
# floating-point warnings would only repeat what the checks handle; a
# degenerate best iterate then has a non-finite evidence, and the fit warns.
_QUIET_OVERFLOW = np.errstate(over="ignore", invalid="ignore", divide="ignore")


@dataclass(frozen=True)
class EPOptions:
    """Options of :func:`expectation_propagation` (frozen: ``replace`` makes
    variants).

    Attributes
    ----------
    max_iter : int, default=200
        Maximum number of sweeps.
    tol : float, default=1e-6
        Convergence when no posterior mean moves by more than ``tol`` posterior
        standard deviations and no log variance by more than ``tol``.
    damping : float in (0, 1], default=0.8
        Initial fraction of the proposed site change that is taken.
    power : float in (0, 1], default=1.0
        Fractional (power) EP: each cavity removes only ``power`` times its
        site, and the likelihood must then be the likelihood raised to
        ``power`` (Minka's power EP, an alpha-divergence projection).  Its
        fixed points are more stable for likelihoods that are not
        log-concave; 1 is plain EP.  The returned cavities remove the whole
        site.
    site_steps : bool, default=False
        Give every site its own step: halved when its proposed change
        reverses direction, grown by 1.2 (up to ``damping``) otherwise,
        instead of one step for all sites.
    patience : int or None, default=None
        Stop early (not converged) when the smallest residual has not halved
        in this many sweeps.
    anderson_memory : int, default=3
        Number of past sweeps the Anderson acceleration combines; 0 gives
        the plain damped iteration.  Not used with ``site_steps``.
    weights_below_power : {"auto", "tempered", "power"}, default="auto"
        Sites of weight below ``power``: ``"power"`` keeps power EP with
        power ``power / w_i`` above one, which is consistent under
        splitting (``k`` copies of weight ``w / k`` are one site of weight
        ``w``, also for fractional weights) but may leave improper cavities
        and not converge; ``"tempered"`` is plain EP on ``p**w_i``
        (``likelihood.powered``: the step in closed form, probit and
        logistic by quadrature), stable, but consistent under splitting
        only for weights at least ``power`` (merge identical points with
        :func:`merge_identical_points` to keep repeated rows equal to their
        weighted form); ``"auto"`` is ``"tempered"`` where the power has a
        closed form (the step), and for the probit and logistic (powered by
        quadrature) on sites lighter than ``AUTO_TEMPERED_BELOW * power``
        (0.7), down to which power EP converges; ``"power"`` otherwise.
        Integer weights (repeated rows) are never below one.
    """

    max_iter: int = 200
    tol: float = 1e-6
    damping: float = 0.8
    power: float = 1.0
    site_steps: bool = False
    patience: int | None = None
    anderson_memory: int = 3
    weights_below_power: str = "auto"


class Sweep(NamedTuple):
    """One sweep of an iteration, as its ``on_iteration`` callable sees it.

    ``str(sweep)`` is the progress line printed at ``verbose=2``.

    Examples
    --------
    >>> from sklearn_meanfield.tap._core import Sweep
    >>> str(Sweep("EP", 3, 0.0123, 0.8))
    'EP sweep 3: residual 0.0123, step 0.80'
    """

    solver: str  # "EP" or "mean-field"
    number: int  # 1, 2, ...
    residual: float
    step: float | None = None  # the damped step (EP)

    def __str__(self):
        text = f"{self.solver} sweep {self.number}: residual {self.residual:.3g}"
        return text if self.step is None else f"{text}, step {self.step:.2f}"


@dataclass
class EPState:
    """Sites ``(tau, nu)`` and the posterior solved for them."""

    tau: np.ndarray
    nu: np.ndarray
    solution: object


class SiteUpdate(NamedTuple):
    """What one sweep proposes: new sites, which of them are valid (a
    proper cavity and a finite update; the others keep their value), the
    tilted log normalisers and the residual of the change."""

    tau: np.ndarray
    nu: np.ndarray
    valid: np.ndarray
    log_z: np.ndarray
    residual: float


def ep_sweep(state, t, tilted, site_power, site_weights=None):
    """One parallel sweep of site updates from the cavities.

    Every cavity removes ``site_power`` of its site; the tilted moments of
    ``tilted`` give the moment-matched sites (GPy's EP ``_local_updates``,
    all sites at once).  ``site_weights`` (None: all one) measure the
    residual on one copy of each site.

    Returns
    -------
    SiteUpdate
    """
    tau, nu = state.tau, state.nu
    cavity_tau, cavity_nu = _cavities(state.solution, site_power * tau, site_power * nu)
    valid = cavity_tau > 0
    cavity_var = np.where(valid, 1.0 / np.where(valid, cavity_tau, 1.0), 1.0)
    cavity_mean = cavity_nu * cavity_var
    log_z, first, second = tilted.moments(t, cavity_mean, cavity_var)
    denominator = site_power * _tilted_variance_ratio(cavity_var, second)
    proposed_tau = second / denominator
    proposed_nu = (first + cavity_mean * second) / denominator
    # A site whose update overflows (a noise-free step site of a point
    # that cannot be classified, its cavity collapsed) keeps its value.
    valid &= np.isfinite(proposed_tau) & np.isfinite(proposed_nu)
    new_tau = np.where(valid, proposed_tau, tau)
    new_nu = np.where(valid, proposed_nu, nu)
    if site_weights is None:
        residual = _residual(state.solution, new_tau, new_nu, tau, nu)
    else:  # measured on one copy, as for the repeated points
        share = np.minimum(1.0, 1.0 / site_weights)
        residual = _residual(
            state.solution, share * new_tau, share * new_nu, share * tau, share * nu
        )
    return SiteUpdate(new_tau, new_nu, valid, log_z, residual)


class _Best(NamedTuple):
    residual: float
    state: EPState


class _Undo(NamedTuple):
    """The sweep an accelerated step started from (to undo it)."""

    state: EPState
    update: SiteUpdate


class EPAcceleration:
    """How EP moves from one sweep's proposal to the next sites.

    Holds the damping schedule (one step for all sites, shrunk on
    oscillation, or one per site), the Anderson mixing of the last sweeps
    (tried once the residual is below ``_ANDERSON_MAX_RESIDUAL``, undone when
    it multiplies the residual by more than ``_ANDERSON_REJECT_RATIO``), the
    best iterate so far and the patience count.

    Parameters
    ----------
    options : EPOptions
    n : int
        Number of sites.
    """

    def __init__(self, options, n):
        self.options = options
        self.step = float(options.damping)
        self.steps = np.full(n, self.step) if options.site_steps else None
        self._last_change = np.zeros((2, n))
        memory = options.anderson_memory
        self._mixing = _AndersonMixing(memory) if memory > 0 else None
        self._undo = None  # the state an accelerated sweep started from
        self._previous_residual = np.inf
        self._halved_at = (np.inf, 0)  # (residual, sweep) when the best halved
        self.best = None

    def record(self, state, residual, n_iter):
        """Keep the best iterate; note when the best residual halves."""
        if self.best is None or residual < self.best.residual:
            self.best = _Best(residual, state)
        if residual <= 0.5 * self._halved_at[0]:
            self._halved_at = (residual, n_iter)

    def stalled(self, n_iter):
        """Whether the best residual has not halved within ``patience``."""
        patience = self.options.patience
        return patience is not None and n_iter - self._halved_at[1] > patience

    def advance(self, posterior, state, update):
        """The next :class:`EPState`, or None when no step keeps the
        posterior proper."""
        residual = update.residual
        rejected = (
            self._undo is not None
            and residual > _ANDERSON_REJECT_RATIO * self._undo.update.residual
        )
        if rejected:
            # The accelerated sweep made things worse: undo it, and take the
            # damped step from where it started, with a fresh history.
            state, update = self._undo
            residual = update.residual
            self._mixing.restart()
        self._undo = None
        if not rejected:
            self.step = _next_step(
                self.step, residual, self._previous_residual, self.options.damping
            )
        self._previous_residual = residual
        if self.options.site_steps:
            self._update_site_steps(state, update)
        trial = None
        if self._mixing is not None and not self.options.site_steps and not rejected:
            trial = self._accelerate(posterior, state, update)
        if trial is not None:
            return trial
        return self._damped(posterior, state, update)

    def _update_site_steps(self, state, update):
        change = np.stack([update.tau - state.tau, update.nu - state.nu])
        last = self._last_change
        # Opposite signs, compared without a product (which overflows for
        # the huge changes of near-hard-constraint sites).
        reversed_ = np.any(
            ((change > 0) & (last < 0)) | ((change < 0) & (last > 0)), axis=0
        )
        self.steps = np.where(
            reversed_,
            np.maximum(0.5 * self.steps, 0.01),
            np.minimum(1.2 * self.steps, self.options.damping),
        )
        self._last_change = change

    def _accelerate(self, posterior, state, update):
        """The Anderson-accelerated state, or None."""
        accelerated = _accelerated(
            self._mixing, state.solution, state.tau, state.nu, update.tau, update.nu
        )
        # Far from the fixed point (a cold start) the history misleads:
        # damp, and start it afresh.
        if update.residual > _ANDERSON_MAX_RESIDUAL:
            self._mixing.restart()
            return None
        if accelerated is None:
            return None
        trial = _proper_solution(posterior, *accelerated)
        if trial is None:
            self._mixing.restart()
            return None
        self._undo = _Undo(state, update)
        return EPState(*accelerated, trial)

    def _damped(self, posterior, state, update):
        """The damped step, halved until the posterior is proper."""
        trial_step = self.steps if self.options.site_steps else self.step
        tau, nu = state.tau, state.nu
        while np.max(trial_step) >= 1e-4:
            trial_tau = tau + trial_step * (update.tau - tau)
            trial_nu = nu + trial_step * (update.nu - nu)
            trial = _proper_solution(posterior, trial_tau, trial_nu)
            if trial is not None:
                return EPState(trial_tau, trial_nu, trial)
            trial_step = 0.5 * trial_step
        return None


def _starting_state(posterior, start):
    """The first of the warm starts ``start`` whose posterior is proper,
    else zero sites (the prior)."""
    for tau, nu in start or ():
        tau, nu = np.array(tau, dtype=float), np.array(nu, dtype=float)
        try:
            solution = posterior.solve(tau, nu)
        except LinAlgError:  # an invalid warm start: try the next one
            continue
        if np.all(solution.var > 0):
            return EPState(tau, nu, solution)
    tau, nu = np.zeros(posterior.n), np.zeros(posterior.n)
    return EPState(tau, nu, posterior.solve(tau, nu))


@_QUIET_OVERFLOW
def expectation_propagation(
    posterior,
    t,
    likelihood,
    options=None,
    *,
    start=None,
    site_weights=None,
    on_iteration=None,
    **overrides,
):
    """Solve the adaptive TAP / EP equations with parallel damped updates.

    The driver: each sweep proposes new sites from the cavities
    (:func:`ep_sweep`), :class:`EPAcceleration` takes the accelerated or
    damped step to the next sites and solves their posterior; the iterate
    with the smallest residual is kept.

    Posterior interface
    -------------------
    ``posterior`` needs ``n`` (the number of sites) and ``solve(tau, nu)``,
    which raises ``LinAlgError`` when ``K^-1 + diag(tau)`` is not positive
    definite and otherwise returns a solution with ``mean``, ``var`` (the
    marginals, arrays of shape (n,)), ``logdet`` (``log|I + K S|``),
    ``variance_reduction(K_cross)`` (row-wise ``k*^T (K + S^-1)^-1 k*``, for
    predictions), ``site_correction()`` (``S - S Sigma S``, for the evidence
    gradient) and ``release()`` (drop what predictions do not need).
    :func:`mean_field_iteration` also needs ``matvec(alpha)`` and
    ``prior_var``; the perceptron's restarts ``subset(index)``.

    Parameters
    ----------
    posterior : KernelPosterior or compatible
    t : ndarray of shape (n,)
        Targets passed to ``likelihood.moments(t, cavity_mean, cavity_var)``.
    likelihood : object
    options : EPOptions or None, default=None
    start : sequence of (tau, nu) pairs or None, default=None
        Warm starts: the first whose posterior is proper, else zero sites.
    site_weights : ndarray of shape (n,) or None, default=None
        Positive weights (``sample_weight``): site ``i`` is the likelihood
        to the power ``w_i`` (power EP with power ``power / w_i``, see
        :func:`_tilted_sites`): integer weights are repeated points.  The
        cavities remove whole sites (leave-one-out), ``copy_cavity_*`` one
        copy.  None or all ones: the unweighted iteration, bit for bit.
    on_iteration : callable or None, default=None
        ``on_iteration(sweep)`` after every sweep (a :class:`Sweep`); True
        stops the run (the best iterate kept, ``stopped=True``).
    **overrides
        Fields of :class:`EPOptions` replacing those of ``options``.

    Returns
    -------
    TAPSolution

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.tap._core import KernelPosterior
    >>> from sklearn_meanfield.tap._likelihoods import make_likelihood
    >>> x = np.array([-1.5, -0.5, 0.5, 1.5])
    >>> K = np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2)
    >>> solution = expectation_propagation(
    ...     KernelPosterior(K), np.sign(x), make_likelihood("step", 0.0))
    >>> solution.converged, bool(np.all(np.sign(solution.mean) == np.sign(x)))
    (True, True)
    """
    options = replace(options or EPOptions(), **overrides)
    w = _check_site_weights(site_weights, posterior.n)
    # Per-site power of power EP (power / w removes one copy of a weighted
    # site) and the likelihood of the tilted distributions.
    site_power, tilted = _tilted_sites(
        likelihood, w, options.power, options.weights_below_power
    )
    state = _starting_state(posterior, start)
    acceleration = EPAcceleration(options, posterior.n)
    converged = stopped = False
    for n_iter in range(1, options.max_iter + 1):
        update = ep_sweep(state, t, tilted, site_power, w)
        acceleration.record(state, update.residual, n_iter)
        sweep = Sweep("EP", n_iter, update.residual, acceleration.step)
        stop = on_iteration is not None and on_iteration(sweep)
        if update.residual < options.tol and np.all(update.valid):
            converged = True
            break
        if stop:
            stopped = True
            break
        if acceleration.stalled(n_iter):
            break
        state = acceleration.advance(posterior, state, update)
        if state is None:
            break
    final = state if converged else acceleration.best.state
    # Converged: the last sweep's log normalisers belong to these very
    # cavities (one copy of each site removed when power is 1).
    known = update.log_z if converged and options.power == 1.0 else None
    mode = options.weights_below_power
    return _finish(final, t, likelihood, n_iter, converged, known, w, mode, stopped)


def _proper_solution(posterior, tau, nu):
    """The posterior for sites ``(tau, nu)``, or None when it is improper."""
    try:
        solution = posterior.solve(tau, nu)
    except LinAlgError:
        return None
    if np.all(solution.var > 0) and np.all(np.isfinite(solution.mean)):
        return solution
    return None


def _accelerated(mixing, solution, tau, nu, new_tau, new_nu):
    """Anderson-accelerated sites (None while the history is too short), each
    site precision kept on its target's side of zero.

    A site precision whose sign the extrapolation would flip (a log-concave
    likelihood's site made negative, a label-noise site made positive) takes
    its moment-matched target instead: such a flip would only be undone by the
    next sweep, and negative precisions cost a slower factorisation.
    """
    n = len(tau)
    var = solution.var
    proposal = mixing.propose(
        np.concatenate([tau, nu]),
        np.concatenate([new_tau - tau, new_nu - nu]),
        np.concatenate([var, np.sqrt(var)]),
    )
    if proposal is None:
        return None
    accelerated_tau, accelerated_nu = proposal[:n], proposal[n:]
    flipped = ((accelerated_tau < 0) & (new_tau > 0)) | (
        (accelerated_tau > 0) & (new_tau < 0)
    )
    return (
        np.where(flipped, new_tau, accelerated_tau),
        np.where(flipped, new_nu, accelerated_nu),
    )


# The tilted variance (cavity variance times 1 - v b) is kept above this share of
# the cavity variance.  A noise-free step likelihood whose cavity sits far on the
# wrong side would otherwise ask for an infinite site precision (and 1 - v b is
# computed with cancellation there); a site 1e6 times more precise than its
# cavity is already a hard constraint.  Negative site precisions are untouched.
_MIN_TILTED_VARIANCE_RATIO = 1e-6


def _tilted_variance_ratio(cavity_var, second):
    return np.maximum(1.0 - cavity_var * second, _MIN_TILTED_VARIANCE_RATIO)


def _residual(solution, new_tau, new_nu, tau, nu):
    """Size of a proposed site change, in units of the posterior marginals.

    Measured on the marginals ``N(mu_i, var_i)`` that site ``i`` alone would
    produce from its cavity, which is scale-free and finite even when a site
    precision is huge (near-deterministic step likelihood).
    """
    var = solution.var
    cavity_tau = 1.0 / var - tau
    cavity_nu = solution.mean / var - nu
    new_precision = cavity_tau + new_tau
    with np.errstate(divide="ignore", invalid="ignore"):
        # old precision is 1 / var; the old mean is solution.mean.
        log_ratio = np.abs(np.log(new_precision * var))
        new_mean = (cavity_nu + new_nu) / new_precision
        shift = np.abs(new_mean - solution.mean) / np.sqrt(var)
    values = np.concatenate([log_ratio, shift])
    values = values[np.isfinite(values)]
    return float(values.max()) if values.size else np.inf


class _FinalCavities(NamedTuple):
    """The cavities of a final EP state: whole sites removed and, with
    weights, one copy of each (``beta``: its share, ``tilted``: the tilted
    likelihood).  Points without a proper cavity (``repaired``) fall back on
    their posterior marginal, their sites set to zero."""

    tau: np.ndarray
    nu: np.ndarray
    cavity_tau: np.ndarray
    cavity_nu: np.ndarray
    copy_tau: object
    copy_nu: object
    beta: object
    tilted: object
    repaired: bool


def _final_cavities(state, likelihood, w, weights_below_power):
    solution, tau, nu = state.solution, state.tau, state.nu
    cavity_tau, cavity_nu = _cavities(solution, tau, nu)
    # A best iterate of a run that did not converge may hold sites that leave
    # no proper cavity; those points fall back on their posterior marginal.
    invalid = ~(cavity_tau > 0)
    beta = tilted = copy_tau = copy_nu = None
    if w is not None:
        beta, tilted = _tilted_sites(likelihood, w, 1.0, weights_below_power)
        copy_tau, copy_nu = _cavities(solution, beta * tau, beta * nu)
        invalid |= ~(copy_tau > 0)
    repaired = bool(np.any(invalid))
    if repaired:
        tau = np.where(invalid, 0.0, tau)
        nu = np.where(invalid, 0.0, nu)
        cavity_tau = np.where(invalid, 1.0 / solution.var, cavity_tau)
        cavity_nu = np.where(invalid, solution.mean / solution.var, cavity_nu)
        if w is not None:
            copy_tau = np.where(invalid, cavity_tau, copy_tau)
            copy_nu = np.where(invalid, cavity_nu, copy_nu)
    return _FinalCavities(
        tau, nu, cavity_tau, cavity_nu, copy_tau, copy_nu, beta, tilted, repaired
    )


@_QUIET_OVERFLOW
def _finish(
    state,
    t,
    likelihood,
    n_iter,
    converged,
    log_z=None,
    site_weights=None,
    weights_below_power="auto",
    stopped=False,
):
    """The :class:`TAPSolution` of an :class:`EPState`.

    ``log_z``, when given, holds the log normalisers at the cavities that
    remove one copy of each site (the whole site when unweighted);
    ``site_weights`` is None or a checked array of positive weights.
    """
    w = site_weights
    solution = state.solution
    c = _final_cavities(state, likelihood, w, weights_below_power)
    cavity_var = 1.0 / c.cavity_tau
    cavity_mean = c.cavity_nu * cavity_var
    if c.repaired:
        log_z = None
    copy_mean = copy_var = None
    if w is None:
        if log_z is None:
            log_z, _, _ = likelihood.moments(t, cavity_mean, cavity_var)
        evidence_terms = (log_z, c.tau, c.nu, cavity_mean, c.cavity_tau)
        evidence_weights = None
    else:
        copy_var = 1.0 / c.copy_tau
        copy_mean = c.copy_nu * copy_var
        copy_log_z = log_z
        if copy_log_z is None:
            copy_log_z, _, _ = c.tilted.moments(t, copy_mean, copy_var)
        evidence_terms = (copy_log_z, c.tau, c.nu, copy_mean, c.copy_tau)
        evidence_weights = 1.0 / c.beta
        # Leave-one-out: the whole weighted site removed.
        log_z, _, _ = likelihood.moments(t, cavity_mean, cavity_var)
    log_evidence = ep_log_evidence(
        *evidence_terms,
        solution.mean,
        solution.var,
        solution.logdet,
        site_weights=evidence_weights,
    )
    return TAPSolution(
        tau=c.tau,
        nu=c.nu,
        alpha=c.nu - c.tau * solution.mean,
        mean=solution.mean,
        var=solution.var,
        cavity_mean=cavity_mean,
        cavity_var=cavity_var,
        log_z=log_z,
        log_evidence=log_evidence,
        n_iter=n_iter,
        converged=converged,
        posterior=solution,
        site_weights=w,
        weights_below_power=weights_below_power,
        copy_cavity_mean=copy_mean,
        copy_cavity_var=copy_var,
        stopped=stopped,
    )


# weights_below_power="auto": sites lighter than this fraction of the power
# are tempered (plain EP on p**w), heavier ones keep power EP (consistent
# under splitting).  Power EP's cavity removes 1/w of a site, and below this
# it turns improper where the site dominates: on a probit GP of amplitude
# 1000, weights 0.6 did not converge in 500 sweeps and 0.7 took 17.
AUTO_TEMPERED_BELOW = 0.7


def _tilted_sites(likelihood, w, power, mode="auto"):
    """Per-site power ``beta`` of power EP and the tilted distributions'
    likelihood, for site weights ``w`` (None: unweighted) and ``power``.

    Site ``i`` approximates ``p**w_i`` with power ``beta_i = min(1, power /
    w_i)``: its cavity removes ``beta_i`` of the site and its tilted
    distribution holds ``p**min(w_i, power)``.  For ``w_i >= power`` that is
    ``likelihood`` itself (``p**power`` by contract; an integer weight is
    then exactly its repeated copies).  A weight below ``power`` would ask
    for a power above one (a cavity removing more than the site, improper
    where the site outweighs the rest of the posterior: a noise-free step
    with weights 0.3 fitted nothing, a probit GP of amplitude 100 with
    weights 0.3 did not converge in 2000 sweeps); when the likelihood can be
    raised to a power (``likelihood.powered(e)``: the step in closed form,
    probit and logistic by quadrature) it is plain EP on ``p**w_i`` instead
    (unless ``mode="power"``), else the power above one is kept.
    """
    if w is None:
        return power, likelihood
    powered = None if mode == "power" else getattr(likelihood, "powered", None)
    closed_form = getattr(likelihood, "powered_in_closed_form", False)
    below = AUTO_TEMPERED_BELOW if mode == "auto" and not closed_form else 1.0
    temper = w < below * power
    if powered is None or not np.any(temper):
        return power / w, likelihood
    exponent = np.where(temper, w / power, 1.0)
    return np.where(temper, 1.0, power / w), powered(exponent)


def _check_site_weights(site_weights, n):
    """None for unweighted sites (None or all ones), else positive floats."""
    if site_weights is None:
        return None
    w = np.asarray(site_weights, dtype=float)
    if w.shape != (n,):
        raise ValueError(f"site_weights must have shape ({n},), got {w.shape}.")
    if not np.all(np.isfinite(w)) or np.any(w <= 0):
        raise ValueError(
            "site_weights must be positive and finite; drop points of weight "
            "zero (positive_site_weights)."
        )
    if np.all(w == 1.0):
        return None
    return w


def positive_site_weights(sample_weight, n):
    """The points to keep and their site weights, for ``sample_weight``.

    A point of weight zero is a point that is not there: the shells drop it
    before EP, and its leave-one-out prediction is the full model's
    predictive (the model fitted without it).

    Parameters
    ----------
    sample_weight : array-like of shape (n,) or None
        Non-negative weights (validated by scikit-learn's
        ``_check_sample_weight``), or None.
    n : int
        Number of points.

    Returns
    -------
    keep : ndarray of int
        Indices of the points with positive weight, in order.
    site_weights : ndarray of shape (len(keep),) or None
        Their weights for :func:`expectation_propagation` /
        :func:`mean_field_iteration`; None when all are one.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.tap._core import positive_site_weights
    >>> keep, w = positive_site_weights(np.array([1.0, 0.0, 2.0]), 3)
    >>> keep.tolist(), w.tolist()
    ([0, 2], [1.0, 2.0])
    >>> keep, w = positive_site_weights(None, 2)
    >>> keep.tolist(), w
    ([0, 1], None)
    """
    if sample_weight is None:
        return np.arange(n), None
    sample_weight = np.asarray(sample_weight, dtype=float)
    keep = np.flatnonzero(sample_weight > 0)
    return keep, _check_site_weights(sample_weight[keep], len(keep))


class MergedPoints(NamedTuple):
    """Identical points merged into weighted sites
    (:func:`merge_identical_points`).

    Attributes
    ----------
    rows : ndarray of int
        One representative per group, into X, in order of first occurrence.
    site_weights : ndarray
        The groups' total weights.
    kept : ndarray of int
        The samples considered (``keep``).
    group : ndarray of int
        Each kept sample's group.
    share : ndarray
        Each kept sample's weight over its group's.
    """

    rows: np.ndarray
    site_weights: np.ndarray
    kept: np.ndarray
    group: np.ndarray
    share: np.ndarray


def merge_identical_points(X, y_index, keep, weights):
    """Identical points (same inputs, same label) as one weighted site.

    For the shells: both estimators' fits see a repeated data set as its
    weighted form (scikit-learn's sample-weight equivalence), and each
    merged point's leave-one-out removes only its own share of the site
    (:func:`partial_cavities`).

    ``k`` copies of a sample are one site of weight ``k`` at EP's symmetric
    fixed point (:func:`~sklearn_meanfield.tap._core.expectation_propagation`),
    so merging them changes the fixed point not at all, and a repeated data
    set is then fitted exactly as its weighted form (parallel EP on the
    copies' strongly coupled sites needs more sweeps, and may stall where the
    weighted form converges).

    Parameters
    ----------
    X : ndarray or sparse matrix of shape (n_samples, n_features)
        Numeric inputs (for a kernel: the rows the kernel is computed from;
        other kinds of inputs are not merged by this function).
    y_index : ndarray of int of shape (n_samples,)
        Class index of each sample.
    keep : ndarray of int
        The samples to consider (positive weight), in order.
    weights : ndarray of shape (n_samples,) or None
        Sample weights (None: all one).

    Returns
    -------
    MergedPoints or None
        None when the kept samples ``keep`` are distinct.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.tap._core import merge_identical_points
    >>> X = np.array([[1.0, 2.0], [0.5, 0.0], [1.0, 2.0], [1.0, 2.0]])
    >>> merged = merge_identical_points(X, np.array([1, 0, 1, 0]), np.arange(4), None)
    >>> merged.rows.tolist(), merged.site_weights.tolist()
    ([0, 1, 3], [2.0, 1.0, 1.0])
    >>> merged.group.tolist(), merged.share.tolist()
    ([0, 1, 0, 2], [0.5, 1.0, 0.5, 1.0])
    """
    if len(keep) < 2:
        return None
    inverse = _identical_groups(X[keep], y_index[keep])
    if inverse is None:
        return None
    n_groups = int(inverse.max()) + 1
    kept_weights = np.ones(len(keep)) if weights is None else weights[keep]
    totals = np.bincount(inverse, weights=kept_weights, minlength=n_groups)
    first = np.full(n_groups, len(keep))
    np.minimum.at(first, inverse, np.arange(len(keep)))
    return MergedPoints(
        rows=keep[first],
        site_weights=totals,
        kept=keep,
        group=inverse,
        share=kept_weights / totals[inverse],
    )


def _identical_groups(rows, labels):
    """Each row's group of identical (rows, label), numbered in order of
    first occurrence, or None when all rows are distinct."""
    if sparse.issparse(rows):
        rows = sparse.csr_array(rows)
        rows.eliminate_zeros()
        rows.sort_indices()
    # Exact integer hashes of the rows' bits (+0.0 turns -0.0 into 0.0):
    # only rows whose hashes collide are compared.
    keys = _row_hashes(rows, labels)
    _, key_index, key_counts = np.unique(keys, return_inverse=True, return_counts=True)
    candidates = np.flatnonzero(key_counts[key_index] > 1)
    if len(candidates) == 0:
        return None
    inverse = np.arange(len(labels))  # each sample its own group ...
    if sparse.issparse(rows):
        seen = {}
        for j in candidates:
            part = slice(rows.indptr[j], rows.indptr[j + 1])
            key = (
                int(labels[j]),
                rows.indices[part].tobytes(),
                (rows.data[part] + 0.0).tobytes(),
            )
            inverse[j] = seen.setdefault(key, j)
    else:
        # ... except identical candidates, grouped under their first one.
        table = np.column_stack([rows[candidates], labels[candidates]]) + 0.0
        _, first, groups = np.unique(
            table, axis=0, return_index=True, return_inverse=True
        )
        inverse[candidates] = candidates[first[groups.ravel()]]
    # Groups numbered in order of their first sample.
    _, inverse = np.unique(inverse, return_inverse=True)
    if int(inverse.max()) + 1 == len(labels):
        return None
    return inverse


def _row_hashes(rows, labels):
    """A 64-bit integer hash of each row's float bits and label.

    Integer arithmetic (wrapping modulo 2**64) is exact in any order, so
    identical rows get identical hashes whatever the memory layout.
    """
    n_rows, n_cols = rows.shape
    multipliers = np.random.RandomState(0).randint(
        1, 2**62, size=n_cols + 1, dtype=np.uint64
    ) * np.uint64(2) + np.uint64(1)
    if sparse.issparse(rows):
        bits = (rows.data + 0.0).view(np.uint64)
        contributions = np.append(
            bits * multipliers[rows.indices] + multipliers[(rows.indices + 7) % n_cols],
            np.uint64(0),
        )
        starts = rows.indptr[:-1]
        sums = np.add.reduceat(contributions, starts)
        hashes = np.where(np.diff(rows.indptr) > 0, sums, np.uint64(0))
    else:
        bits = np.ascontiguousarray(rows + 0.0).view(np.uint64)
        hashes = (bits * multipliers[:n_cols]).sum(axis=1, dtype=np.uint64)
    return hashes + labels.astype(np.uint64) * multipliers[n_cols]


def partial_cavities(solution, group, share):
    """Cavity of each merged point: its share of its group's site removed.

    Parameters
    ----------
    solution : TAPSolution
        The solution of the merged points.
    group, share : ndarray of shape (n_kept,)
        From :func:`merge_identical_points`.

    Returns
    -------
    cavity_mean, cavity_var : ndarray of shape (n_kept,)
    """
    if solution.fixed_cavity_variance:
        # Mean-field closures: the reaction term of the point's share.
        reaction = solution.mean - solution.cavity_mean  # lambda * alpha
        return (
            solution.mean[group] - share * reaction[group],
            solution.cavity_var[group],
        )
    var = solution.var[group]
    cavity_tau = 1.0 / var - share * solution.tau[group]
    cavity_nu = solution.mean[group] / var - share * solution.nu[group]
    # A best iterate that did not converge may leave no proper cavity: the
    # posterior marginal then stands in (as in the core's whole-site case).
    valid = cavity_tau > 0
    cavity_var = np.where(valid, 1.0 / np.where(valid, cavity_tau, 1.0), var)
    cavity_mean = np.where(valid, cavity_nu * cavity_var, solution.mean[group])
    return cavity_mean, cavity_var


def weighted_error_rate(y_true, y_pred, sample_weight=None):
    """Misclassification rate weighted by ``sample_weight``.

    Under weights the estimators' ``loo_error_`` is this rate of the
    leave-one-out predictions ``loo_proba_``, each of which leaves out the
    whole weighted point (the model fitted without it): a point of weight
    ``w`` counts ``w`` times in the rate, its prediction is made without
    any of its ``w`` copies.

    Parameters
    ----------
    y_true, y_pred : ndarray of shape (n,)
    sample_weight : ndarray of shape (n,) or None

    Returns
    -------
    float

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.tap._core import weighted_error_rate
    >>> weighted_error_rate(np.array([0, 1, 1]), np.array([0, 0, 1]), [1, 2, 1])
    0.5
    """
    wrong = np.asarray(y_true) != np.asarray(y_pred)
    if sample_weight is None:
        return float(np.mean(wrong))
    sample_weight = np.asarray(sample_weight, dtype=float)
    return float(np.sum(sample_weight * wrong) / np.sum(sample_weight))


class PriorVariance:
    """Naive mean field's closure: the cavity variance is the prior variance.

    A picklable callable ``(alpha, mean) -> prior_var`` for
    :func:`mean_field_iteration`.

    Parameters
    ----------
    prior_var : ndarray of shape (n,)
        The prior variances ``K_ii``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.tap._core import PriorVariance
    >>> closure = PriorVariance(np.array([1.0, 2.0]))
    >>> closure(np.zeros(2), np.zeros(2))
    array([1., 2.])
    """

    def __init__(self, prior_var):
        self.prior_var = prior_var

    def __call__(self, alpha, mean):
        return self.prior_var


def mean_field_iteration(
    posterior,
    t,
    likelihood,
    cavity_variance,
    *,
    alpha=None,
    max_iter=500,
    tol=1e-6,
    damping=0.2,
    site_weights=None,
    on_iteration=None,
):
    """Mean-field equations with a prescribed cavity variance.

    Iterates Opper and Winther's equations ``alpha_i = d log Z_i / dm`` with
    cavity mean ``<h_i> - lambda_i alpha_i`` and ``<h> = K alpha``, where the
    cavity variances ``lambda = cavity_variance(alpha, <h>)`` are given by a
    closure rather than solved for: ``K_ii`` for the naive theory,
    ``1 - |<w>|^2 / N`` for the 1996 isotropic perceptron.  Each sweep is one
    product with ``K`` (``O(n^2)``).

    Parameters
    ----------
    posterior : KernelPosterior or compatible
        Provides ``n``, ``matvec(alpha)`` and ``solve(tau, nu)``.
    t : ndarray of shape (n,)
    likelihood : object
    cavity_variance : callable
        ``cavity_variance(alpha, mean) -> ndarray of shape (n,)``, positive.
    alpha : ndarray or None
        Warm start.
    max_iter, tol, damping
        As in :class:`EPOptions`; ``tol`` bounds the change of ``alpha``
        relative to its scale.
    site_weights : ndarray of shape (n,) or None, default=None
        Positive weights (point ``i`` repeated ``w_i`` times, as in
        :func:`expectation_propagation`): each copy's ``alpha`` is
        ``d log Z_i / dm`` at the cavity mean ``<h_i> - lambda_i alpha_i /
        w_i``, and ``<h> = K alpha`` sums the copies, so ``alpha`` (the
        returned coefficients) is ``w_i`` times a copy's.  The returned
        cavities remove the whole point, ``<h_i> - lambda_i alpha_i`` (the
        closure's variance is the same with or without the point), and the
        sites are ``w_i`` times a copy's.  None or all ones: unweighted, bit
        for bit.
    on_iteration : callable or None, default=None
        As in :func:`expectation_propagation` (a :class:`Sweep` of solver
        ``"mean-field"``; a true return value stops the iteration).

    Returns
    -------
    TAPSolution
        With the Gaussian sites ``tau = b / (1 - lambda b)`` implied by the
        fixed point (used for the predictive variance) and ``log_evidence``
        NaN.

    Examples
    --------
    The naive theory (cavity variance = prior variance) on a probit problem:

    >>> import numpy as np
    >>> from sklearn_meanfield.tap._core import (
    ...     KernelPosterior, PriorVariance, mean_field_iteration)
    >>> from sklearn_meanfield.tap._likelihoods import make_likelihood
    >>> x = np.linspace(-2, 2, 6)
    >>> K = np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2)
    >>> solution = mean_field_iteration(
    ...     KernelPosterior(K), np.sign(x), make_likelihood("probit", 0.0),
    ...     PriorVariance(np.diag(K).copy()))
    >>> solution.converged, bool(np.allclose(solution.cavity_var, 1.0))
    (True, True)
    """
    w = _check_site_weights(site_weights, posterior.n)
    alpha = np.zeros(posterior.n) if alpha is None else np.array(alpha, dtype=float)
    run = _mean_field_sweeps(
        posterior,
        t,
        likelihood,
        cavity_variance,
        alpha,
        w,
        EPOptions(max_iter=max_iter, tol=tol, damping=damping),
        on_iteration,
    )
    return _mean_field_solution(posterior, t, likelihood, w, run)


class _MeanFieldIterate(NamedTuple):
    residual: float
    alpha: np.ndarray
    mean: np.ndarray
    lam: np.ndarray  # the closure's cavity variances
    cavity_mean: np.ndarray  # one copy removed
    log_z: np.ndarray
    second: np.ndarray


class _MeanFieldRun(NamedTuple):
    best: _MeanFieldIterate
    n_iter: int
    converged: bool
    stopped: bool


def _mean_field_sweeps(
    posterior, t, likelihood, cavity_variance, alpha, w, options, on_iteration
):
    """The damped iteration of :func:`mean_field_iteration`: its best
    iterate, sweeps, and whether it converged or was stopped."""
    best = None
    previous_residual = np.inf
    step = float(options.damping)
    converged = stopped = False
    for n_iter in range(1, options.max_iter + 1):
        # A closure can drive the iteration to overflow (e.g. the isotropic
        # cavity variance at its floor); stop there and keep the best iterate.
        with np.errstate(over="ignore", invalid="ignore"):
            mean = posterior.matvec(alpha)
            lam = cavity_variance(alpha, mean)
            # One copy's alpha: the whole point's over its weight.
            copy_alpha = alpha if w is None else alpha / w
            cavity_mean = mean - lam * copy_alpha
            log_z, first, second = likelihood.moments(t, cavity_mean, lam)
            scale = max(np.max(np.abs(first)), 1e-12)
            residual = float(np.max(np.abs(first - copy_alpha)) / scale)
        if not (np.isfinite(residual) and np.all(np.isfinite(log_z))):
            break
        if best is None or residual < best.residual:
            best = _MeanFieldIterate(
                residual, alpha, mean, lam, cavity_mean, log_z, second
            )
        stop = on_iteration is not None and on_iteration(
            Sweep("mean-field", n_iter, residual)
        )
        if residual < options.tol:
            converged = True
            break
        if stop:
            stopped = True
            break
        step = _next_step(step, residual, previous_residual, options.damping)
        previous_residual = residual
        target = first if w is None else w * first
        alpha = alpha + step * (target - alpha)
    return _MeanFieldRun(best, n_iter, converged, stopped)


def _mean_field_solution(posterior, t, likelihood, w, run):
    """The :class:`TAPSolution` of a mean-field run's best iterate."""
    _, alpha, mean, lam, cavity_mean, log_z, second = run.best
    tau = second / _tilted_variance_ratio(lam, second)
    copy_mean = copy_var = None
    if w is not None:
        tau = w * tau
        copy_mean, copy_var = cavity_mean, lam
        # Leave-one-out: the whole point removed.
        with np.errstate(over="ignore", invalid="ignore"):
            cavity_mean = mean - lam * alpha
            log_z, _, _ = likelihood.moments(t, cavity_mean, lam)
    nu = alpha + tau * mean
    solution = _predictive_posterior(posterior, tau, nu)
    return TAPSolution(
        tau=tau,
        nu=nu,
        alpha=alpha,
        mean=mean,
        var=solution.var,
        cavity_mean=cavity_mean,
        cavity_var=lam,
        log_z=log_z,
        log_evidence=np.nan,
        n_iter=run.n_iter,
        converged=run.converged,
        posterior=solution,
        site_weights=w,
        stopped=run.stopped,
        fixed_cavity_variance=True,
        copy_cavity_mean=copy_mean,
        copy_cavity_var=copy_var,
    )


def _predictive_posterior(posterior, tau, nu):
    """The Gaussian posterior behind a fixed cavity-variance solution.

    Its sites need not define a proper posterior: with label noise some site
    precisions are negative, and nothing in the naive or isotropic
    iteration keeps ``K^-1 + S`` positive definite.  Predictions still need
    a variance, so the negative precisions are then dropped (a proper
    posterior for any non-negative sites); the mean ``K alpha`` does not
    depend on it.

    >>> import numpy as np
    >>> from sklearn_meanfield.tap._core import KernelPosterior
    >>> improper = np.array([-2.0, 1.0])  # K^-1 + S = diag(-1, 2) for K = I
    >>> solved = _predictive_posterior(KernelPosterior(np.eye(2)), improper, np.ones(2))
    >>> solved.var.round(12).tolist()  # the second site alone: 1 and 1/2
    [1.0, 0.5]
    """
    solution = _proper_solution(posterior, tau, nu)
    if solution is None:
        solution = posterior.solve(np.maximum(tau, 0.0), nu)
    return solution


def ep_evidence_gradient(solution, K_gradient):
    """Gradient of the EP log evidence at a fixed point (GPML eq. 5.27 form).

    ``d log Z / d theta_j = 1/2 tr(R dK/dtheta_j)`` with
    ``R = alpha alpha^T - (S - S Sigma S)`` (NOTES.md section 1); for
    non-negative sites ``S - S Sigma S = S^1/2 B^-1 S^1/2`` (GPML eq. 5.27).

    Parameters
    ----------
    solution : TAPSolution
        A converged EP solution whose posterior still holds its factors.
    K_gradient : ndarray of shape (n, n, n_params)
        Derivatives of the kernel matrix (scikit-learn's ``eval_gradient``).

    Returns
    -------
    ndarray of shape (n_params,)

    Examples
    --------
    The derivative with respect to the log amplitude of ``K = exp(theta) K0``
    against a central difference of the evidence:

    >>> import numpy as np
    >>> from sklearn_meanfield.tap._core import (
    ...     KernelPosterior, ep_evidence_gradient, expectation_propagation)
    >>> from sklearn_meanfield.tap._likelihoods import make_likelihood
    >>> x = np.linspace(-2, 2, 8)
    >>> K0 = np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2)
    >>> t = np.where(np.sin(2 * x) > 0, 1.0, -1.0)
    >>> def solve(theta):
    ...     return expectation_propagation(
    ...         KernelPosterior(np.exp(theta) * K0), t,
    ...         make_likelihood("probit", 0.0), tol=1e-12, max_iter=500)
    >>> theta, h = 0.7, 1e-5
    >>> gradient = ep_evidence_gradient(
    ...     solve(theta), (np.exp(theta) * K0)[:, :, None])
    >>> numeric = (solve(theta + h).log_evidence
    ...            - solve(theta - h).log_evidence) / (2 * h)
    >>> bool(abs(gradient[0] - numeric) < 1e-6 * max(1.0, abs(numeric)))
    True
    """
    alpha = solution.alpha
    R = np.outer(alpha, alpha)
    R -= solution.posterior.site_correction()
    # dK/dtheta_j is symmetric, so tr(R dK_j) = sum_ik R_ik dK_j[i, k].
    n = len(alpha)
    return 0.5 * (R.reshape(1, n * n) @ K_gradient.reshape(n * n, -1))[0]


def ep_label_noise_gradient(solution, t, likelihood):
    """Derivative of the EP log evidence in the likelihood's label noise.

    The evidence is stationary in the sites at an EP fixed point, so only the
    tilted normalisers move: ``sum_i w_i d log Z_i / d kappa`` at the cavities
    that remove one copy of each site (the whole site when unweighted).

    Parameters
    ----------
    solution : TAPSolution
        A converged EP solution.
    t : ndarray of shape (n,)
        The labels it was fitted to.
    likelihood : object
        Provides ``label_noise_gradient(t, cavity_mean, cavity_var)``.

    Returns
    -------
    float

    Examples
    --------
    Against a central difference of the evidence, with weights:

    >>> import numpy as np
    >>> from sklearn_meanfield.tap._core import (
    ...     KernelPosterior, ep_label_noise_gradient, expectation_propagation)
    >>> from sklearn_meanfield.tap._likelihoods import make_likelihood
    >>> x = np.linspace(-2, 2, 8)
    >>> K = np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2)
    >>> t = np.where(np.sin(2 * x) > 0, 1.0, -1.0)
    >>> w = np.array([1.0, 2.0, 3.0, 1.0, 1.0, 2.0, 1.0, 4.0])
    >>> def solve(kappa):
    ...     return expectation_propagation(
    ...         KernelPosterior(K), t, make_likelihood("probit", kappa),
    ...         tol=1e-12, max_iter=500, site_weights=w)
    >>> kappa, h = 0.1, 1e-6
    >>> gradient = ep_label_noise_gradient(
    ...     solve(kappa), t, make_likelihood("probit", kappa))
    >>> numeric = (solve(kappa + h).log_evidence
    ...            - solve(kappa - h).log_evidence) / (2 * h)
    >>> bool(abs(gradient - numeric) < 1e-5 * max(1.0, abs(numeric)))
    True
    """
    if solution.site_weights is None:
        return float(
            np.sum(
                likelihood.label_noise_gradient(
                    t, solution.cavity_mean, solution.cavity_var
                )
            )
        )
    beta, tilted = _tilted_sites(
        likelihood, solution.site_weights, 1.0, solution.weights_below_power
    )
    per_copy = tilted.label_noise_gradient(
        t, solution.copy_cavity_mean, solution.copy_cavity_var
    )
    return float(np.sum(per_copy / beta))
