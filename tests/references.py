"""Plain reference implementations that the tests compare the library against.

Each is the textbook form of a computation that the library writes for speed
(in place, batched, or from statistics it already holds): the tests check that
the fast form gives the same numbers.
"""

import numpy as np
from scipy.special import expit

from sklearn_meanfield.variational._erf_network import (
    negative_bound,
    reestimate_from_stats,
)


def relaxed_sweep(weights, weights_sq, visible_bias, hidden_bias, state, damping):
    """One sweep of the TAP iteration: hidden means, then visible means.

    The arithmetic of ``sklearn_meanfield.bethe._relaxed.relaxed_iterate``
    (and of ``augmented_sweeps``), one new array per step: with
    ``var = m (1 - m)``,
    ``m_h <- sigmoid(c + W m_v - (m_h - 1/2) W**2 var_v)``, then
    ``m_v <- sigmoid(b + W^T m_h - (m_v - 1/2) W**2^T var_h)``, each mixed
    with ``damping`` times its previous value.

    Returns ``((mean_visible, mean_hidden), delta)``, ``delta`` the largest
    change of a mean; ``state`` is not modified.
    """
    m_v, m_h = state
    var_v = m_v * (1.0 - m_v)
    new_h = expit(hidden_bias + weights @ m_v - (m_h - 0.5) * (weights_sq @ var_v))
    if damping:
        new_h = (1.0 - damping) * new_h + damping * m_h
    var_h = new_h * (1.0 - new_h)
    new_v = expit(visible_bias + new_h @ weights - (m_v - 0.5) * (var_h @ weights_sq))
    if damping:
        new_v = (1.0 - damping) * new_v + damping * m_v
    delta = max(np.max(np.abs(new_h - m_h)), np.max(np.abs(new_v - m_v)))
    return (new_v, new_h), float(delta)


def reestimate(theta, X1, T, shape, groups, max_precision=1e8, sample_weight=None):
    """Hyperparameters that maximise the bound at fixed ``Q``, from scratch.

    The bound's statistics at ``theta`` (``negative_bound``) handed to
    ``reestimate_from_stats``, which the fit calls with the statistics it
    already has.  Returns ``(alpha, lambda_groups)``.
    """
    _, stats = negative_bound(
        theta,
        X1,
        T,
        np.ones(shape.n_outputs),
        np.ones(shape.n_weights),
        shape,
        return_grad=False,
        return_stats=True,
        sample_weight=sample_weight,
    )
    return reestimate_from_stats(stats, stats.n_samples, groups, max_precision)


class GaussianLikelihood:
    """``p(y | h) = N(y; h, noise_var)``, whose Gaussian site is exact.

    EP with it is Gaussian-process regression, so the TAP machinery (the
    fixed point, the evidence and its gradients) can be checked against the
    regression's closed forms.  Same ``moments`` contract as the library's
    likelihoods: ``log Z`` and its first two derivatives in the cavity mean.
    """

    def __init__(self, noise_var):
        self.noise_var = float(noise_var)

    def moments(self, y, cavity_mean, cavity_var):
        from sklearn_meanfield._gaussian import LOG_SQRT_2PI

        s = cavity_var + self.noise_var
        residual = y - cavity_mean
        log_z = -0.5 * residual**2 / s - 0.5 * np.log(s) - LOG_SQRT_2PI
        first = residual / s
        second = np.full_like(first, 1.0) / s
        return log_z, first, second


def fitc_evidence_gradient(solution, K_mm_gradient, K_nm_gradient, K_nn_diag_gradient):
    """FITC-EP evidence gradient from whole derivative arrays.

    The adjoints of ``sklearn_meanfield.tap._sparse.fitc_evidence_adjoints``
    contracted with ``(m, m, p)``, ``(n, m, p)`` and ``(n, p)`` derivative
    arrays of ``K_mm``, ``K_nm`` and the prior variances; the library never
    forms the ``(n, m, p)`` array (``fitc_search_gradient``).
    """
    from sklearn_meanfield.tap._sparse import fitc_evidence_adjoints

    G_mm, G_nm, g_nn = fitc_evidence_adjoints(solution)
    m, n = G_mm.shape[0], G_nm.shape[0]
    return (
        G_mm.reshape(1, m * m) @ np.asarray(K_mm_gradient).reshape(m * m, -1)
        + G_nm.reshape(1, n * m) @ np.asarray(K_nm_gradient).reshape(n * m, -1)
        + g_nn @ np.asarray(K_nn_diag_gradient).reshape(n, -1)
    )[0]


def fitc_kernel_gradient(adjoints, kernel, X, Z, block_size=None):
    """FITC-EP evidence gradient in ``kernel.theta`` from whole adjoints.

    ``(G_mm, G_nm, g_nn)`` contracted with the kernel's derivatives: ``K_mm``'s
    from scikit-learn, the rows' by the library's block routine with
    ``block_size`` rows a block (what each block task of
    ``fitc_search_gradient`` computes on its own rows).
    """
    from sklearn_meanfield.tap._sparse import _rows_kernel_gradient

    G_mm, G_nm, g_nn = adjoints
    _, dK_mm = kernel(Z, eval_gradient=True)
    gradient = np.einsum("ij,ijk->k", G_mm, dK_mm)
    return gradient + _rows_kernel_gradient(G_nm, g_nn, kernel, X, Z, block_size)


def fitc_inducing_gradient(adjoints, K_nm_dZ, K_mm_dZ):
    """FITC-EP evidence gradient in the inducing inputs from whole arrays.

    ``z_j`` moves column ``j`` of ``K_nm`` (``K_nm_dZ[i, j] = d k(x_i, z_j) /
    d z_j``) and row and column ``j`` of the symmetric ``K_mm``
    (``K_mm_dZ[j, l] = d k(z_j, z_l) / d z_j``); the prior variances do not
    depend on it.
    """
    G_mm, G_nm, _ = adjoints
    return np.einsum("ij,ijk->jk", G_nm, K_nm_dZ) + 2.0 * np.einsum(
        "jl,jlk->jk", G_mm, K_mm_dZ
    )


def fitc_kernel_inducing_gradient(adjoints, kernel, X, Z, block_size=None):
    """FITC-EP evidence gradient in ``Z`` from whole adjoints and a kernel.

    ``K_mm``'s share and the rows' share as the library's block routines
    compute them, the rows ``block_size`` at a time.
    """
    from sklearn_meanfield.tap._sparse import (
        _inducing_mm_gradient,
        _rows_inducing_gradient,
    )

    G_mm, G_nm, _ = adjoints
    gradient = _inducing_mm_gradient(G_mm, kernel, Z)
    return gradient + _rows_inducing_gradient(G_nm, kernel, X, Z, block_size)
