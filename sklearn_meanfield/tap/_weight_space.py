"""The Gaussian posterior of a linear model's fields, solved in weight space.

For fields ``h = Phi w`` with prior ``w ~ N(0, I_d)`` and Gaussian sites
``exp(-tau_i h_i**2 / 2 + nu_i h_i)`` the posterior of the weights is
``N(A^-1 Phi^T nu, A^-1)`` with the ``d x d`` precision
``A = I + Phi^T diag(tau) Phi``.  Every quantity the TAP / EP loop needs is a
product with the ``n x d`` matrix ``Phi``:

* ``A`` itself, accumulated over blocks of rows (``O(n d^2)`` BLAS work);
* one Cholesky factor ``A = L L^T`` (``O(d^3)``);
* the marginal variances ``var_i = |L^-1 phi_i|^2`` (``O(n d^2)``, never
  negative) and means ``<h> = Phi <w>`` (``O(n d)``).

No ``n x n`` object is formed, so a sweep costs ``O(n d^2)`` time and
``O(n d)`` memory however many samples there are.  This is the
regime of many more samples than weights, ``alpha = n / d`` large, of Opper
and Winther's perceptron; the kernel form ``K = Phi Phi^T`` of
:class:`~sklearn_meanfield.tap._posterior.KernelPosterior` is the other one.

Both signs of ``tau`` are allowed (label noise gives negative site
precisions); ``A`` must stay positive definite, otherwise ``LinAlgError`` is
raised and the EP driver shortens its step.

References
----------
.. [1] C. E. Rasmussen and C. K. I. Williams, "Gaussian Processes for Machine
   Learning", MIT Press, 2006, section 2.1 (weight-space view).
.. [2] M. Opper and O. Winther, "A mean field algorithm for Bayes learning in
   large feed-forward neural networks", NIPS 9, 1996.
"""

import numpy as np
from scipy import sparse
from scipy.linalg import blas, cholesky, solve_triangular

__all__ = ["WeightSpacePosterior"]

# Rows per block of the O(n d^2) products: a block of Phi (and its image)
# stays in cache while it is scaled, multiplied and reduced.
_BLOCK_BYTES = 2**21


def _dense(block):
    """A block of rows as a dense array (sparse inputs are densified per
    block: the ``d x d`` products are dense anyway)."""
    return block.toarray() if sparse.issparse(block) else block


def _row_norms_squared(Phi):
    if sparse.issparse(Phi):
        return np.asarray(Phi.multiply(Phi).sum(axis=1), dtype=float).ravel()
    return np.einsum("ij,ij->i", Phi, Phi)


def _row_blocks(n_rows, n_cols):
    size = max(64, _BLOCK_BYTES // (8 * max(n_cols, 1)))
    return [slice(start, min(start + size, n_rows)) for start in range(0, n_rows, size)]


class _WeightSpaceSolution:
    """Posterior of the weights, ``N(weight_mean, A^-1)``, ``A = I + Phi^T S Phi``.

    Attributes ``mean``, ``var`` (of the fields at the training rows),
    ``weight_mean`` and ``logdet = log|A| = log|I + K S|`` (Sylvester).
    """

    def __init__(self, Phi, tau, nu):
        n, d = Phi.shape
        blocks = _row_blocks(n, d)
        precision = np.eye(d)
        for rows in blocks:
            block = _dense(Phi[rows])
            precision += (tau[rows, None] * block).T @ block
        self._chol = cholesky(precision, lower=True, check_finite=False)
        # L^-1 once (d x d); each block of variances is then one product.
        self._chol_inv = solve_triangular(
            self._chol, np.eye(d), lower=True, check_finite=False
        )
        self.var = np.empty(n)
        for rows in blocks:
            self.var[rows] = self.field_variance(Phi[rows])
        projected_mean = self._chol_inv @ (Phi.T @ nu)
        self.weight_mean = self._chol_inv.T @ projected_mean
        self.mean = Phi @ self.weight_mean
        self.logdet = 2.0 * np.sum(np.log(np.diag(self._chol)))

    def field_variance(self, Phi_new):
        """Posterior variance of ``Phi_new @ w`` row by row, ``|L^-1 phi|^2``.

        ``L^-1`` is triangular: ``trmm`` does half the flops of a general
        product.
        """
        if sparse.issparse(Phi_new):
            Phi_new = sparse.csr_array(Phi_new)
            variance = np.empty(Phi_new.shape[0])
            for rows in _row_blocks(*Phi_new.shape):
                variance[rows] = self.field_variance(Phi_new[rows].toarray())
            return variance
        projected = blas.dtrmm(1.0, self._chol_inv, Phi_new.T, lower=1)
        return np.einsum("ij,ij->j", projected, projected)

    def release(self):
        """Nothing to drop: ``L^-1`` (d x d) is what prediction needs."""


class WeightSpacePosterior:
    """The Gaussian posterior of a linear model's fields, in weight space.

    Fields ``h = Phi w`` with prior ``w ~ N(0, I)``, i.e. the kernel
    ``K = Phi Phi^T`` without ever forming it: a sweep costs ``O(n d^2)``
    BLAS work for ``n`` samples and ``d`` weights, and memory ``O(n d)``.

    Parameters
    ----------
    Phi : ndarray or sparse matrix of shape (n, d)
        Rows are the (scaled) inputs of the training points.  A sparse
        ``Phi`` is kept sparse (CSR) and densified one block of rows at a
        time for the ``d x d`` products.

    Attributes
    ----------
    prior_var : ndarray of shape (n,)
        Prior variance of each field, ``|phi_i|^2``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.tap._weight_space import WeightSpacePosterior
    >>> rng = np.random.RandomState(0)
    >>> Phi = rng.randn(200, 3)
    >>> tau, nu = rng.rand(200), rng.randn(200)
    >>> solution = WeightSpacePosterior(Phi).solve(tau, nu)
    >>> # The same marginals from the n x n kernel form (K^-1 + S)^-1:
    >>> K = Phi @ Phi.T + 1e-9 * np.eye(200)
    >>> Sigma = np.linalg.inv(np.linalg.inv(K) + np.diag(tau))
    >>> bool(np.allclose(solution.var, np.diag(Sigma), atol=1e-6))
    True
    >>> bool(np.allclose(solution.mean, Sigma @ nu, atol=1e-6))
    True
    """

    def __init__(self, Phi):
        if sparse.issparse(Phi):
            Phi = sparse.csr_array(Phi)  # row blocks and subsets
        self.Phi = Phi
        self.prior_var = _row_norms_squared(Phi)

    @property
    def n(self):
        """Number of training points."""
        return self.Phi.shape[0]

    def matvec(self, alpha):
        """``K @ alpha = Phi (Phi^T alpha)`` in ``O(n d)``."""
        return self.Phi @ (self.Phi.T @ alpha)

    def subset(self, index):
        """The posterior object of the training points ``index`` only."""
        return WeightSpacePosterior(self.Phi[index])

    def solve(self, tau, nu):
        """Posterior marginals for sites ``(tau, nu)``.

        Same contract as :meth:`KernelPosterior.solve
        <sklearn_meanfield.tap._posterior.KernelPosterior.solve>`: an object with
        ``mean``, ``var``, ``logdet`` and, here, ``weight_mean`` and
        ``field_variance(Phi_new)``.  Raises ``LinAlgError`` when
        ``I + Phi^T diag(tau) Phi`` is not positive definite.
        """
        return _WeightSpaceSolution(self.Phi, tau, nu)
