"""Multinomial probit Gaussian-process classification by nested EP.

One latent function per class, ``f_c ~ GP(0, K)``, and one likelihood that
couples them, the multinomial probit

    p(y = c | f) = E_u[ prod_{j != c} Phi(u + f_c - f_j) ],  u ~ N(0, 1),

the probability that ``f_c`` plus unit Gaussian noise beats every other
class's ``f_j`` plus its own.  Expectation propagation gives each point one
Gaussian site over its ``C`` latent values.  The site's moments need a
``C - 1`` dimensional Gaussian orthant probability; nested EP (Riihimaki,
Jylanki and Vehtari) approximates it by an inner EP over the auxiliary
``u``: with ``w = (f, u)``, the tilted distribution is a Gaussian times the
``C - 1`` probit factors ``Phi(b_j' w)``, ``b_j = e_c - e_j + e_u``, each
approximated by a one-dimensional Gaussian ``exp(-beta_j s^2 / 2 + nu_j
s)`` in ``s = b_j' w``.  Integrating ``u`` out of their product gives the
outer site, whose precision has the structure

    Pi_i = diag(pi_i) - pi_i pi_i' / sum(pi_i),
    pi_i = (beta_ij for j != c, 1 for the label c),

a diagonal minus rank one that annihilates the constant vector (the model
only sees differences of the ``f_c``).  Stacked over the points, the
posterior precision ``K^-1 + D - D R S^-1 R' D`` (``D`` the ``pi``, ``R``
stacked identities, ``S = sum_c D_c``) is inverted by ``C + 1`` Cholesky
factorisations of ``n x n`` matrices: one of ``B_c = I + D_c^1/2 K
D_c^1/2`` a class and one of ``P = sum_c E_c``, ``E_c = D_c^1/2 B_c^-1
D_c^1/2`` (as Rasmussen and Williams' algorithm 3.3 inverts the softmax's
Laplace Hessian, which has the same structure).

The functions here work on arrays; the fit driver is
:mod:`~sklearn_meanfield.tap._multinomial_gpc`.

References
----------
.. [1] J. Riihimaki, P. Jylanki and A. Vehtari, "Nested expectation
   propagation for Gaussian process classification with a multinomial
   probit likelihood", Journal of Machine Learning Research 14, 75-109,
   2013.
.. [2] M. Girolami and S. Rogers, "Variational Bayesian multinomial probit
   regression with Gaussian process priors", Neural Computation 18(8),
   1790-1817, 2006.
.. [3] C. E. Rasmussen and C. K. I. Williams, "Gaussian Processes for
   Machine Learning", MIT Press, 2006, section 3.5.
"""

from dataclasses import dataclass, field

import numpy as np
from scipy.linalg import blas, cho_solve, cholesky, lapack
from scipy.special import log_ndtr

from ._acceleration import AndersonMixing
from ._likelihoods import NoisyStepLikelihood, QuadraturePowered
from ._sweep import Sweep

__all__ = [
    "CoupledPosterior",
    "InnerSites",
    "KernelPrior",
    "MultinomialSolution",
    "class_log_normalisers",
    "inner_ep",
    "multinomial_ep",
    "multinomial_evidence_gradient",
    "other_classes",
    "outer_sites",
    "predictive_proba",
]

# Inner EP sweeps per outer update: one, as Riihimaki et al. recommend;
# the inner sites start where the last outer sweep left them, so the nested
# iteration converges to the same fixed point as a fully converged inner EP.
_INNER_SWEEPS = 1
# Inner EP of a prediction (no warm start): sweeps and tolerance on the
# inner sites; a few sweeps reach rounding for C - 1 probit factors.
_PREDICTIVE_SWEEPS = 50
_PREDICTIVE_TOL = 1e-10
# The damping is halved when this many sweeps in a row bring no residual
# below the best so far.
_STALLED_SWEEPS = 3
# Sites' precisions below which E_c K is multiplied out, not derived from
# E_c (its rounding grows as 1 / sqrt(pi); 1e-8 keeps it below 1e-8).
_DIRECT_PRECISION = 1e-8
_MIN_DAMPING = 0.05
# Anderson mixing of the last sweeps' factors (as the binary EP does), once
# the residual is below _ANDERSON_MAX_RESIDUAL; a step that multiplies the
# residual by more than _ANDERSON_REJECT_RATIO is undone.
_ANDERSON_MEMORY = 5
_ANDERSON_MAX_RESIDUAL = 0.5
_ANDERSON_REJECT_RATIO = 2.0
# An inner factor's probit Phi(s) is the binary probit of unit width, whose
# powers below one (the factors of a row of weight below one) the binary
# problems integrate by quadrature.
_UNIT_PROBIT = NoisyStepLikelihood(0.0, 1.0)


def other_classes(labels, n_classes):
    """Each row's classes other than its label, in increasing order.

    Parameters
    ----------
    labels : ndarray of shape (n,)
        Class indices.
    n_classes : int

    Returns
    -------
    ndarray of shape (n, n_classes - 1)

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.tap._multinomial import other_classes
    >>> other_classes(np.array([0, 2]), 3).tolist()
    [[1, 2], [0, 1]]
    """
    mask = np.arange(n_classes)[None, :] != np.asarray(labels)[:, None]
    return np.nonzero(mask)[1].reshape(len(labels), n_classes - 1)


@dataclass
class InnerSites:
    """The inner EP's Gaussian factors of each point, one per other class.

    Factor ``k`` of row ``i`` approximates ``Phi(u + f_y - f_j)``, ``j =
    other_classes(labels)[i, k]``, by ``exp(-beta s^2 / 2 + nu s)`` in ``s
    = u + f_y - f_j``.

    Attributes
    ----------
    beta, nu : ndarray of shape (n, n_classes - 1)
        Precisions (non-negative: the probit is log-concave) and
        precision-means.
    """

    beta: np.ndarray
    nu: np.ndarray

    @classmethod
    def zeros(cls, n, n_classes):
        return cls(np.zeros((n, n_classes - 1)), np.zeros((n, n_classes - 1)))


def outer_sites(sites, labels, n_classes):
    """The outer sites' natural parameters from the inner factors.

    Integrating ``u ~ N(0, 1)`` out of the inner factors' product gives a
    Gaussian in ``f`` with precision ``diag(pi) - pi pi' / S`` and
    precision-mean ``nu_f = -r + (sum r) pi / S``, times the constant
    ``exp(log_scale)``.

    Parameters
    ----------
    sites : InnerSites
    labels : ndarray of shape (n,)
    n_classes : int

    Returns
    -------
    pi : ndarray of shape (n, n_classes)
        ``beta`` in the other classes' columns, 1 in the label's.
    nu_f : ndarray of shape (n, n_classes)
    log_scale : ndarray of shape (n,)
        ``-log(S) / 2 + (sum r)^2 / (2 S)``, ``S = sum(pi)``.
    """
    n = len(labels)
    rows = np.arange(n)[:, None]
    others = other_classes(labels, n_classes)
    pi = np.zeros((n, n_classes))
    pi[rows, others] = sites.beta
    pi[np.arange(n), labels] = 1.0
    r = np.zeros((n, n_classes))
    r[rows, others] = sites.nu
    total = pi.sum(axis=1)
    r_sum = r.sum(axis=1)
    nu_f = -r + (r_sum / total)[:, None] * pi
    log_scale = -0.5 * np.log(total) + 0.5 * r_sum**2 / total
    return pi, nu_f, log_scale


def site_precisions(pi):
    """The sites' ``C x C`` precisions ``diag(pi) - pi pi' / sum(pi)``.

    Parameters
    ----------
    pi : ndarray of shape (n, C)

    Returns
    -------
    ndarray of shape (n, C, C)
    """
    total = pi.sum(axis=1)
    out = -pi[:, :, None] * pi[:, None, :] / total[:, None, None]
    idx = np.arange(pi.shape[1])
    out[:, idx, idx] += pi
    return out


class CoupledPosterior:
    """The Gaussian posterior of the ``n x C`` latent values given the sites.

    Prior ``N(0, K)`` for every class (a shared kernel), sites of
    precisions ``diag(pi_i) - pi_i pi_i' / S_i`` (already weighted).  Holds
    ``E_c = D_c^1/2 B_c^-1 D_c^1/2`` for every class and the Cholesky factor
    of ``P = sum_c E_c``; then ``W = K^-1 - K^-1 Sigma K^-1`` has the blocks
    ``W_cd = delta_cd E_c - E_c P^-1 E_d``, and

        Sigma_cd = delta_cd (K - K E_c K) + K E_c P^-1 E_d K.

    Parameters
    ----------
    K : ndarray of shape (n, n)
    pi : ndarray of shape (n, C)
        The weighted sites' ``pi`` (non-negative, each row's sum positive).
    """

    def __init__(self, K, pi):
        n, n_classes = pi.shape
        self.n_classes = n_classes
        root = np.sqrt(pi)
        E = np.empty((n_classes, n, n))
        log_det = 0.0
        for c in range(n_classes):
            # B_c, its factor and E_c share E[c]'s buffer: LAPACK works in
            # place on its transpose, a Fortran-ordered view of the same
            # (symmetric) matrix.
            buffer = E[c]
            np.multiply(K, root[:, c, None], out=buffer)
            buffer *= root[None, :, c]
            buffer.flat[:: n + 1] += 1.0
            factor, info = lapack.dpotrf(buffer.T, lower=1, clean=1, overwrite_a=1)
            if info:
                raise np.linalg.LinAlgError("B_c is not positive definite")
            log_det += 2.0 * np.sum(np.log(np.diag(factor)))
            # B_c^-1 in the view's lower triangle, zeros above it.
            _, info = lapack.dpotri(factor, lower=1, overwrite_c=1)
            if info:
                raise np.linalg.LinAlgError("B_c is not positive definite")
            buffer += buffer.T
            buffer.flat[:: n + 1] *= 0.5
            buffer *= root[:, c, None]
            buffer *= root[None, :, c]
        self.E = E
        self.pi = pi
        self.P_factor = cholesky(E.sum(axis=0), lower=True, check_finite=False)
        # Every class's products go through L_P^-1: one triangular inverse,
        # then triangular products, which BLAS runs about twice as fast as
        # the triangular solves they replace.
        self.P_factor_inverse, info = lapack.dtrtri(self.P_factor, lower=1)
        if info:
            raise np.linalg.LinAlgError("P is singular")
        # log |I + K Pi| = sum_c log |B_c| + log |P| - sum_i log S_i.
        self.log_det = (
            log_det
            + 2.0 * np.sum(np.log(np.diag(self.P_factor)))
            - np.sum(np.log(pi.sum(axis=1)))
        )

    def _solve_P(self, b):
        return cho_solve((self.P_factor, True), b, check_finite=False)

    def coefficients(self, K, nu_f):
        """``a = K^-1 mean``, per class: ``nu - W K nu``.

        Parameters
        ----------
        K : ndarray of shape (n, n)
        nu_f : ndarray of shape (n, C)
            The weighted sites' precision-means.

        Returns
        -------
        ndarray of shape (n, C)
        """
        Knu = K @ nu_f
        e = (self.E @ Knu.T[:, :, None])[:, :, 0].T
        g = self._solve_P(e.sum(axis=1))
        return nu_f - e + (self.E @ g).T

    def _training_products(self, K):
        """``K E_c`` for every class without a matrix product.

        ``D^1/2 K D^1/2 = B - I`` gives ``K E_c = I - D^-1/2 B^-1 D^1/2``,
        whose row ``i`` is ``e_i - E_c[i] / pi_ic``; a row whose ``pi_ic`` is
        below ``_DIRECT_PRECISION`` (rounding would be amplified by ``1 /
        sqrt(pi_ic)``) is multiplied out.

        Returns
        -------
        ndarray of shape (C, n, n)
        """
        pi = self.pi.T  # (C, n)
        direct = pi < _DIRECT_PRECISION
        KE = np.divide(self.E, np.where(direct, -1.0, -pi)[:, :, None])
        idx = np.arange(pi.shape[1])
        KE[:, idx, idx] += 1.0
        for c in np.flatnonzero(direct.any(axis=1)):
            rows = direct[c]
            KE[c][rows] = K[rows] @ self.E[c]
        return KE

    def covariance_terms(self, K_cross, KE=None):
        """What the marginal covariances at some inputs need.

        Parameters
        ----------
        K_cross : ndarray of shape (n, m)
            Kernel between the training points and ``m`` inputs.
        KE : ndarray of shape (C, m, n) or None
            ``K_cross' E_c`` when known; overwritten.

        Returns
        -------
        reduction : ndarray of shape (m, C)
            ``diag(k' E_c k)``: the class's own variance reduction.
        coupling : ndarray of shape (m, C, C)
            ``k' E_c P^-1 E_d k``: what the coupling gives back.
        """
        if KE is None:
            KE = K_cross.T @ self.E
        n_classes, m, n = KE.shape
        reduction = np.einsum("cmi,im->mc", KE, K_cross)
        # One triangular product for every class at once: the C-ordered
        # (C, m, n) stack is the Fortran-ordered (n, C m) matrix of the
        # columns E_c k, multiplied by L_P^-1 in place.
        blas.dtrmm(
            1.0,
            self.P_factor_inverse,
            KE.reshape(n_classes * m, n).T,
            lower=1,
            overwrite_b=1,
        )
        U = KE.transpose(1, 0, 2)  # (m, C, n): L_P^-1 E_c k as rows
        coupling = U @ U.transpose(0, 2, 1)
        return reduction, coupling

    def marginals(self, K, nu_f):
        """Posterior means and ``C x C`` covariances at the training points.

        Returns
        -------
        a : ndarray of shape (n, C)
            ``K^-1 mean``.
        mean : ndarray of shape (n, C)
        cov : ndarray of shape (n, C, C)
        """
        a = self.coefficients(K, nu_f)
        reduction, coupling = self.covariance_terms(K, self._training_products(K))
        cov = coupling
        idx = np.arange(self.n_classes)
        cov[:, idx, idx] += np.diag(K)[:, None] - reduction
        return a, K @ a, cov

    def trace_matrix(self):
        """``sum_c W_cc = sum_c (E_c - E_c P^-1 E_c)``, for the gradient."""
        n = self.P_factor.shape[0]
        # sum_c J_c' J_c, J_c = L_P^-1 E_c, accumulated in the upper triangle
        # (a symmetric rank-k update: half a matrix product's work).
        coupled = np.zeros((n, n), order="F")
        for c in range(self.n_classes):
            J = blas.dtrmm(1.0, self.P_factor_inverse, self.E[c], lower=1)
            coupled = blas.dsyrk(1.0, J, beta=1.0, c=coupled, trans=1, overwrite_c=1)
        upper = np.triu(coupled, 1)
        coupled = upper + upper.T + np.diag(np.diag(coupled))
        return self.E.sum(axis=0) - coupled


class KernelPrior:
    """The exact prior: every class's latent values ``N(0, K)``.

    What :func:`multinomial_ep` solves against; the sparse mode's
    :class:`~sklearn_meanfield.tap._sparse_multinomial.SparseCoupledPrior`
    has the same ``solve``.

    Parameters
    ----------
    K : ndarray of shape (n, n)
    """

    def __init__(self, K):
        self.K = K

    def solve(self, pi, nu_f):
        """The :class:`CoupledPosterior` of weighted sites ``pi, nu_f``, with
        its ``alpha`` (``K^-1`` times the means), ``mean`` and ``cov``."""
        posterior = CoupledPosterior(self.K, pi)
        posterior.alpha, posterior.mean, posterior.cov = posterior.marginals(
            self.K, nu_f
        )
        return posterior


def _probit_update(cavity_mean, cavity_var):
    """Moment-matched Gaussian factor of ``Phi(s)`` under ``N(m, v)``.

    Returns the factor's precision and precision-mean and ``log Phi(z)``,
    in forms that stay finite deep in either tail.
    """
    scale = np.sqrt(1.0 + cavity_var)
    z = cavity_mean / scale
    log_phi = log_ndtr(z)
    ratio = np.exp(-0.5 * z**2 - 0.5 * np.log(2 * np.pi) - log_phi)
    # r (r + z) lies in (0, 1); cancellation far in the left tail.
    shrink = np.clip(ratio * (ratio + z), 1e-12, 1.0 - 1e-12) / (1.0 + cavity_var)
    keep = 1.0 - cavity_var * shrink
    beta = shrink / keep
    nu = cavity_mean * beta + ratio / scale / keep
    return beta, nu, log_phi


def _factor_update(cavity_mean, cavity_var, exponent=None):
    """Moment-matched Gaussian factor of ``Phi(s)**e`` under ``N(m, v)``.

    ``exponent`` holds each row's ``e`` (None: all one).  Where ``e = 1``
    this is :func:`_probit_update`; a tempered factor's moments come from
    the quadrature of the binary problems' tempered probit
    (:class:`~sklearn_meanfield.tap._likelihoods.QuadraturePowered`).
    ``Phi**e`` is log-concave, so the factor's precision is non-negative.

    Returns the factor's precision and precision-mean and ``log E[Phi**e]``.
    """
    beta, nu, log_z = _probit_update(cavity_mean, cavity_var)
    low = None if exponent is None else exponent < 1.0
    if low is None or not np.any(low):
        return beta, nu, log_z
    m, v = cavity_mean[low], cavity_var[low]
    powered = QuadraturePowered(_UNIT_PROBIT, exponent[low])
    log_z[low], slope, curvature = powered.moments(np.ones(len(m)), m, v)
    # slope = d log Z / dm, curvature = -d^2 log Z / dm^2 in [0, 1 / v).
    curvature = np.clip(curvature, 0.0, (1.0 - 1e-12) / v)
    keep = 1.0 - v * curvature
    beta[low] = curvature / keep
    nu[low] = (slope + m * curvature) / keep
    return beta, nu, log_z


def _directions(labels, n_classes):
    """The inner factors' directions ``b_j = e_y - e_j + e_u`` as index
    arrays: label, other class, and the auxiliary's index ``C``."""
    return np.asarray(labels), other_classes(labels, n_classes), n_classes


def _project(Sigma, rows, label, other, aux):
    """``Sigma b`` for ``b = e_label - e_other + e_aux``, row by row."""
    return Sigma[rows, :, label] - Sigma[rows, :, other] + Sigma[:, :, aux]


def _factor_cavity(mu, Sigma, beta, nu, rows, label, other, aux):
    """One inner factor's direction ``s = b' w`` in the inner Gaussian.

    Returns ``Sigma b``, the variance and mean of ``s``, and its cavity's
    mean and precision (the factor ``beta, nu`` removed).
    """
    Sb = _project(Sigma, rows, label, other, aux)
    s_var = Sb[rows, label] - Sb[rows, other] + Sb[:, aux]
    s_mean = mu[rows, label] - mu[rows, other] + mu[:, aux]
    tau = 1.0 / s_var - beta
    return Sb, s_var, s_mean, (s_mean / s_var - nu) / tau, tau


def _inner_posterior(cavity_mean, cavity_cov, labels, sites):
    """The inner EP's Gaussian over ``w = (f, u)``: cavity times ``N(u|0,1)``
    times the inner factors.

    Solved in the factors' space, stably for zero precisions:
    ``Sigma = S0 - S0 B' b (I + b B S0 B' b)^-1 b B S0``, ``b = beta^1/2``.
    """
    n, n_classes = cavity_mean.shape
    dim = n_classes + 1
    Sigma0 = np.zeros((n, dim, dim))
    Sigma0[:, :n_classes, :n_classes] = cavity_cov
    Sigma0[:, n_classes, n_classes] = 1.0
    mu0 = np.zeros((n, dim))
    mu0[:, :n_classes] = cavity_mean
    label, others, aux = _directions(labels, n_classes)
    rows = np.arange(n)
    # S0 B' : (n, dim, C-1)
    S0Bt = (
        Sigma0[rows, :, label][:, :, None]
        - np.take_along_axis(Sigma0, others[:, None, :], axis=2)
        + Sigma0[:, :, aux][:, :, None]
    )
    # B S0 B' : (n, C-1, C-1)
    BS0Bt = (
        S0Bt[rows, label, :][:, None, :]
        - np.take_along_axis(S0Bt, others[:, :, None], axis=1)
        + S0Bt[:, aux, :][:, None, :]
    )
    root = np.sqrt(sites.beta)
    A = root[:, :, None] * BS0Bt * root[:, None, :]
    A += np.eye(n_classes - 1)
    # Sigma = S0 - S0B' b A^-1 b B S0 ; mu = Sigma (S0^-1 mu0 + B' nu)
    G = S0Bt * root[:, None, :]
    Sigma = Sigma0 - G @ np.linalg.solve(A, G.transpose(0, 2, 1))
    # mu = mu0 + S0 B' nu - G A^-1 b B (mu0 + S0 B' nu)
    shifted = mu0 + np.einsum("ndk,nk->nd", S0Bt, sites.nu)
    Bshift = (
        shifted[rows, label][:, None]
        - np.take_along_axis(shifted, others, axis=1)
        + shifted[:, aux][:, None]
    )
    correction = np.linalg.solve(A, (root * Bshift)[:, :, None])[:, :, 0]
    mu = shifted - np.einsum("ndk,nk->nd", G, correction)
    return mu, Sigma, (mu0, BS0Bt)


def inner_ep(
    cavity_mean,
    cavity_cov,
    labels,
    sites,
    n_sweeps,
    tol=0.0,
    normalisers=True,
    exponent=None,
):
    """Sweeps of the inner EP over each row's ``C - 1`` probit factors.

    Each factor's update is moment matching in its own direction ``b_j``
    followed by a rank-one update of the inner Gaussian; rows are
    independent and processed together.

    Parameters
    ----------
    cavity_mean : ndarray of shape (n, C)
    cavity_cov : ndarray of shape (n, C, C)
        The outer cavity of each row (one copy of its site removed).
    labels : ndarray of shape (n,)
    sites : InnerSites
        Starting factors (not modified).
    n_sweeps : int
        Most sweeps over the factors.
    tol : float, default=0.0
        Stop early when no precision or precision-mean moves by more than
        this (relative to 1 + its size).
    normalisers : bool, default=True
        False skips the normalisers (None is returned for them): the outer
        iteration needs them only at its end.
    exponent : ndarray of shape (n,) or None, default=None
        Each row's power ``e`` in ``(0, 1]`` of its probit factors (the
        tempered factors ``Phi**e`` of a row of weight ``e`` below one);
        None: all one.

    Returns
    -------
    sites : InnerSites
        The updated factors.
    log_site_norm : ndarray of shape (n,)
        ``sum_k log Zt_k``, the factors' normalising constants at the
        updated factors (each from its cavity in the final Gaussian), for
        the EP evidence.
    log_normaliser : ndarray of shape (n,)
        Nested EP's approximation of ``log E[p(y | f)]`` under the cavity
        (of the tempered likelihood, ``E_u[prod_j Phi**e]``, on a row whose
        ``exponent`` is below one).
    """
    n, n_classes = cavity_mean.shape
    beta, nu = sites.beta.copy(), sites.nu.copy()
    mu, Sigma, _ = _inner_posterior(
        cavity_mean, cavity_cov, labels, InnerSites(beta, nu)
    )
    label, others, aux = _directions(labels, n_classes)
    rows = np.arange(n)
    for _ in range(n_sweeps):
        largest = 0.0
        for k in range(n_classes - 1):
            Sb, s_var, s_mean, m, tau = _factor_cavity(
                mu, Sigma, beta[:, k], nu[:, k], rows, label, others[:, k], aux
            )
            new_beta, new_nu, _ = _factor_update(m, 1.0 / tau, exponent)
            d_beta = new_beta - beta[:, k]
            d_nu = new_nu - nu[:, k]
            largest = max(
                largest,
                np.max(np.abs(d_beta) / (1.0 + np.abs(new_beta)), initial=0.0),
                np.max(np.abs(d_nu) / (1.0 + np.abs(new_nu)), initial=0.0),
            )
            denom = 1.0 + d_beta * s_var
            mu = mu + Sb * ((d_nu - d_beta * s_mean) / denom)[:, None]
            Sigma = (
                Sigma
                - Sb[:, :, None] * Sb[:, None, :] * (d_beta / denom)[:, None, None]
            )
            beta[:, k], nu[:, k] = new_beta, new_nu
        if largest <= tol:
            break
    updated = InnerSites(beta, nu)
    if not normalisers:
        return updated, None, None
    mu, Sigma, (mu0, BS0Bt) = _inner_posterior(cavity_mean, cavity_cov, labels, updated)
    log_site_norm = np.zeros(n)
    for k in range(n_classes - 1):
        _, _, _, m, tau = _factor_cavity(
            mu, Sigma, beta[:, k], nu[:, k], rows, label, others[:, k], aux
        )
        if exponent is None:
            log_phi = log_ndtr(m / np.sqrt(1.0 + 1.0 / tau))
        else:
            _, _, log_phi = _factor_update(m, 1.0 / tau, exponent)
        log_site_norm += (
            log_phi
            + 0.5 * np.log1p(beta[:, k] / tau)
            + 0.5 * m**2 * tau
            - 0.5 * (nu[:, k] + m * tau) ** 2 / (beta[:, k] + tau)
        )
    # log of the Gaussian factors' integral under the inner prior, in the
    # factors' space: s ~ N(B mu0, B S0 B').
    s_mean0 = (
        mu0[rows, label][:, None]
        - np.take_along_axis(mu0, others, axis=1)
        + mu0[:, aux][:, None]
    )
    gaussian = _log_gaussian_integral(s_mean0, BS0Bt, beta, nu)
    return updated, log_site_norm, log_site_norm + gaussian


def _log_gaussian_integral(mean, cov, beta, nu):
    """``log int N(s | mean, cov) exp(-s' diag(beta) s / 2 + nu' s) ds``, batched.

    ``-log|I + b cov b| / 2 + h' cov (I + beta cov)^-1 h / 2 + nu' mean -
    mean' beta mean / 2`` with ``h = nu - beta mean``, ``b = beta^1/2``.
    """
    root = np.sqrt(beta)
    dim = mean.shape[1]
    A = root[:, :, None] * cov * root[:, None, :] + np.eye(dim)
    sign, log_det = np.linalg.slogdet(A)
    h = nu - beta * mean
    # cov (I + beta cov)^-1 = cov - cov b A^-1 b cov
    ch = np.einsum("nij,nj->ni", cov, h)
    x = np.linalg.solve(A, (root * ch)[:, :, None])[:, :, 0]
    quad = np.einsum("ni,ni->n", h, ch) - np.einsum("ni,ni->n", root * ch, x)
    return (
        -0.5 * log_det
        + 0.5 * quad
        + np.einsum("ni,ni->n", nu, mean)
        - 0.5 * np.einsum("ni,ni->n", beta * mean, mean)
    )


def class_log_normalisers(mean, cov):
    """Nested EP's ``log p(y = c)`` for every class, under ``N(mean, cov)``.

    Each class's probability is the normaliser of its own tilted
    distribution, by an inner EP run to convergence from zero factors.  For
    two classes it is exact (one probit factor), and the two sum to one;
    for more, each is nested EP's approximation of a ``C - 1``-dimensional
    orthant probability, and their sum differs from one by that
    approximation's error.

    Parameters
    ----------
    mean : ndarray of shape (m, C)
    cov : ndarray of shape (m, C, C)

    Returns
    -------
    ndarray of shape (m, C)
    """
    m, n_classes = mean.shape
    labels = np.tile(np.arange(n_classes), m)
    means = np.repeat(mean, n_classes, axis=0)
    covs = np.repeat(cov, n_classes, axis=0)
    _, _, log_normaliser = inner_ep(
        means,
        covs,
        labels,
        InnerSites.zeros(len(labels), n_classes),
        _PREDICTIVE_SWEEPS,
        tol=_PREDICTIVE_TOL,
    )
    return log_normaliser.reshape(m, n_classes)


def predictive_proba(mean, cov):
    """Class probabilities under ``N(mean, cov)``: the normalisers of
    :func:`class_log_normalisers` divided by their sum (a correction of the
    order of nested EP's error; none for two classes)."""
    log_z = class_log_normalisers(mean, cov)
    log_z -= log_z.max(axis=1, keepdims=True)
    proba = np.exp(log_z)
    return proba / proba.sum(axis=1, keepdims=True)


def cavities(mean, cov, pi, nu_f, power=1.0):
    """Remove ``power`` copies of each site from the posterior marginals.

    ``cov_- = (I - cov Pi)^-1 cov``, ``mean_- = (I - cov Pi)^-1 (mean - cov
    nu_f)`` with ``Pi = power (diag(pi) - pi pi' / S)`` and ``nu_f`` times
    ``power``: no inverse of the (singular) site precision is needed.

    Parameters
    ----------
    mean : ndarray of shape (n, C)
    cov : ndarray of shape (n, C, C)
    pi, nu_f : ndarray of shape (n, C)
        One copy of each site (unweighted).
    power : float or ndarray of shape (n,), default=1.0

    Returns
    -------
    cavity_mean : ndarray of shape (n, C)
    cavity_cov : ndarray of shape (n, C, C)
    """
    power = np.broadcast_to(np.asarray(power, dtype=float), (len(mean),))
    Pi = site_precisions(pi) * power[:, None, None]
    n_classes = mean.shape[1]
    M = np.eye(n_classes) - cov @ Pi
    rhs = mean - np.einsum("nij,nj->ni", cov, nu_f * power[:, None])
    cavity_mean = np.linalg.solve(M, rhs[:, :, None])[:, :, 0]
    cavity_cov = np.linalg.solve(M, cov)
    cavity_cov = 0.5 * (cavity_cov + cavity_cov.transpose(0, 2, 1))
    return cavity_mean, cavity_cov


@dataclass
class MultinomialSolution:
    """The converged (or last) state of nested EP.

    Attributes
    ----------
    tau, nu : ndarray of shape (n, C - 1)
        The inner factors' precisions and precision-means (``tau`` is
        ``beta``; the names let the optimiser's warm starts treat them as
        the binary sites).
    alpha : ndarray of shape (n, C) or None
        ``K^-1`` times the posterior means: the predictive means at ``X``
        are ``K(X, X_train) alpha`` (None in the sparse mode, whose
        posterior predicts).
    mean : ndarray of shape (n, C)
    cov : ndarray of shape (n, C, C)
        Posterior marginals at the training points.
    log_evidence : float
    n_iter : int
    converged : bool
    posterior : CoupledPosterior or SparseCoupledPosterior
    stopped : bool
    residual : float
        The largest change one more sweep would make to a factor, in its
        natural units (what ``tol`` bounds).
    """

    tau: np.ndarray
    nu: np.ndarray
    alpha: np.ndarray
    mean: np.ndarray
    cov: np.ndarray
    log_evidence: float
    n_iter: int
    converged: bool
    posterior: object = field(repr=False, default=None)
    stopped: bool = False
    labels: np.ndarray = field(repr=False, default=None)
    weights: object = field(repr=False, default=None)
    residual: float = np.inf

    def loo_cavities(self):
        """Each point's cavity with its whole (weighted) site removed: the
        posterior of its latent values given the other points."""
        n_classes = self.mean.shape[1]
        pi, nu_f, _ = outer_sites(InnerSites(self.tau, self.nu), self.labels, n_classes)
        copies, _ = _site_copies(self.weights)
        return cavities(self.mean, self.cov, pi, nu_f, copies)

    def loo_proba(self):
        """Leave-one-out class probabilities of the training points."""
        return predictive_proba(*self.loo_cavities())


def _site_copies(weights):
    """The copies of each row's site and the power of its probit factors.

    A weight ``w >= 1`` is ``w`` copies of the site (power EP: the cavity
    removes one copy, so an integer weight is the row repeated).  Below one
    the row is one site of the tempered likelihood ``E_u[prod_j Phi**w]``
    (plain EP on it, as the binary problems temper theirs): the cavity
    removes the whole site, which a log-concave factor keeps proper, and the
    evidence stays stationary in the factors, so its gradient is exact.

    Returns
    -------
    copies : float or ndarray of shape (n,)
        ``max(w, 1)`` (1.0 when unweighted).
    exponent : ndarray of shape (n,) or None
        ``min(w, 1)``, or None when no weight is below one.
    """
    if weights is None:
        return 1.0, None
    exponent = np.minimum(weights, 1.0)
    return np.maximum(weights, 1.0), exponent if np.any(exponent < 1.0) else None


def _evidence(posterior, nu_w, log_scale, log_site_norm, copies):
    """Nested EP's log marginal likelihood at a fixed point.

    ``-log|I + K Pi| / 2 + nu' mean / 2`` (the Gaussian sites under the
    prior) plus every copy of every site's constants: the ``u`` integral's
    ``log_scale`` and the inner factors' normalisers.
    """
    return float(
        -0.5 * posterior.log_det
        + 0.5 * np.sum(nu_w * posterior.mean)
        + np.sum(copies * (log_scale + log_site_norm))
    )


def _factor_scales(cavity_cov, labels, others):
    """The factors' natural units, for the residual and Anderson mixing.

    Factor ``j`` of a row acts on ``s = u + f_y - f_j``, whose cavity
    variance is ``v = 1 + V_yy + V_jj - 2 V_yj``: its precision is measured
    in ``1 / v``, its precision-mean in ``1 / sqrt(v)``.  Returns the
    multipliers of the flattened ``(beta, nu)``.
    """
    rows = np.arange(len(labels))
    label_var = cavity_cov[rows, labels, labels][:, None]
    other_var = np.take_along_axis(
        np.diagonal(cavity_cov, axis1=1, axis2=2), others, axis=1
    )
    cross = cavity_cov[rows[:, None], labels[:, None], others]
    variance = (1.0 + label_var + other_var - 2 * cross).ravel()
    return np.concatenate([variance, np.sqrt(variance)])


def multinomial_ep(
    prior,
    labels,
    n_classes,
    *,
    weights=None,
    start=None,
    max_iter=200,
    tol=1e-5,
    damping=0.8,
    on_iteration=None,
    floor_sweeps=None,
):
    """Nested EP for the multinomial probit GP classifier, parallel updates.

    Every sweep solves the coupled posterior for all sites, forms each
    point's cavity (one copy of its site removed: power EP, so a weight
    ``w >= 1`` is the point repeated ``w`` times; below one the site is that
    of the tempered likelihood, see :func:`_site_copies`), runs one inner
    sweep from the point's current inner factors and takes a damped step
    towards them (halved when the residual stops making progress), or, near
    the fixed point, an Anderson-mixed step of the last sweeps.

    Parameters
    ----------
    prior : ndarray of shape (n, n), KernelPrior or SparseCoupledPrior
        The kernel matrix shared by the classes' latent functions (or its
        :class:`KernelPrior`), or the sparse mode's FITC prior.
    labels : ndarray of shape (n,)
        Class indices.
    n_classes : int
    weights : ndarray of shape (n,) or None
        Positive site weights.
    start : list of (tau, nu) or None
        Candidate starting factors; the first is used.
    max_iter : int
    tol : float
        Convergence: no inner factor's update changes its precision by more
        than ``tol`` times its direction's inverse variance, or its
        precision-mean by ``tol`` times its inverse standard deviation.
    damping : float in (0, 1]
    on_iteration : callable or None
        ``on_iteration(sweep)`` after every sweep; True stops the run.
    floor_sweeps : int or None
        Stop, not converged, once this many sweeps in a row bring no
        residual below the lowest so far: the residual has reached the
        rounding floor of the factors (a polish to a tolerance near machine
        precision ends there rather than at ``max_iter``).

    Returns
    -------
    MultinomialSolution
        Its ``residual`` is that of the returned factors.
    """
    if isinstance(prior, np.ndarray):
        prior = KernelPrior(prior)
    labels = np.asarray(labels)
    n = len(labels)
    w = None if weights is None else np.asarray(weights, dtype=float)
    copies, exponent = _site_copies(w)
    column = copies if w is None else copies[:, None]
    if start:
        tau, nu = start[0]
        sites = InnerSites(np.maximum(np.array(tau, dtype=float), 0.0), np.array(nu))
    else:
        sites = InnerSites.zeros(n, n_classes)
    others = other_classes(labels, n_classes)
    mixing = AndersonMixing(_ANDERSON_MEMORY)
    step = damping
    best_residual = np.inf
    stalled = 0
    undo = None  # the iterate before an accelerated step, to fall back to
    converged = stopped = False
    n_iter = 0
    lowest_residual = np.inf
    sweeps_above_lowest = 0
    while True:
        pi, nu_f, log_scale = outer_sites(sites, labels, n_classes)
        pi_w, nu_w = pi * column, nu_f * column
        posterior = prior.solve(pi_w, nu_w)
        mean, cov = posterior.mean, posterior.cov
        cavity_mean, cavity_cov = cavities(mean, cov, pi, nu_f)
        proposal, _, _ = inner_ep(
            cavity_mean,
            cavity_cov,
            labels,
            sites,
            _INNER_SWEEPS,
            normalisers=False,
            exponent=exponent,
        )
        scale = _factor_scales(cavity_cov, labels, others)
        x = np.concatenate([sites.beta.ravel(), sites.nu.ravel()])
        change = np.concatenate([proposal.beta.ravel(), proposal.nu.ravel()]) - x
        residual = float(np.max(np.abs(change) * scale, initial=0.0))
        if residual <= tol:
            converged = True
            break
        if n_iter >= max_iter:
            break
        if residual < lowest_residual:
            lowest_residual, sweeps_above_lowest = residual, 0
        else:
            sweeps_above_lowest += 1
        if floor_sweeps is not None and sweeps_above_lowest >= floor_sweeps:
            break
        n_iter += 1
        if on_iteration is not None and on_iteration(
            Sweep("EP", n_iter, residual, step)
        ):
            stopped = True
            break
        if undo is not None and residual > _ANDERSON_REJECT_RATIO * undo[2]:
            # The extrapolation threw the sites off: back to the iterate
            # before it, and a damped step from there.
            x, change, residual = undo
            mixing.restart()
            proposed = None
        else:
            proposed = None
            if residual < _ANDERSON_MAX_RESIDUAL:
                proposed = mixing.propose(x, change, scale)
        undo = None
        if proposed is not None:
            undo = (x, change, residual)
            x_next = proposed
        else:
            # Parallel updates overshoot in period two: the residual stops
            # making progress rather than growing.
            if residual < best_residual:
                best_residual, stalled = residual, 0
            else:
                stalled += 1
            if stalled >= _STALLED_SWEEPS:
                step = max(0.5 * step, _MIN_DAMPING)
                stalled = 0
                mixing.restart()
            x_next = x + step * change
        half = len(x_next) // 2
        sites = InnerSites(
            np.maximum(x_next[:half], 0.0).reshape(n, n_classes - 1),
            x_next[half:].reshape(n, n_classes - 1),
        )
    # The last sweep's cavities are those of the returned sites.
    _, log_site_norm, _ = inner_ep(
        cavity_mean, cavity_cov, labels, sites, 0, exponent=exponent
    )
    log_evidence = _evidence(posterior, nu_w, log_scale, log_site_norm, copies)
    return MultinomialSolution(
        tau=sites.beta,
        nu=sites.nu,
        alpha=getattr(posterior, "alpha", None),
        mean=mean,
        cov=cov,
        log_evidence=log_evidence,
        n_iter=n_iter,
        converged=converged,
        residual=residual,
        posterior=posterior,
        stopped=stopped,
        labels=labels,
        weights=w,
    )


def multinomial_evidence_gradient(solution, K_gradient):
    """Gradient of nested EP's log evidence in the kernel's log-hyperparameters.

    At a fixed point the evidence is stationary in the sites, so only the
    Gaussian part moves: ``sum_c a_c' dK a_c / 2 - tr(sum_c W_cc dK) / 2``
    with ``a_c = K^-1 mean_c`` (a shared kernel).

    Parameters
    ----------
    solution : MultinomialSolution
    K_gradient : ndarray of shape (n, n, n_dims)

    Returns
    -------
    ndarray of shape (n_dims,)
    """
    a = solution.alpha
    weight = a @ a.T - solution.posterior.trace_matrix()
    return 0.5 * np.einsum("ij,ijk->k", weight, K_gradient)
