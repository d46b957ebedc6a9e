"""The multinomial probit model on the FITC prior of inducing inputs.

Every class's latent function gets the FITC prior of :mod:`._sparse`, with
the kernel and the ``m`` inducing inputs shared: ``f_c = U w_c + e_c``,
``w_c ~ N(0, I_m)`` the class's whitened inducing values, ``e_c ~ N(0,
diag(d))`` independent of everything else.  Nested EP
(:mod:`._multinomial`) gives point ``i`` a Gaussian site over its ``C``
latent values with precision ``Pi_i = diag(pi) - pi pi' / S`` (``S =
sum(pi)``) and precision-mean ``nu_i``.  That precision is what a free
auxiliary ``v`` leaves when it is integrated out of ``exp(-sum_c pi_c (f_c
- v)^2 / 2)``, so integrating the independent ``e_i ~ N(0, d_i I)`` out of
the site first turns every ``pi_c`` into ``g_c = pi_c / (1 + d_i pi_c)``:
the site on ``a_i = (u_i' w_c)_c`` has precision and precision-mean::

    G_i = diag(g) - g g' / T,   T = sum(g),
    h_i = (I + d_i Pi_i)^-1 nu_i = nu / (1 + d pi) + d g (g' nu) / T,

the same diagonal-minus-rank-one structure.  The ``C m`` whitened inducing
values ``W = (w_1, ..., w_C)`` then have the Gaussian posterior of
precision and shift::

    A = I + sum_i G_i (x) u_i u_i',   block (c, d) = delta_cd I + U' diag(G[:, c, d]) U,
    H = (U' h_1, ..., U' h_C),        mean_W = A^-1 H,

and, given ``a_i``, the row's ``e_i`` sees its own site only, so the
marginals of the latent values are::

    mean_i = (I + d_i Pi_i)^-1 (M' u_i + d_i nu_i),
    cov_i  = d_i (I + d_i Pi_i)^-1 + (I + d_i Pi_i)^-1 V_i (I + d_i Pi_i)^-1,

with ``M`` the ``m x C`` matrix of the ``mean_W`` blocks, ``V_i[c, d] = u_i'
S_cd u_i`` and ``S = A^-1``, and ``(I + d Pi)^-1 = diag(1 / (1 + d pi)) + d
g g' / T``.  The determinant lemma gives ``log|I + K Pi| = sum_i log|I + d_i
Pi_i| + log|A|`` with ``log|I + d Pi| = sum_c log(1 + d pi_c) + log(T / S)``.

A sweep costs ``O(n m^2 C^2)`` (the ``C (C + 1) / 2`` weighted Gram
matrices of ``A`` and as many products for the ``V_i``) and one Cholesky
factorisation of the ``C m x C m`` matrix ``A``; one-vs-rest's sparse
problems cost ``O(n m^2 C)`` together.  The rows live in the blocks of
:class:`~sklearn_meanfield.tap._sparse.FITCPosterior` (here or on Dask
workers), whose tasks return ``C m x C m`` statistics and the blocks' rows.

The evidence gradient is that of every Gaussian-site model at an EP fixed
point, ``1/2 tr(R dK)`` summed over the classes' identical FITC priors,
``R = sum_c (a_c a_c' - W_cc)`` with ``a = K^-1 mean`` (row ``i``: ``h_i -
G_i M' u_i``) and ``W = (K + Pi^-1)^-1``.  With ``Q`` the rows ``sum_cd
G_i[c, d] u_i' S_dc`` (``sum_c W_cc U``), the adjoints of
:func:`~sklearn_meanfield.tap._sparse.fitc_evidence_adjoints` become::

    G_nm = (A_a M' - Q - diag(r) U) L^-1,   g_nn = r / 2,
    G_mm = -1/2 L^-T (M M' - C I + sum_c S_cc - U' diag(r) U) L^-1,

``r_i = |a_i|^2 - tr(G_i - G_i V_i G_i)`` the diagonal of ``R``, and the
kernel's derivatives, in its hyperparameters and in the inducing inputs,
are contracted with them by the binary sparse mode's code.

References
----------
.. [1] J. Riihimaki, P. Jylanki and A. Vehtari, "Nested expectation
   propagation for Gaussian process classification with a multinomial
   probit likelihood", Journal of Machine Learning Research 14, 75-109,
   2013.
.. [2] A. Naish-Guzman and S. Holden, "The generalized FITC approximation",
   NIPS 20, 2008.
.. [3] E. Snelson and Z. Ghahramani, "Sparse Gaussian processes using
   pseudo-inputs", NIPS 18, 2006.
"""

import numpy as np
from scipy.linalg import lapack, solve_triangular

from ._multinomial import site_precisions
from ._sparse import (
    _rbf_weights,
    _right_solve_rows,
    _rows_inducing_gradient,
    _rows_kernel_gradient,
    _weighted_gram,
    add_inducing_share,
)

__all__ = [
    "SparseCoupledPosterior",
    "SparseCoupledPrior",
    "block_adjoints",
    "block_marginals",
    "block_statistics",
    "combine_statistics",
    "effective_sites",
    "sparse_multinomial_gradient",
]


def effective_sites(pi, nu_f, d):
    """The sites on the inducing part ``a_i`` once ``e_i`` is integrated out.

    Parameters
    ----------
    pi, nu_f : ndarray of shape (n, C)
        The (weighted) outer sites: precisions ``diag(pi) - pi pi' / sum(pi)``
        and precision-means.
    d : ndarray of shape (n,)
        The FITC diagonal.

    Returns
    -------
    g : ndarray of shape (n, C)
        ``pi / (1 + d pi)``: the site on ``a_i`` has precision
        ``diag(g) - g g' / sum(g)``.
    h : ndarray of shape (n, C)
        ``(I + d Pi)^-1 nu_f``, its precision-mean.
    log_det : ndarray of shape (n,)
        ``log|I + d_i Pi_i|``.

    Examples
    --------
    The structured forms against dense algebra:

    >>> import numpy as np
    >>> from sklearn_meanfield.tap._multinomial import site_precisions
    >>> pi, nu = np.array([[1.0, 0.3, 2.0]]), np.array([[0.5, -1.0, 0.2]])
    >>> d = np.array([0.7])
    >>> g, h, log_det = effective_sites(pi, nu, d)
    >>> Pi = site_precisions(pi)[0]
    >>> M = np.eye(3) + d[0] * Pi
    >>> bool(np.allclose(site_precisions(g)[0], Pi @ np.linalg.inv(M)))
    True
    >>> bool(np.allclose(h[0], np.linalg.solve(M, nu[0])))
    True
    >>> bool(np.isclose(log_det[0], np.linalg.slogdet(M)[1]))
    True
    """
    scale = 1.0 + d[:, None] * pi
    g = pi / scale
    total = g.sum(axis=1)
    h = nu_f / scale + (d * np.einsum("ic,ic->i", g, nu_f) / total)[:, None] * g
    log_det = np.sum(np.log(scale), axis=1) + np.log(total / pi.sum(axis=1))
    return g, h, log_det


def _shrinkage(pi, g, d):
    """``(I + d_i Pi_i)^-1 = diag(1 / (1 + d pi)) + d g g' / sum(g)``, (n, C, C)."""
    out = (d / g.sum(axis=1))[:, None, None] * g[:, :, None] * g[:, None, :]
    idx = np.arange(pi.shape[1])
    out[:, idx, idx] += 1.0 / (1.0 + d[:, None] * pi)
    return out


def _coupled_quadratics(U_b, A_inv, n_classes):
    """``u_i' S_cd u_i`` for every row and pair of classes, ``(b, C, C)``.

    ``S = A^-1`` in ``C x C`` blocks of ``m x m``; row ``c``'s blocks ``d >=
    c`` come from one product ``U_b S[c, c:]``, the others by symmetry.
    """
    b, m = U_b.shape
    V = np.empty((b, n_classes, n_classes))
    for c in range(n_classes):
        P = (U_b @ A_inv[c * m : (c + 1) * m, c * m :]).reshape(b, -1, m)
        V[:, c, c:] = np.einsum("bkm,bm->bk", P, U_b)
    upper = np.triu_indices(n_classes, 1)
    V[:, upper[1], upper[0]] = V[:, upper[0], upper[1]]
    return V


def block_statistics(U_b, d_b, pi_b, nu_b):
    """One row block's share of ``A - I``, ``H`` and ``sum log|I + d Pi|``.

    Parameters
    ----------
    U_b, d_b : ndarray of shape (b, m) and (b,)
        The block's whitened cross-covariances and FITC diagonal.
    pi_b, nu_b : ndarray of shape (b, C)
        Its (weighted) outer sites.

    Returns
    -------
    precision : ndarray of shape (C m, C m)
        ``sum_i G_i (x) u_i u_i'``, blocks ``(c, d >= c)`` filled (the
        others are zero: :func:`combine_statistics` mirrors them).
    shift : ndarray of shape (C m,)
        The blocks ``U_b' h_c``.
    log_det : float
    """
    b, m = U_b.shape
    n_classes = pi_b.shape[1]
    g, h, log_det = effective_sites(pi_b, nu_b, d_b)
    G = site_precisions(g)
    precision = np.zeros((n_classes * m, n_classes * m))
    for c in range(n_classes):
        # U' diag(G[:, c, d]) U for every d >= c, one matrix product.
        weighted = (U_b[:, None, :] * G[:, c, c:, None]).reshape(b, -1)
        precision[c * m : (c + 1) * m, c * m :] = U_b.T @ weighted
    return precision, (U_b.T @ h).T.ravel(), float(np.sum(log_det))


def combine_statistics(precision, shift, log_det):
    """The posterior of the whitened inducing values from summed statistics.

    Parameters
    ----------
    precision : ndarray of shape (C m, C m)
        Sum of :func:`block_statistics` over all blocks (C-ordered; only
        its upper triangle is read).  Overwritten by ``A_inv``.
    shift, log_det
        Sums of :func:`block_statistics` over all blocks.

    Returns
    -------
    A_inv : ndarray of shape (C m, C m)
    mean_W : ndarray of shape (C m,)
    log_det : float
        ``log|I + K Pi|`` of the FITC prior.

    Raises
    ------
    numpy.linalg.LinAlgError
        When ``A`` is not positive definite.
    """
    size = precision.shape[0]
    precision.flat[:: size + 1] += 1.0
    # LAPACK works in place on the transpose, a Fortran-ordered view whose
    # lower triangle is the buffer's upper one: the factor, then the inverse
    # there, with zeros in the other triangle.
    factor, info = lapack.dpotrf(precision.T, lower=1, clean=1, overwrite_a=1)
    if info:
        raise np.linalg.LinAlgError("A is not positive definite")
    log_det = log_det + 2.0 * float(np.sum(np.log(np.diag(factor))))
    inverse, info = lapack.dpotri(factor, lower=1, overwrite_c=1)
    if info:
        raise np.linalg.LinAlgError("A is not positive definite")
    A_inv = inverse.T
    A_inv += inverse
    A_inv.flat[:: size + 1] *= 0.5
    mean_W = A_inv @ shift
    return A_inv, mean_W, log_det


def block_marginals(U_b, d_b, pi_b, nu_b, mean_W, A_inv):
    """Posterior means ``(b, C)`` and covariances ``(b, C, C)`` of one block's
    latent values (module docstring)."""
    n_classes = pi_b.shape[1]
    m = U_b.shape[1]
    g, _, _ = effective_sites(pi_b, nu_b, d_b)
    shrink = _shrinkage(pi_b, g, d_b)
    inducing_mean = U_b @ mean_W.reshape(n_classes, m).T
    V = _coupled_quadratics(U_b, A_inv, n_classes)
    mean = np.einsum("bcd,bd->bc", shrink, inducing_mean + d_b[:, None] * nu_b)
    cov = d_b[:, None, None] * shrink + shrink @ V @ shrink
    return mean, 0.5 * (cov + cov.transpose(0, 2, 1))


def block_adjoints(U_b, d_b, pi_b, nu_b, mean_W, A_inv, chol_mm):
    """One row block's ``G_nm``, ``g_nn`` and ``U_b' diag(r) U_b`` (module
    docstring), ``O(b m^2 C^2)``."""
    n_classes = pi_b.shape[1]
    m = U_b.shape[1]
    g, h, _ = effective_sites(pi_b, nu_b, d_b)
    G = site_precisions(g)
    M = mean_W.reshape(n_classes, m)  # row c: the class's mean of w_c
    alpha = h - np.einsum("bcd,bd->bc", G, U_b @ M.T)
    rows = alpha @ M
    V = np.empty((len(U_b), n_classes, n_classes))
    for c in range(n_classes):
        # One block row of S at a time: U_b S[c, :] holds b x C m numbers.
        P = (U_b @ A_inv[c * m : (c + 1) * m]).reshape(len(U_b), n_classes, m)
        V[:, c] = np.einsum("bdm,bm->bd", P, U_b)
        rows -= np.einsum("bd,bdm->bm", G[:, c], P)
    GV = G @ V
    r = (
        np.einsum("bc,bc->b", alpha, alpha)
        - np.trace(G, axis1=1, axis2=2)
        + np.einsum("bcd,bcd->b", GV, G)
    )
    rows -= r[:, None] * U_b
    G_nm = _right_solve_rows(rows, chol_mm, False)
    return G_nm, 0.5 * r, _weighted_gram(U_b, r)


class SparseCoupledPosterior:
    """The posterior of the ``n x C`` latent values on the FITC prior.

    Parameters
    ----------
    prior : SparseCoupledPrior
    pi, nu_f : ndarray of shape (n, C)
        The weighted outer sites.

    Attributes
    ----------
    mean : ndarray of shape (n, C)
    cov : ndarray of shape (n, C, C)
    log_det : float
        ``log|I + K Pi|``.
    chol_mm : ndarray of shape (m, m)
    A_inv : ndarray of shape (C m, C m)
        Posterior covariance of the whitened inducing values.
    mean_W : ndarray of shape (C m,)
        Their posterior mean, class after class.
    prior : SparseCoupledPrior or None
        None after :meth:`release`.
    """

    def __init__(self, prior, pi, nu_f):
        fitc = prior.fitc
        n_classes = pi.shape[1]
        self.prior, self.pi, self.nu_f = prior, pi, nu_f
        self.chol_mm = fitc.chol_mm
        precision = np.zeros((n_classes * fitc.m,) * 2)
        shift = np.zeros(n_classes * fitc.m)
        log_det = 0.0
        statistics = fitc.executor.map(_coupled_statistics_task, fitc.parts, pi, nu_f)
        for P, s, ld in statistics:
            precision += P
            shift += s
            log_det += ld
        self.A_inv, self.mean_W, self.log_det = combine_statistics(
            precision, shift, log_det
        )
        results = fitc.executor.map(
            _coupled_marginals_task,
            fitc.parts,
            pi,
            nu_f,
            shared=(self.mean_W, self.A_inv),
        )
        means, covs = zip(*results)
        self.mean, self.cov = np.concatenate(means), np.concatenate(covs)

    def predict(self, K_cross, k_diag):
        """Predictive means ``(b, C)`` and covariances ``(b, C, C)`` of the
        latent values at new inputs: the inducing part's ``v' S_cd v`` plus
        each class's own FITC variance ``k_** - |v|^2``.

        Parameters
        ----------
        K_cross : ndarray of shape (m, b)
            Covariances of the inducing values with the new fields.
        k_diag : ndarray of shape (b,)
        """
        n_classes = len(self.mean_W) // len(self.chol_mm)
        V = solve_triangular(self.chol_mm, K_cross, lower=True, check_finite=False).T
        mean = V @ self.mean_W.reshape(n_classes, -1).T
        cov = _coupled_quadratics(np.ascontiguousarray(V), self.A_inv, n_classes)
        own = np.maximum(k_diag - np.einsum("ij,ij->i", V, V), 0.0)
        idx = np.arange(n_classes)
        cov[:, idx, idx] += own[:, None]
        return mean, cov

    def release(self):
        """Drop the prior's ``n x m`` blocks (prediction needs ``O(C^2 m^2)``
        state only; the gradient needs them)."""
        self.prior = None


class SparseCoupledPrior:
    """The FITC prior of every class's latent values, for :func:`multinomial_ep`.

    Parameters
    ----------
    fitc : FITCPosterior
        The whitened cross-covariances and FITC diagonal in row blocks.
    """

    def __init__(self, fitc):
        self.fitc = fitc

    def solve(self, pi, nu_f):
        """The :class:`SparseCoupledPosterior` of weighted sites."""
        return SparseCoupledPosterior(self, pi, nu_f)


def sparse_multinomial_gradient(solution, kernel, Z, inducing=False):
    """The evidence gradient in ``kernel.theta`` (and in ``Z``).

    Each block contracts its own ``b x m`` adjoint with the kernel's
    derivatives (:func:`~sklearn_meanfield.tap._sparse._rows_kernel_gradient`,
    :func:`~sklearn_meanfield.tap._sparse._rows_inducing_gradient`); only
    ``m x m`` statistics and ``n_params`` (and ``m x d``) partial sums leave
    it.

    Parameters
    ----------
    solution : MultinomialSolution
        Converged nested EP on a :class:`SparseCoupledPrior` built by
        :meth:`~sklearn_meanfield.tap._sparse.FITCPosterior.from_kernel`.
    kernel : scikit-learn kernel
    Z : ndarray of shape (m, n_features)
    inducing : bool, default=False
        Also the gradient in ``Z``.

    Returns
    -------
    theta_gradient : ndarray of shape (n_params,)
    Z_gradient : ndarray of shape (m, n_features) or None
    """
    posterior = solution.posterior
    fitc = posterior.prior.fitc
    n_classes = posterior.pi.shape[1]
    m = fitc.m
    M = posterior.mean_W.reshape(n_classes, m)
    diagonal_blocks = sum(
        posterior.A_inv[c * m : (c + 1) * m, c * m : (c + 1) * m]
        for c in range(n_classes)
    )
    inner = M.T @ M + diagonal_blocks
    inner[np.diag_indices(m)] -= n_classes
    theta = np.zeros(kernel.n_dims)
    Z_gradient = np.zeros(np.shape(Z)) if inducing else None
    for block_theta, block_Z, statistic in fitc.executor.map(
        _coupled_gradient_task,
        fitc.parts,
        posterior.pi,
        posterior.nu_f,
        shared=(
            posterior.mean_W, posterior.A_inv, fitc.chol_mm, kernel, Z, bool(inducing)
        ),
    ):  # fmt: skip
        theta += block_theta
        inner -= statistic
        if inducing:
            Z_gradient += block_Z
    return add_inducing_share(theta, Z_gradient, inner, fitc.chol_mm, kernel, Z)


# Block tasks: module-level functions of one RowBlock (pickled to Dask
# workers by reference).


def _coupled_statistics_task(block, pi_b, nu_b):
    return block_statistics(block.U, block.d, pi_b, nu_b)


def _coupled_marginals_task(block, pi_b, nu_b, mean_W, A_inv):
    return block_marginals(block.U, block.d, pi_b, nu_b, mean_W, A_inv)


def _coupled_gradient_task(
    block, pi_b, nu_b, mean_W, A_inv, chol_mm, kernel, Z, inducing
):
    G_nm, g_nn, statistic = block_adjoints(
        block.U, block.d, pi_b, nu_b, mean_W, A_inv, chol_mm
    )
    W = _rbf_weights(G_nm, kernel, block.X, Z)
    theta = _rows_kernel_gradient(G_nm, g_nn, kernel, block.X, Z, rbf_weights=W)
    Z_part = None
    if inducing:
        Z_part = _rows_inducing_gradient(G_nm, kernel, block.X, Z, rbf_weights=W)
    return theta, Z_part, statistic
