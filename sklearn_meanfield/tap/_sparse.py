"""Sparse (inducing-point) Gaussian posterior for TAP / EP: the FITC prior.

With ``m`` inducing inputs ``Z`` the FITC prior of the latent fields at the
``n`` training inputs is ``N(0, Q + D)``, ``Q = K_nm K_mm^-1 K_mn`` and
``D = diag(K_nn - Q)`` (Snelson and Ghahramani's pseudo-inputs; the "fully
independent training conditional" of Quinonero-Candela and Rasmussen).  EP on
this prior is Naish-Guzman and Holden's FITC-EP classifier; Bui, Yan and
Turner's power EP for pseudo-point approximations recovers it at power one.
The field is a sum ``h = U w + e`` with ``w ~ N(0, I_m)``, ``U = K_nm L^-T``
(``K_mm = L L^T``, the *whitened* cross-covariances) and an independent
``e ~ N(0, D)``.  Integrating each ``e_i`` out of its site leaves a Gaussian
site on ``a_i = u_i^T w`` with natural parameters::

    g_i = tau_i / (1 + d_i tau_i),    h_i = nu_i / (1 + d_i tau_i),

so the posterior of ``w`` has precision ``A = I + U^T G U`` and mean
``m_w = A^-1 U^T h``, and the marginals of the fields are::

    mean_i = (u_i^T m_w + d_i nu_i) / (1 + d_i tau_i),
    var_i  = d_i / (1 + d_i tau_i) + u_i^T A^-1 u_i / (1 + d_i tau_i)^2.

The posterior ``(K^-1 + S)^-1`` is proper exactly when every
``1 + d_i tau_i > 0`` and ``A`` is positive definite (the joint precision of
``(w, e)`` and its Schur complement), which holds for site precisions of any
sign, and ``log|I + K S| = sum_i log(1 + d_i tau_i) + log|A|`` (the matrix
determinant lemma).  Nothing of size ``n x n`` appears: ``U^T G U`` and
``U^T h`` are sums over row blocks of ``m x m`` (and ``m``) statistics
(:func:`block_site_statistics`), the marginals are computed block by block
(:func:`block_marginals`), so a sweep costs ``O(n m^2)`` time and ``O(n m)``
memory (the whitened ``U``), and only ``m x m`` summaries need to travel
when the blocks live elsewhere.  Every pass over the rows is a map of a
block task over the blocks (:class:`LocalBlocks`: here, one after the
other; :class:`DaskBlocks`: on the workers of a Dask cluster, where each
block is whitened and stays), with the sums taken in block order by the
caller, so both give the same numbers.  EP's sweep is parallel over sites
(every cavity comes from the same posterior), so the block partition does
not change the iteration either.

The EP loop of :mod:`._ep` runs on :class:`FITCPosterior` unchanged.  Its
cavities are the leave-one-out predictive distributions of the sparse model
as exactly as in the full model: the cavity of ``h_i`` is the FITC predictive
at ``x_i`` (``Q`` part plus the diagonal correction ``d_i``) given every
other site, i.e. the model refitted without point ``i`` *with the other sites
frozen* (and the kernel and inducing inputs kept); TAP's only approximation
is that the other sites do not move when point ``i`` leaves.

References
----------
.. [1] L. Csato and M. Opper, "Sparse on-line Gaussian processes", Neural
   Computation 14(3), 641-668, 2002.
.. [2] E. Snelson and Z. Ghahramani, "Sparse Gaussian processes using
   pseudo-inputs", NIPS 18, 2006.
.. [3] J. Quinonero-Candela and C. E. Rasmussen, "A unifying view of sparse
   approximate Gaussian process regression", JMLR 6, 1939-1959, 2005
   (FITC predictive: section 6).
.. [4] A. Naish-Guzman and S. Holden, "The generalized FITC approximation",
   NIPS 20, 2008.
.. [5] T. D. Bui, J. Yan and R. E. Turner, "A unifying framework for Gaussian
   process pseudo-point approximations using power expectation
   propagation", JMLR 18(104), 1-72, 2017.
"""

from typing import NamedTuple

import numpy as np
from scipy.linalg import LinAlgError, blas, cho_solve, cholesky, solve_triangular

__all__ = [
    "FITCPosterior",
    "LocalBlocks",
    "DaskBlocks",
    "RowBlock",
    "FITCSolution",
    "inducing_cholesky",
    "whiten_block",
    "block_site_statistics",
    "combine_site_statistics",
    "block_marginals",
    "block_adjoints",
    "fitc_evidence_adjoints",
    "fitc_search_gradient",
    "kernel_second_argument_gradient",
]

# Row blocks hold about this many bytes of whitened cross-covariances (and
# as much again of temporaries), whatever m.
_BLOCK_BYTES = 8 * 2**20


def _solve_lower(chol, B):
    return solve_triangular(chol, B, lower=True, check_finite=False)


def _right_solve_rows(rows, chol, transpose):
    """``rows L^-T`` (``transpose``) or ``rows L^-1``, in place in ``rows``.

    ``rows`` is C-ordered (b, m), so ``rows.T`` is a Fortran-ordered (m, b)
    array that LAPACK's triangular solve overwrites without a copy:
    ``rows L^-T = (L^-1 rows^T)^T`` and ``rows L^-1 = (L^-T rows^T)^T``.
    """
    solved = blas.dtrsm(
        1.0, chol, rows.T, lower=1, trans_a=0 if transpose else 1, overwrite_b=1
    )
    return solved.T


def inducing_cholesky(K_mm, jitter=1e-8):
    """Cholesky factor of ``K_mm + jitter * mean(diag K_mm) * I``.

    The relative nugget is increased tenfold (up to 1e-2) until the
    factorisation succeeds; the FITC diagonal ``d_i`` absorbs the variance
    it takes from ``Q``, so the prior variances stay ``K_nn``.

    Parameters
    ----------
    K_mm : ndarray of shape (m, m)
        Prior covariance of the inducing values.
    jitter : float, default=1e-8
        Initial relative nugget (0: none, unless it fails).

    Returns
    -------
    chol : ndarray of shape (m, m)
        Lower Cholesky factor.
    jitter : float
        The relative nugget used.

    Examples
    --------
    >>> import numpy as np
    >>> chol, used = inducing_cholesky(np.ones((2, 2)), jitter=0.0)
    >>> used
    1e-10
    """
    scale = max(float(np.mean(np.diag(K_mm))), np.finfo(float).tiny)
    while True:
        K = np.array(K_mm, dtype=float)
        K[np.diag_indices_from(K)] += jitter * scale
        try:
            return cholesky(K, lower=True, check_finite=False), jitter
        except LinAlgError:
            if jitter > 1e-2:
                raise
            jitter = max(10.0 * jitter, 1e-10)


def whiten_block(K_bm, k_diag, chol_mm):
    """Whitened cross-covariances ``U_b = K_bm L^-T`` and FITC diagonal.

    Parameters
    ----------
    K_bm : ndarray of shape (b, m)
        Covariances of the block's fields with the inducing values.
    k_diag : ndarray of shape (b,)
        Prior variances of the block's fields.
    chol_mm : ndarray of shape (m, m)
        From :func:`inducing_cholesky`.

    Returns
    -------
    U_b : ndarray of shape (b, m)
    d_b : ndarray of shape (b,)
        ``k_ii - |u_i|^2``, clipped at zero (rounding).

    Examples
    --------
    ``U_b U_b^T`` is the Nystrom part ``Q = K_bm K_mm^-1 K_mb``:

    >>> import numpy as np
    >>> x, z = np.linspace(-2, 2, 4), np.array([-1.0, 1.0])
    >>> k = lambda a, b: np.exp(-0.5 * (a[:, None] - b[None, :]) ** 2)
    >>> U, d = whiten_block(k(x, z), np.ones(4), inducing_cholesky(k(z, z), 0.0)[0])
    >>> Q = k(x, z) @ np.linalg.solve(k(z, z), k(z, x))
    >>> bool(np.allclose(U @ U.T, Q) and np.allclose(d, 1 - np.diag(Q)))
    True
    """
    U_b = _right_solve_rows(np.array(K_bm, dtype=float, order="C"), chol_mm, True)
    d_b = np.maximum(np.asarray(k_diag, float) - np.einsum("ij,ij->i", U_b, U_b), 0.0)
    return U_b, d_b


def _effective_sites(d_b, tau_b, nu_b):
    """``1 + d tau`` and the sites ``g, h`` on ``a = U w`` (LinAlgError if improper)."""
    denominator = 1.0 + d_b * tau_b
    if not np.all(denominator > 0):  # also catches NaN
        raise LinAlgError("a FITC diagonal plus its site is not positive")
    return denominator, tau_b / denominator, nu_b / denominator


def block_site_statistics(U_b, d_b, tau_b, nu_b):
    """One row block's share of ``U^T G U``, ``U^T h`` and ``sum log(1 + d tau)``.

    Summing the three over the blocks of any partition of the rows gives the
    statistics :func:`combine_site_statistics` turns into the posterior of
    the whitened inducing values; ``O(b m^2)`` work.

    Parameters
    ----------
    U_b, d_b : ndarray of shape (b, m) and (b,)
        From :func:`whiten_block`.
    tau_b, nu_b : ndarray of shape (b,)
        The block's sites.

    Returns
    -------
    precision : ndarray of shape (m, m)
    shift : ndarray of shape (m,)
    logdet : float

    Raises
    ------
    LinAlgError
        When some ``1 + d_i tau_i <= 0`` (the posterior is improper).

    Examples
    --------
    The whole pipeline on two blocks, against :meth:`FITCPosterior.solve`:

    >>> import numpy as np
    >>> x, z = np.linspace(-2, 2, 6), np.array([-1.0, 1.0])
    >>> k = lambda a, b: np.exp(-0.5 * (a[:, None] - b[None, :]) ** 2)
    >>> chol, _ = inducing_cholesky(k(z, z))
    >>> tau, nu = np.full(6, 0.5), np.sin(x)
    >>> blocks = (slice(0, 3), slice(3, 6))
    >>> parts = [whiten_block(k(x[b], z), np.ones(3), chol) for b in blocks]
    >>> stats = [block_site_statistics(U, d, tau[b], nu[b])
    ...          for (U, d), b in zip(parts, blocks)]
    >>> chol_A, mean_w, logdet = combine_site_statistics(
    ...     *(sum(s[i] for s in stats) for i in range(3)))
    >>> mean = np.concatenate([
    ...     block_marginals(U, d, tau[b], nu[b], chol_A, mean_w)[0]
    ...     for (U, d), b in zip(parts, blocks)])
    >>> whole = FITCPosterior(k(z, z), k(x, z), np.ones(6)).solve(tau, nu)
    >>> bool(np.allclose(mean, whole.mean) and np.isclose(logdet, whole.logdet))
    True
    """
    denominator, g, h = _effective_sites(d_b, tau_b, nu_b)
    return _weighted_gram(U_b, g), U_b.T @ h, float(np.sum(np.log(denominator)))


def _weighted_gram(U_b, weights):
    """``U_b^T diag(weights) U_b`` by symmetric rank-k updates (half a GEMM).

    Rows of negative weight are a second update subtracted from the first.
    """
    gram = np.zeros((U_b.shape[1],) * 2)
    for sign in (1.0, -1.0):
        rows = sign * weights > 0
        if not np.any(rows):
            continue
        scaled = U_b[rows]
        scaled *= np.sqrt(sign * weights[rows])[:, None]
        # scaled.T is Fortran-ordered: syrk reads it without a copy.
        gram += blas.dsyrk(sign, scaled.T, lower=1)
    # syrk fills the lower triangle; mirror it.
    return np.tril(gram) + np.tril(gram, -1).T


def combine_site_statistics(precision, shift, logdet):
    """Posterior of the whitened inducing values from the summed statistics.

    Parameters
    ----------
    precision, shift, logdet
        Sums of :func:`block_site_statistics` over all blocks.

    Returns
    -------
    chol_A : ndarray of shape (m, m)
        Lower Cholesky factor of ``A = I + U^T G U``.
    mean_w : ndarray of shape (m,)
        ``A^-1 U^T h``.
    logdet : float
        ``log|I + K S|`` of the FITC prior ``K``.

    Raises
    ------
    LinAlgError
        When ``A`` is not positive definite (improper posterior).

    Examples
    --------
    No sites: the inducing values keep their (whitened) prior.

    >>> import numpy as np
    >>> chol_A, mean_w, logdet = combine_site_statistics(
    ...     np.zeros((2, 2)), np.zeros(2), 0.0)
    >>> chol_A.tolist(), mean_w.tolist(), logdet
    ([[1.0, 0.0], [0.0, 1.0]], [0.0, 0.0], 0.0)
    """
    A = np.array(precision, dtype=float)
    A[np.diag_indices_from(A)] += 1.0
    chol_A = cholesky(A, lower=True, check_finite=False)
    mean_w = cho_solve((chol_A, True), shift, check_finite=False)
    return chol_A, mean_w, logdet + 2.0 * float(np.sum(np.log(np.diag(chol_A))))


def block_marginals(U_b, d_b, tau_b, nu_b, chol_A, mean_w):
    """Posterior means and variances of one block's fields (``O(b m^2)``).

    Parameters
    ----------
    U_b, d_b : ndarray of shape (b, m) and (b,)
        From :func:`whiten_block`.
    tau_b, nu_b : ndarray of shape (b,)
        The block's sites.
    chol_A, mean_w
        From :func:`combine_site_statistics`.

    Returns
    -------
    mean, var : ndarray of shape (b,)
    shared : ndarray of shape (b,)
        ``u_i^T A^-1 u_i``, the variance of the field's inducing part.

    Examples
    --------
    Without sites the marginals are the prior's, ``N(0, k_ii)``:

    >>> import numpy as np
    >>> U, d = np.array([[0.6, 0.0], [0.3, 0.4]]), np.array([0.64, 0.75])
    >>> mean, var, _ = block_marginals(
    ...     U, d, np.zeros(2), np.zeros(2), np.eye(2), np.zeros(2))
    >>> mean.tolist(), var.round(12).tolist()
    ([0.0, 0.0], [1.0, 1.0])
    """
    denominator = 1.0 + d_b * tau_b
    W = _solve_lower(chol_A, U_b.T)
    shared = np.einsum("ij,ij->j", W, W)
    mean = (U_b @ mean_w + d_b * nu_b) / denominator
    var = d_b / denominator + shared / denominator**2
    return mean, var, shared


class FITCSolution:
    """The posterior of the fields under the FITC prior for given sites.

    Same contract as the kernel posterior's solutions of :mod:`._posterior`
    (``mean``, ``var``, ``logdet``, ``variance_reduction``, ``release``),
    where the cross-covariances of new points are taken with the *inducing*
    points: the FITC prior links a new field to the training fields only
    through the inducing values.

    Parameters
    ----------
    posterior : FITCPosterior
    tau, nu : ndarray of shape (n,)
        Site precisions (either sign) and precision-means.

    Attributes
    ----------
    mean, var : ndarray of shape (n,)
        Posterior marginals of the training fields.
    logdet : float
        ``log|I + K S|`` for the FITC prior ``K``.
    chol_A : ndarray of shape (m, m)
        Lower Cholesky factor of ``A = I + U^T G U``, the precision of the
        whitened inducing values.
    mean_w : ndarray of shape (m,)
        Their posterior mean.
    inducing_alpha : ndarray of shape (m,)
        ``K_mm^-1 K_mn alpha`` with ``alpha = nu - tau * mean``: the
        predictive mean at new points is ``K_*m @ inducing_alpha``.
    shared : ndarray of shape (n,)
        ``u_i^T A^-1 u_i``.
    chol_mm : ndarray of shape (m, m)
        The posterior's Cholesky factor of ``K_mm`` (plus nugget).
    posterior : FITCPosterior or None
        The posterior solved (None after :meth:`release`).

    Examples
    --------
    Predictions at new points need their covariances with the inducing
    points only; with ``Z`` at the data and one precise site the predictive
    at that point is nearly the site's value:

    >>> import numpy as np
    >>> K = np.array([[1.0, 0.5], [0.5, 1.0]])
    >>> solution = FITCPosterior(K, K, np.ones(2)).solve(
    ...     np.array([1e6, 0.0]), np.array([2e6, 0.0]))
    >>> mean, var = solution.predict(K[:, :1], np.ones(1))
    >>> bool(abs(mean[0] - 2.0) < 1e-5 and var[0] < 1e-5)
    True
    """

    def __init__(self, posterior, tau, nu):
        self.posterior = posterior
        self.chol_mm = posterior.chol_mm
        self.tau = np.array(tau, dtype=float)  # kept for the adjoints
        self.nu = np.array(nu, dtype=float)
        statistics = posterior.site_statistics(self.tau, self.nu)
        self.chol_A, self.mean_w, self.logdet = combine_site_statistics(*statistics)
        self.mean, self.var, self.shared = posterior.marginals(
            self.tau, self.nu, self.chol_A, self.mean_w
        )
        self.inducing_alpha = solve_triangular(
            posterior.chol_mm, self.mean_w, lower=True, trans="T", check_finite=False
        )

    def _whitened(self, K_cross):
        """``V = L^-1 K_m*`` and ``L_A^-1 V`` for cross-covariances (m, n*)."""
        V = _solve_lower(self.chol_mm, np.asarray(K_cross, dtype=float))
        return V, _solve_lower(self.chol_A, V)

    def variance_reduction(self, K_cross):
        """``k_*m K_mm^-1 k_m* - v^T A^-1 v`` for columns ``k_m*`` of ``K_cross``.

        The predictive variance at a new point is ``k_** - reduction``
        (Quinonero-Candela and Rasmussen 2005, FITC: the test point keeps
        its own diagonal correction ``k_** - Q_**``).

        Parameters
        ----------
        K_cross : ndarray of shape (m, n_test)
            Covariances of the inducing values with the new fields.

        Returns
        -------
        ndarray of shape (n_test,)
        """
        V, W = self._whitened(K_cross)
        return np.einsum("ij,ij->j", V, V) - np.einsum("ij,ij->j", W, W)

    def predict(self, K_cross, k_diag):
        """Predictive mean and variance of the latent field at new points.

        Parameters
        ----------
        K_cross : ndarray of shape (m, n_test)
            Covariances of the inducing values with the new fields.
        k_diag : ndarray of shape (n_test,)
            Prior variances of the new fields.

        Returns
        -------
        mean, var : ndarray of shape (n_test,)
            ``var = (k_** - |v|^2) + |L_A^-1 v|^2``, a sum of two
            non-negative terms (the first clipped at zero for rounding).
        """
        V, W = self._whitened(K_cross)
        mean = V.T @ self.mean_w
        own = np.maximum(np.asarray(k_diag, float) - np.einsum("ij,ij->j", V, V), 0.0)
        return mean, own + np.einsum("ij,ij->j", W, W)

    def site_correction(self):
        """Not available: it is an ``n x n`` matrix (use the adjoints)."""
        raise NotImplementedError(
            "S - S Sigma S is n x n; the FITC evidence gradient comes from "
            "fitc_evidence_adjoints (O(n m^2))."
        )

    def release(self):
        """Drop the reference to the ``n x m`` posterior (``U``): prediction
        needs ``chol_mm``, ``chol_A`` and ``mean_w`` only, the evidence
        adjoints need the posterior (compute them before)."""
        self.posterior = None


class FITCPosterior:
    """The Gaussian posterior of the fields for the FITC prior ``Q + D``.

    A drop-in for :class:`~sklearn_meanfield.tap._posterior.KernelPosterior` in
    :func:`~sklearn_meanfield.tap._ep.expectation_propagation` and
    :func:`~sklearn_meanfield.tap._mean_field.mean_field_iteration` whose
    ``solve`` costs ``O(n m^2)`` time and ``O(n m)`` memory, for site
    precisions of either sign (see the module docstring).

    Parameters
    ----------
    K_mm : ndarray of shape (m, m)
        Prior covariance of the inducing values.
    K_nm : ndarray of shape (n, m)
        Covariances of the training fields with the inducing values.
    K_nn_diag : ndarray of shape (n,)
        Prior variances of the training fields.
    jitter : float, default=1e-8
        Relative nugget for ``K_mm`` (:func:`inducing_cholesky`).
    block_size : int or None, default=None
        Rows per block of the sums (None: about 8 MiB of ``U`` a block).
        Results do not depend on it beyond rounding.

    Attributes
    ----------
    chol_mm : ndarray of shape (m, m)
    U : ndarray of shape (n, m)
        Whitened cross-covariances ``K_nm L^-T``.
    d : ndarray of shape (n,)
        FITC diagonal ``K_nn - diag(Q)``.
    prior_var : ndarray of shape (n,)
    jitter_used : float

    Examples
    --------
    The sparse posterior equals the dense one on the explicit FITC prior:

    >>> import numpy as np
    >>> from sklearn_meanfield.tap._posterior import KernelPosterior
    >>> x, z = np.linspace(-2, 2, 7), np.array([-1.0, 0.5])
    >>> k = lambda a, b: np.exp(-0.5 * (a[:, None] - b[None, :]) ** 2)
    >>> K_nm, K_mm = k(x, z), k(z, z)
    >>> sparse = FITCPosterior(K_mm, K_nm, np.ones(7), jitter=0.0)
    >>> Q = K_nm @ np.linalg.solve(K_mm, K_nm.T)
    >>> K = Q + np.diag(1.0 - np.diag(Q))
    >>> tau, nu = np.linspace(0.5, 2.0, 7), np.sin(x)
    >>> a, b = sparse.solve(tau, nu), KernelPosterior(K).solve(tau, nu)
    >>> bool(np.allclose(a.mean, b.mean) and np.allclose(a.var, b.var))
    True
    >>> bool(np.isclose(a.logdet, b.logdet))
    True
    """

    def __init__(self, K_mm, K_nm, K_nn_diag, jitter=1e-8, block_size=None):
        K_nm = np.asarray(K_nm, dtype=float)
        K_nn_diag = np.asarray(K_nn_diag, dtype=float)
        n, m = K_nm.shape
        chol_mm, jitter_used = inducing_cholesky(K_mm, jitter)
        executor = LocalBlocks(n, _block_size(block_size, m))
        parts = [
            RowBlock(*whiten_block(K_nm[block], K_nn_diag[block], chol_mm), None)
            for block in executor.slices
        ]
        self._set(chol_mm, executor, parts, m, jitter_used)

    @classmethod
    def from_kernel(cls, kernel, X, Z, jitter=1e-8, block_size=None, executor=None):
        """The posterior for a scikit-learn ``kernel``, training inputs ``X``
        and inducing inputs ``Z``, ``K_nm`` computed and whitened block by
        block where the blocks live (never held whole: only the blocks of
        ``U`` are kept, with their rows of ``X`` for the gradient).

        Parameters
        ----------
        kernel : scikit-learn kernel
        X : ndarray of shape (n, n_features)
        Z : ndarray of shape (m, n_features)
        jitter, block_size
            As for :class:`FITCPosterior` (``block_size`` is ignored when
            ``executor`` is given: its partition is used).
        executor : LocalBlocks, DaskBlocks or None, default=None
            Where the row blocks live and their tasks run (None: here, in
            blocks of ``block_size`` rows).

        Returns
        -------
        FITCPosterior

        Examples
        --------
        >>> import numpy as np
        >>> from sklearn.gaussian_process.kernels import RBF
        >>> X, Z = np.linspace(0, 1, 5)[:, None], np.array([[0.2], [0.7]])
        >>> a = FITCPosterior.from_kernel(RBF(0.5), X, Z, block_size=2)
        >>> b = FITCPosterior(RBF(0.5)(Z), RBF(0.5)(X, Z), np.ones(5))
        >>> bool(np.allclose(a.U, b.U) and np.allclose(a.d, b.d))
        True
        """
        chol_mm, jitter_used = inducing_cholesky(kernel(Z), jitter)
        if executor is None:
            executor = LocalBlocks(len(X), _block_size(block_size, len(Z)))
        parts = executor.submit(
            _whiten_task,
            [X[block] for block in executor.slices],
            shared=(kernel, Z, chol_mm),
        )
        posterior = cls.__new__(cls)
        posterior._set(chol_mm, executor, parts, len(Z), jitter_used)
        return posterior

    @classmethod
    def from_whitened(cls, chol_mm, U, d, block_size=None, jitter_used=0.0):
        """The posterior from :func:`whiten_block`'s outputs (no copy).

        Parameters
        ----------
        chol_mm : ndarray of shape (m, m)
        U : ndarray of shape (n, m)
        d : ndarray of shape (n,)
        block_size : int or None, default=None
        jitter_used : float, default=0.0
            The nugget ``chol_mm`` was computed with (recorded only).

        Returns
        -------
        FITCPosterior
        """
        executor = LocalBlocks(U.shape[0], _block_size(block_size, U.shape[1]))
        parts = [RowBlock(U[block], d[block], None) for block in executor.slices]
        posterior = cls.__new__(cls)
        posterior._set(chol_mm, executor, parts, U.shape[1], jitter_used)
        return posterior

    def _set(self, chol_mm, executor, parts, m, jitter_used):
        self.chol_mm = chol_mm
        self.executor, self.parts = executor, parts
        self.block_size = executor.block_size
        self._m = m
        self.jitter_used = jitter_used
        self._prior_var = None

    @property
    def n(self):
        """Number of training points."""
        return self.executor.n

    @property
    def m(self):
        """Number of inducing points."""
        return self._m

    @property
    def U(self):
        """The whitened cross-covariances ``K_nm L^-T`` (gathered from the
        blocks into one ``n x m`` array: for tests and small problems)."""
        return np.concatenate([part.U for part in self.executor.gather(self.parts)])

    @property
    def d(self):
        """The FITC diagonal ``K_nn - diag(Q)`` (gathered from the blocks)."""
        return np.concatenate(list(self.executor.map(_diagonal_task, self.parts)))

    @property
    def prior_var(self):
        """Prior variances of the fields, ``d_i + |u_i|^2`` (computed once)."""
        if self._prior_var is None:
            self._prior_var = np.concatenate(
                list(self.executor.map(_prior_var_task, self.parts))
            )
        return self._prior_var

    def blocks(self):
        """The row blocks.

        Returns
        -------
        list of slice
        """
        return self.executor.slices

    def matvec(self, alpha):
        """``(Q + D) @ alpha`` in ``O(n m)`` (two passes over the blocks;
        ``m`` numbers travel between them).

        Parameters
        ----------
        alpha : ndarray of shape (n,)

        Returns
        -------
        ndarray of shape (n,)
        """
        alpha = np.asarray(alpha, dtype=float)
        projected = np.zeros(self.m)
        for part in self.executor.map(_project_task, self.parts, alpha):
            projected += part
        return np.concatenate(
            list(
                self.executor.map(_expand_task, self.parts, alpha, shared=(projected,))
            )
        )

    def subset(self, index):
        """The posterior of the training points ``index`` only (same Z).

        Parameters
        ----------
        index : array-like of int

        Returns
        -------
        FITCPosterior
        """
        return FITCPosterior.from_whitened(
            self.chol_mm, self.U[index], self.d[index], self.block_size
        )

    def site_statistics(self, tau, nu):
        """Sums of :func:`block_site_statistics` over the row blocks (in
        block order, wherever the blocks live).

        Parameters
        ----------
        tau, nu : ndarray of shape (n,)

        Returns
        -------
        precision : ndarray of shape (m, m)
        shift : ndarray of shape (m,)
        logdet : float
        """
        precision = np.zeros((self.m, self.m))
        shift = np.zeros(self.m)
        logdet = 0.0
        for P, s, ld in self.executor.map(_statistics_task, self.parts, tau, nu):
            precision += P
            shift += s
            logdet += ld
        return precision, shift, logdet

    def marginals(self, tau, nu, chol_A, mean_w):
        """:func:`block_marginals` over the row blocks, concatenated.

        Parameters
        ----------
        tau, nu : ndarray of shape (n,)
        chol_A, mean_w
            From :func:`combine_site_statistics`.

        Returns
        -------
        mean, var, shared : ndarray of shape (n,)
        """
        results = self.executor.map(
            _marginals_task, self.parts, tau, nu, shared=(chol_A, mean_w)
        )
        return tuple(np.concatenate(column) for column in zip(*results))

    def solve(self, tau, nu):
        """Posterior marginals for sites ``(tau, nu)``.

        Parameters
        ----------
        tau, nu : ndarray of shape (n,)
            Site precisions (either sign) and precision-means.

        Returns
        -------
        FITCSolution

        Raises
        ------
        LinAlgError
            When ``K^-1 + S`` is not positive definite.
        """
        return FITCSolution(self, tau, nu)


class RowBlock(NamedTuple):
    """One row block of a :class:`FITCPosterior`: its whitened
    cross-covariances, FITC diagonal and (None when built from matrices)
    training inputs."""

    U: np.ndarray
    d: np.ndarray
    X: object


# The block tasks: module-level functions of one RowBlock (pickled to Dask
# workers by reference), the block's slices of n-vectors and shared m x m
# state.


def _whiten_task(X_b, kernel, Z, chol_mm):
    return RowBlock(*whiten_block(kernel(X_b, Z), kernel.diag(X_b), chol_mm), X_b)


def _diagonal_task(block):
    return block.d


def _prior_var_task(block):
    return block.d + np.einsum("ij,ij->i", block.U, block.U)


def _project_task(block, alpha_b):
    return block.U.T @ alpha_b


def _expand_task(block, alpha_b, projected):
    return block.U @ projected + block.d * alpha_b


def _statistics_task(block, tau_b, nu_b):
    return block_site_statistics(block.U, block.d, tau_b, nu_b)


def _marginals_task(block, tau_b, nu_b, chol_A, mean_w):
    return block_marginals(block.U, block.d, tau_b, nu_b, chol_A, mean_w)


def _adjoints_task(block, tau_b, nu_b, mean_w, A_inv, chol_mm):
    return block_adjoints(block.U, block.d, tau_b, nu_b, mean_w, A_inv, chol_mm)


def _gradient_task(block, tau_b, nu_b, mean_w, A_inv, chol_mm, kernel, Z, inducing):
    """The block's share of the evidence gradient in ``kernel.theta`` (and
    in ``Z`` when ``inducing``) and of the ``K_mm`` adjoint's statistic: its
    ``b x m`` adjoint never leaves the block."""
    G_nm, g_nn, statistic = block_adjoints(
        block.U, block.d, tau_b, nu_b, mean_w, A_inv, chol_mm
    )
    # For the RBF kernels both contractions take W = G_nm * K_nm: one K_nm.
    W = _rbf_weights(G_nm, kernel, block.X, Z)
    theta = _rows_kernel_gradient(G_nm, g_nn, kernel, block.X, Z, rbf_weights=W)
    Z_part = None
    if inducing:
        Z_part = _rows_inducing_gradient(G_nm, kernel, block.X, Z, rbf_weights=W)
    return theta, Z_part, statistic


class LocalBlocks:
    """Where the row blocks of a :class:`FITCPosterior` live and their tasks
    run: here, one block after the other.

    The blocks partition the ``n`` rows into consecutive slices of
    ``block_size`` rows.  A block task is ``func(block, *slices, *shared)``:
    the block's stored object, its slices of ``n``-vectors and shared
    (``m x m`` or smaller) arguments.  :class:`DaskBlocks` runs the same
    tasks on a Dask cluster with the same partition, so both give the same
    numbers (sums are taken here, in block order).

    Parameters
    ----------
    n : int
        Rows.
    block_size : int
        Rows a block.

    Examples
    --------
    >>> import numpy as np
    >>> blocks = LocalBlocks(5, 2)
    >>> results = blocks.map(lambda part, x: part * x.sum(), [1, 2, 3], np.arange(5.0))
    >>> [float(value) for value in results]
    [1.0, 10.0, 12.0]
    """

    def __init__(self, n, block_size):
        self.n = int(n)
        self.block_size = max(1, int(block_size))
        self.slices = _blocks(self.n, self.block_size)

    def submit(self, func, parts, *per_block, shared=()):
        """Run ``func`` on every block; the results stay where the blocks
        are (here: the results themselves)."""
        return [
            func(part, *(vector[block] for vector in per_block), *shared)
            for part, block in zip(parts, self.slices)
        ]

    def gather(self, results):
        """The results of :meth:`submit`, here."""
        return list(results)

    def map(self, func, parts, *per_block, shared=()):
        """The block results in block order, each computed here as it is
        consumed (an iterator: one block's temporaries at a time)."""
        return (
            func(part, *(vector[block] for vector in per_block), *shared)
            for part, block in zip(parts, self.slices)
        )


class DaskBlocks(LocalBlocks):
    """Row blocks on the workers of a Dask cluster.

    The blocks' objects are futures (the ``b x m`` whitened
    cross-covariances stay on the worker that computed them); a task's block
    slices of ``n``-vectors travel with it, shared arrays are scattered once
    a call, and only the tasks' results come back: ``m x m`` statistics,
    ``m``-vectors and the block's slices of ``n``-vectors.  A block lost with
    its worker is recomputed by the scheduler (its inputs travel with the
    whitening task).

    Parameters
    ----------
    client : distributed.Client
    n, block_size : int
        As for :class:`LocalBlocks`.
    """

    def __init__(self, client, n, block_size):
        super().__init__(n, block_size)
        self.client = client

    def submit(self, func, parts, *per_block, shared=()):
        shared = tuple(
            self.client.scatter(value, broadcast=True, hash=False)
            if isinstance(value, np.ndarray) and value.size > 1024
            else value
            for value in shared
        )
        return [
            self.client.submit(
                func,
                part,
                *(np.ascontiguousarray(vector[block]) for vector in per_block),
                *shared,
                pure=False,
            )
            for part, block in zip(parts, self.slices)
        ]

    def gather(self, results):
        return self.client.gather(list(results))

    def map(self, func, parts, *per_block, shared=()):
        """The list of block results, in block order (computed on the
        workers at once)."""
        return self.gather(self.submit(func, parts, *per_block, shared=shared))


def _block_size(block_size, m):
    if block_size is None:
        return max(1, _BLOCK_BYTES // (8 * max(m, 1)))
    return max(1, int(block_size))


def _blocks(n, block_size):
    return [slice(i, min(i + block_size, n)) for i in range(0, n, block_size)]


def block_adjoints(U_b, d_b, tau_b, nu_b, mean_w, A_inv, chol_mm):
    """One row block's share of the evidence adjoints (``O(b m^2)``).

    With ``alpha = h - G U m_w`` (``= nu - tau * mean``), ``s_i = u_i^T A^-1
    u_i`` and ``r = alpha^2 + g^2 s``, the block's rows of ``d log Z / d
    K_nm`` are ``[alpha m_w^T + G U (I - A^-1) - diag(r) U] L^-1`` and its
    share of the ``K_mm`` adjoint is ``U^T diag(r) U`` (see
    :func:`fitc_evidence_adjoints`).

    Parameters
    ----------
    U_b, d_b, tau_b, nu_b
        As for :func:`block_site_statistics`.
    mean_w : ndarray of shape (m,)
        Posterior mean of the whitened inducing values.
    A_inv : ndarray of shape (m, m)
        Inverse of their posterior precision ``A``.
    chol_mm : ndarray of shape (m, m)
        From :func:`inducing_cholesky`.

    Returns
    -------
    G_nm : ndarray of shape (b, m)
    g_nn : ndarray of shape (b,)
    statistic : ndarray of shape (m, m)
        ``U_b^T diag(r) U_b``.

    Examples
    --------
    Any partition of the rows gives the same adjoints:

    >>> import numpy as np
    >>> x, z = np.linspace(-2, 2, 6), np.array([-1.0, 1.0])
    >>> k = lambda a, b: np.exp(-0.5 * (a[:, None] - b[None, :]) ** 2)
    >>> tau, nu = np.linspace(0.2, 1.0, 6), np.cos(x)
    >>> one = FITCPosterior(k(z, z), k(x, z), np.ones(6)).solve(tau, nu)
    >>> two = FITCPosterior(k(z, z), k(x, z), np.ones(6), block_size=4).solve(
    ...     tau, nu)
    >>> all(np.allclose(a, b) for a, b in zip(
    ...     fitc_evidence_adjoints(one), fitc_evidence_adjoints(two)))
    True
    """
    _, g, h = _effective_sites(d_b, tau_b, nu_b)
    alpha = h - g * (U_b @ mean_w)
    projected = U_b @ A_inv
    shared = np.einsum("ij,ij->i", projected, U_b)
    r = alpha**2 + g**2 * shared
    # alpha m_w^T + G U (I - A^-1) - diag(r) U, in one buffer.
    inner = np.outer(alpha, mean_w)
    inner -= np.multiply(projected, g[:, None], out=projected)
    inner += np.multiply(U_b, (g - r)[:, None], out=projected)
    G_nm = _right_solve_rows(inner, chol_mm, False)
    g_nn = 0.5 * (alpha**2 - g + g**2 * shared)
    return G_nm, g_nn, _weighted_gram(U_b, r)


def fitc_evidence_adjoints(solution):
    """Derivatives of the EP log evidence in ``K_mm``, ``K_nm`` and ``K_nn_diag``.

    At an EP fixed point ``d log Z = 1/2 tr(R dK)`` with
    ``R = alpha alpha^T - (S - S Sigma S)`` (NOTES.md section 1), for any
    parametrised prior ``K``.  For the FITC prior ``S - S Sigma S = G - G U
    A^-1 U^T G`` and ``dK = dQ + diag(dK_nn - diag dQ)``; with ``R~`` the
    off-diagonal part of ``R`` and ``B = K_mm^-1 K_mn``::

        d log Z = sum(G_mm * dK_mm) + sum(G_nm * dK_nm) + g_nn . dK_nn_diag,
        G_mm = -1/2 B R~ B^T,  G_nm = R~ B^T,  g_nn = 1/2 diag(R),

    each a sum over row blocks (:func:`block_adjoints`), ``O(n m^2)``.  The
    inducing inputs enter through ``K_mm`` and ``K_nm`` only
    (:func:`fitc_search_gradient`).

    Parameters
    ----------
    solution : TAPSolution or FITCSolution
        A converged EP solution on a :class:`FITCPosterior` (or its
        posterior); its own sites are used.

    Returns
    -------
    G_mm : ndarray of shape (m, m)
        Symmetric.
    G_nm : ndarray of shape (n, m)
    g_nn : ndarray of shape (n,)

    Examples
    --------
    Gaussian sites are exact: contracted with the covariances themselves the
    adjoints give the derivative in the log amplitude of the regression
    evidence ``log N(y; 0, c (Q + D) + s2 I)``, ``1/2 tr(R K)``:

    >>> import numpy as np
    >>> x, z = np.linspace(-2, 2, 6), np.array([-1.0, 1.0])
    >>> k = lambda a, b: np.exp(-0.5 * (a[:, None] - b[None, :]) ** 2)
    >>> y, s2 = np.sin(x), 0.3
    >>> posterior = FITCPosterior(k(z, z), k(x, z), np.ones(6), jitter=0.0)
    >>> G_mm, G_nm, g_nn = fitc_evidence_adjoints(
    ...     posterior.solve(np.full(6, 1 / s2), y / s2))
    >>> derivative = np.sum(G_mm * k(z, z)) + np.sum(G_nm * k(x, z)) + g_nn.sum()
    >>> Q = k(x, z) @ np.linalg.solve(k(z, z), k(z, x))
    >>> K = Q + np.diag(1 - np.diag(Q))
    >>> C_inv = np.linalg.inv(K + s2 * np.eye(6))
    >>> a = C_inv @ y
    >>> exact = 0.5 * np.trace((np.outer(a, a) - C_inv) @ K)
    >>> bool(np.isclose(derivative, exact))
    True
    """
    fitc, posterior = _fitc_parts(solution)
    mean_w = fitc.mean_w
    A_inv, inner = adjoint_start(fitc.chol_A, mean_w)
    results = posterior.executor.map(
        _adjoints_task,
        posterior.parts,
        fitc.tau,
        fitc.nu,
        shared=(mean_w, A_inv, posterior.chol_mm),
    )
    G_nm, g_nn = np.empty((posterior.n, posterior.m)), np.empty(posterior.n)
    for block, (G_nm_b, g_nn_b, statistic) in zip(posterior.blocks(), results):
        G_nm[block], g_nn[block] = G_nm_b, g_nn_b
        inner -= statistic
        del G_nm_b, g_nn_b  # before the next block's are computed
    return inducing_adjoint(inner, posterior.chol_mm), G_nm, g_nn


def _fitc_parts(solution):
    """The :class:`FITCSolution` of a solution and its (unreleased) posterior."""
    fitc = getattr(solution, "posterior", solution)
    if not isinstance(fitc, FITCSolution):
        fitc = solution
    if fitc.posterior is None:
        raise ValueError("the solution was released; compute the adjoints before")
    return fitc, fitc.posterior


def adjoint_start(chol_A, mean_w):
    """``A^-1`` and the ``K_mm`` adjoint's inner matrix before the rows'
    statistics are subtracted, ``m_w m_w^T + A + A^-1 - 2 I``, for the
    posterior ``N(m_w, A^-1)`` of the whitened inducing values."""
    m = len(mean_w)
    A = chol_A @ chol_A.T
    A_inv = cho_solve((chol_A, True), np.eye(m), check_finite=False)
    inner = np.outer(mean_w, mean_w) + A + A_inv
    inner[np.diag_indices(m)] -= 2.0
    return A_inv, inner


def inducing_adjoint(inner, chol_mm):
    """``G_mm = -1/2 L^-T inner L^-1``, symmetrised against rounding."""
    half = solve_triangular(chol_mm, inner, lower=True, trans="T", check_finite=False)
    G_mm = -0.5 * solve_triangular(
        chol_mm, half.T, lower=True, trans="T", check_finite=False
    )
    return 0.5 * (G_mm + G_mm.T)


def fitc_search_gradient(solution, kernel, Z, inducing=False):
    """The evidence gradient in ``kernel.theta`` (and ``Z``) where the blocks live.

    The adjoints of :func:`fitc_evidence_adjoints` contracted with the
    kernel's derivatives in ``theta`` (and in ``Z``), each block's ``b x m``
    adjoint inside its block task: only the blocks' ``m x m`` statistics and
    ``n_params`` (``m x d``) partial gradients leave them, so the ``n x m``
    adjoint is never formed.  Derivatives of ``K_nm`` come in closed form for
    sums, products and powers of Constant, White, DotProduct, RBF, Matern
    (``nu`` 0.5, 1.5, 2.5, inf) and RationalQuadratic, and are read off the
    stacked inputs ``[X_b; Z]`` for other kernels (four times the work).

    Parameters
    ----------
    solution : TAPSolution or FITCSolution
        A converged EP solution on a :class:`FITCPosterior` built by
        :meth:`FITCPosterior.from_kernel` (its blocks hold their inputs).
    kernel : scikit-learn kernel
        The posterior's kernel.
    Z : ndarray of shape (m, n_features)
        Its inducing inputs.
    inducing : bool, default=False
        Also the gradient in ``Z``.

    Returns
    -------
    theta_gradient : ndarray of shape (n_params,)
    Z_gradient : ndarray of shape (m, n_features) or None

    Examples
    --------
    The log amplitude of ``ConstantKernel(c) * RBF`` scales every covariance
    (its derivative is the kernel itself), so its gradient is the adjoints
    contracted with the covariances:

    >>> import numpy as np
    >>> from sklearn.gaussian_process.kernels import RBF, ConstantKernel
    >>> from sklearn_meanfield.tap._ep import expectation_propagation
    >>> from sklearn_meanfield.tap._likelihoods import make_likelihood
    >>> X = np.linspace(-2, 2, 9)[:, None]
    >>> Z = np.array([[-1.0], [0.0], [1.2]])
    >>> kernel = ConstantKernel(1.5) * RBF(0.7, "fixed")
    >>> t = np.where(np.sin(2 * X[:, 0]) > 0, 1.0, -1.0)
    >>> solution = expectation_propagation(
    ...     FITCPosterior.from_kernel(kernel, X, Z, block_size=4), t,
    ...     make_likelihood("probit", 0.0), tol=1e-12)
    >>> theta, dZ = fitc_search_gradient(solution, kernel, Z, inducing=True)
    >>> G_mm, G_nm, g_nn = fitc_evidence_adjoints(solution)
    >>> direct = (np.sum(G_mm * kernel(Z)) + np.sum(G_nm * kernel(X, Z))
    ...           + g_nn @ kernel.diag(X))
    >>> bool(np.allclose(theta, [direct])), dZ.shape
    (True, (3, 1))
    """
    fitc, posterior = _fitc_parts(solution)
    mean_w = fitc.mean_w
    A_inv, inner = adjoint_start(fitc.chol_A, mean_w)
    results = posterior.executor.map(
        _gradient_task,
        posterior.parts,
        fitc.tau,
        fitc.nu,
        shared=(mean_w, A_inv, posterior.chol_mm, kernel, Z, bool(inducing)),
    )
    theta = np.zeros(kernel.n_dims)
    Z_gradient = np.zeros(np.shape(Z)) if inducing else None
    for block_theta, block_Z, statistic in results:
        inner -= statistic
        theta += block_theta
        if inducing:
            Z_gradient += block_Z
    return add_inducing_share(theta, Z_gradient, inner, posterior.chol_mm, kernel, Z)


def add_inducing_share(theta, Z_gradient, inner, chol_mm, kernel, Z):
    """The rows' shares of the gradient (``theta``, and ``Z_gradient``
    unless None) plus ``K_mm``'s, whose adjoint comes from ``inner`` (the
    matrix of :func:`adjoint_start` less the rows' statistics)."""
    G_mm = inducing_adjoint(inner, chol_mm)
    _, dK_mm = kernel(Z, eval_gradient=True)
    theta = theta + np.einsum("ij,ijk->k", G_mm, dK_mm)
    if Z_gradient is not None:
        Z_gradient = Z_gradient + _inducing_mm_gradient(G_mm, kernel, Z)
    return theta, Z_gradient


def _rows_kernel_gradient(G_nm, g_nn, kernel, X, Z, block_size=None, rbf_weights=None):
    """The rows' share of the gradient in ``kernel.theta``: ``G_nm`` and
    ``g_nn`` contracted with the derivatives of ``K_nm`` and the prior
    variances, in sub-blocks of ``block_size`` rows (None: about 8 MiB of
    derivatives; ``m`` rows for the stacked inputs of kernels without
    closed-form derivatives).  ``rbf_weights``: :func:`_rbf_weights`' ``W``
    when already computed."""
    m = len(Z)
    parts = _rbf_parts(kernel)
    if parts is not None:  # the common case, by matrix products
        W = rbf_weights if rbf_weights is not None else G_nm * kernel(X, Z)
        return _rbf_rows_theta_gradient(parts, W, g_nn, kernel, X, Z)
    gradient = np.zeros(kernel.n_dims)
    try:
        _theta_gradient(kernel, Z[:1], Z[:1])
    except NotImplementedError:  # the stacked inputs [X_b; Z], 4 b m a block
        for block in _blocks(len(X), block_size or m):
            b = block.stop - block.start
            _, dK = kernel(np.vstack([X[block], Z]), eval_gradient=True)
            gradient += np.einsum("ij,ijk->k", G_nm[block], dK[:b, b:])
            gradient += g_nn[block] @ dK[np.arange(b), np.arange(b)]
        return gradient
    rows = block_size or max(1, _BLOCK_BYTES // (8 * m * max(kernel.n_dims, 1)))
    for block in _blocks(len(X), rows):
        gradient += np.einsum(
            "ij,ijk->k", G_nm[block], _theta_gradient(kernel, X[block], Z)[1]
        )
        gradient += g_nn[block] @ _theta_gradient(kernel, X[block], None)[1]
    return gradient


def _theta_gradient(kernel, A, B):
    """Values and ``kernel.theta`` derivatives of ``k(A, B)`` (or of the
    diagonal ``k(a_i, a_i)`` when ``B`` is None), for the kernels of
    :func:`kernel_second_argument_gradient` (Matern: ``nu`` in 0.5, 1.5,
    2.5, inf); ``NotImplementedError`` otherwise.  scikit-learn's order:
    ``k1`` before ``k2``, a kernel's hyperparameters by name, fixed ones left
    out.  ``WhiteKernel`` has no cross-covariance (as ``kernel(A, B)``).
    """
    from sklearn.gaussian_process import kernels as k

    value = kernel.diag(A) if B is None else kernel(A, B)
    if isinstance(kernel, (k.Sum, k.Product)):
        v1, g1 = _theta_gradient(kernel.k1, A, B)
        v2, g2 = _theta_gradient(kernel.k2, A, B)
        if isinstance(kernel, k.Product):
            g1, g2 = g1 * v2[..., None], v1[..., None] * g2
        return value, np.concatenate([g1, g2], axis=-1)
    if isinstance(kernel, k.Exponentiation):
        v, g = _theta_gradient(kernel.kernel, A, B)
        p = kernel.exponent
        return value, (p * v ** (p - 1.0))[..., None] * g
    if isinstance(kernel, (k.ConstantKernel, k.WhiteKernel)):
        grads = {"constant_value": value[..., None], "noise_level": value[..., None]}
    elif isinstance(kernel, k.DotProduct):
        grads = {"sigma_0": np.full(value.shape + (1,), 2.0 * kernel.sigma_0**2)}
    elif isinstance(kernel, (k.RBF, k.RationalQuadratic)):
        grads = _stationary_theta_gradient(kernel, A, B, value)
    else:
        raise NotImplementedError(type(kernel).__name__)
    columns = [grads[h.name] for h in kernel.hyperparameters if not h.fixed]
    if not columns:
        return value, np.empty(value.shape + (0,))
    return value, np.concatenate(columns, axis=-1)


def _matern_radial_factor(nu, r):
    """``-(dk/dr) / r`` of the unit-amplitude Matern kernel at scaled distance
    ``r``: the factor both its length-scale and its input derivatives share."""
    if nu == 0.5:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(r > 0, np.exp(-r) / r, 0.0)
    if nu == 1.5:
        return 3.0 * np.exp(-np.sqrt(3.0) * r)
    if nu == 2.5:
        return 5.0 / 3.0 * (1.0 + np.sqrt(5.0) * r) * np.exp(-np.sqrt(5.0) * r)
    raise NotImplementedError(f"Matern nu={nu}: use 0.5, 1.5, 2.5, inf")


def _stationary_theta_gradient(kernel, A, B, value):
    """Length-scale (and RationalQuadratic's alpha) derivatives, by name."""
    from sklearn.gaussian_process import kernels as k

    length = np.atleast_1d(np.asarray(kernel.length_scale, dtype=float))
    if B is None:  # k(a, a) does not depend on them
        return {
            "length_scale": np.zeros((len(A), len(length))),
            "alpha": np.zeros((len(A), 1)),
        }
    D = ((A[:, None, :] - B[None, :, :]) / length) ** 2  # per dimension
    r = np.sqrt(np.sum(D, axis=-1))
    if isinstance(kernel, k.RationalQuadratic):
        base = 1.0 + r**2 / (2.0 * kernel.alpha)
        d_alpha = (
            value * kernel.alpha * (-np.log(base) + r**2 / (2 * kernel.alpha * base))
        )
        factor = base ** (-kernel.alpha - 1.0)
        grads = {"alpha": d_alpha[..., None]}
    elif isinstance(kernel, k.Matern) and kernel.nu != np.inf:
        factor = _matern_radial_factor(kernel.nu, r)
        grads = {}
    else:  # RBF, Matern(nu=inf)
        factor, grads = value, {}
    per_dimension = factor[..., None] * D  # d k / d log l_k
    if len(length) == 1 or not kernel.anisotropic:
        per_dimension = np.sum(per_dimension, axis=-1, keepdims=True)
    grads["length_scale"] = per_dimension
    return grads


def _scaled_differences(kernel, A, B):
    """``(a - b) / l^2`` (shape (|A|, |B|, d)) and ``r`` = the scaled distance."""
    length = np.asarray(kernel.length_scale, dtype=float)
    diff = (A[:, None, :] - B[None, :, :]) / length**2
    r = np.sqrt(np.maximum(np.sum(diff * (A[:, None, :] - B[None, :, :]), -1), 0.0))
    return diff, r


def kernel_second_argument_gradient(kernel, A, B):
    """``d k(a_i, b_j) / d b_j`` for scikit-learn kernels, shape (|A|, |B|, d).

    Covers sums, products and powers of ``ConstantKernel``, ``WhiteKernel``
    (zero: it only acts on identical rows of one input), ``RBF``,
    ``Matern`` (``nu`` in 0.5, 1.5, 2.5, inf; the cusp of 0.5 at ``a = b``
    gets 0), ``RationalQuadratic`` and ``DotProduct``; anything else raises
    ``NotImplementedError``.

    Parameters
    ----------
    kernel : scikit-learn kernel
    A : ndarray of shape (n_a, d)
    B : ndarray of shape (n_b, d)

    Returns
    -------
    ndarray of shape (n_a, n_b, d)

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.gaussian_process.kernels import RBF
    >>> A, B = np.array([[0.0, 1.0]]), np.array([[0.5, 0.0]])
    >>> kernel_second_argument_gradient(RBF(1.0), A, B)[0, 0].round(4).tolist()
    [-0.2676, 0.5353]
    """
    from sklearn.gaussian_process import kernels as k

    if isinstance(kernel, k.Sum):
        return kernel_second_argument_gradient(
            kernel.k1, A, B
        ) + kernel_second_argument_gradient(kernel.k2, A, B)
    if isinstance(kernel, k.Product):
        return kernel_second_argument_gradient(kernel.k1, A, B) * kernel.k2(A, B)[
            :, :, None
        ] + kernel.k1(A, B)[:, :, None] * kernel_second_argument_gradient(
            kernel.k2, A, B
        )
    if isinstance(kernel, k.Exponentiation):
        inner = kernel.kernel(A, B) ** (kernel.exponent - 1.0)
        return (kernel.exponent * inner)[:, :, None] * kernel_second_argument_gradient(
            kernel.kernel, A, B
        )
    if isinstance(kernel, (k.ConstantKernel, k.WhiteKernel)):
        return np.zeros((len(A), len(B), A.shape[1]))
    if isinstance(kernel, k.DotProduct):
        return np.broadcast_to(A[:, None, :], (len(A), len(B), A.shape[1])).copy()
    if isinstance(kernel, k.RationalQuadratic):
        diff, r = _scaled_differences(kernel, A, B)
        base = 1.0 + r**2 / (2.0 * kernel.alpha)
        return (base ** (-kernel.alpha - 1.0))[:, :, None] * diff
    if isinstance(kernel, k.Matern) and kernel.nu != np.inf:
        diff, r = _scaled_differences(kernel, A, B)
        return _matern_radial_factor(kernel.nu, r)[:, :, None] * diff
    if isinstance(kernel, k.RBF):  # also Matern(nu=inf)
        diff, r = _scaled_differences(kernel, A, B)
        return np.exp(-0.5 * r**2)[:, :, None] * diff
    raise NotImplementedError(
        f"No input derivative for {type(kernel).__name__}; the inducing inputs "
        "cannot be optimised with this kernel."
    )


def _inducing_mm_gradient(G_mm, kernel, Z):
    """``K_mm``'s share of the gradient in ``Z``."""
    # d k(z_j, z_l) / d z_j = d k(z_l, z_j) / d z_j (k symmetric): entry
    # [l, j] of the second-argument derivative.
    K_mm_dZ = kernel_second_argument_gradient(kernel, Z, Z).transpose(1, 0, 2)
    return 2.0 * np.einsum("jl,jlk->jk", G_mm, K_mm_dZ)


def _rows_inducing_gradient(G_nm, kernel, X, Z, block_size=None, rbf_weights=None):
    """The rows' share (``K_nm``'s) of the gradient in ``Z``, in sub-blocks
    of ``block_size`` rows (None: ``m``); ``rbf_weights`` as for
    :func:`_rows_kernel_gradient`."""
    parts = _rbf_parts(kernel)
    if parts is not None:  # the common case, by matrix products
        W = rbf_weights if rbf_weights is not None else G_nm * kernel(X, Z)
        length = np.asarray(parts[1].length_scale, dtype=float)
        return (W.T @ X - np.sum(W, axis=0)[:, None] * Z) / length**2
    gradient = np.zeros(np.shape(Z))
    for block in _blocks(len(X), block_size or len(Z)):
        K_dZ = kernel_second_argument_gradient(kernel, X[block], Z)
        gradient += np.einsum("ij,ijk->jk", G_nm[block], K_dZ)
    return gradient


def _rbf_parts(kernel):
    """``(constant, rbf, constant_first)`` when ``kernel`` is an ``RBF`` or a
    product of a ``ConstantKernel`` and an ``RBF`` (either order; Matern, a
    subclass, excluded), else None.

    For these the evidence gradient's contractions with the derivatives of
    ``K_nm`` are matrix products of ``W = G_nm * K_nm`` with the inputs:
    ``O(b m d)`` in BLAS instead of ``(b, m, d)`` arrays of derivatives,
    whose construction would otherwise dominate an evaluation of the search
    when the inducing inputs are learned.
    """
    from sklearn.gaussian_process import kernels as k

    if type(kernel) is k.RBF:
        return None, kernel, True
    if type(kernel) is k.Product:
        a, b = kernel.k1, kernel.k2
        if type(a) is k.ConstantKernel and type(b) is k.RBF:
            return a, b, True
        if type(a) is k.RBF and type(b) is k.ConstantKernel:
            return b, a, False
    return None


def _rbf_weights(G_nm, kernel, X, Z):
    """``W = G_nm * K_nm`` for the kernels of :func:`_rbf_parts`, else None."""
    return None if _rbf_parts(kernel) is None else G_nm * kernel(X, Z)


def _rbf_rows_theta_gradient(parts, W, g_nn, kernel, X, Z):
    """:func:`_rows_kernel_gradient` for the kernels of :func:`_rbf_parts`.

    With ``W = G_nm * K_nm``: ``d/d log c`` is ``sum W + g_nn . k(x, x)``
    and ``d/d log l_k`` is ``sum_ij W_ij (x_ik - z_jk)^2 / l_k^2``, expanded
    into ``(W 1) . x_k^2 - 2 x_k . (W z_k) + (1^T W) . z_k^2``.
    """
    constant, rbf, constant_first = parts
    columns = {}
    if constant is not None and not constant.hyperparameter_constant_value.fixed:
        columns["constant"] = [np.sum(W) + g_nn @ kernel.diag(X)]
    if not rbf.hyperparameter_length_scale.fixed:
        length = np.asarray(rbf.length_scale, dtype=float)
        per_dimension = (
            np.sum(W, axis=1) @ X**2
            - 2.0 * np.sum(X * (W @ Z), axis=0)
            + np.sum(W, axis=0) @ Z**2
        ) / length**2
        if not rbf.anisotropic:
            per_dimension = [np.sum(per_dimension)]
        columns["rbf"] = per_dimension
    order = ("constant", "rbf") if constant_first else ("rbf", "constant")
    return np.concatenate([np.zeros(0)] + [columns[n] for n in order if n in columns])
