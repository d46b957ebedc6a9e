"""The EP approximation of the log evidence and its gradients.

The evidence is written from elementwise site terms plus ``log|I + K S|``, so
it holds for every posterior representation and for site precisions of
either sign; at a fixed point it is stationary in the sites, which makes its
gradients in the kernel and in the label noise cheap (NOTES.md section 1;
Rasmussen and Williams (2006), section 3.6 and eq. 5.27).
"""

import numpy as np

from ._weights import tilted_sites

__all__ = ["ep_evidence_gradient", "ep_label_noise_gradient", "ep_log_evidence"]


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
    A Gaussian likelihood ``N(y_i; h_i, s2)`` is its own site, ``tau = 1 / s2``
    and ``nu = y / s2``, so EP is exact and the value is the marginal
    likelihood of Gaussian-process regression, ``log N(y; 0, K + s2 I)``
    (:attr:`TAPSolution.log_evidence` is this function's value):

    >>> import numpy as np
    >>> from scipy.stats import multivariate_normal, norm
    >>> from sklearn_meanfield.tap._posterior import KernelPosterior
    >>> K = np.array([[1.0, 0.6, 0.2], [0.6, 1.0, 0.6], [0.2, 0.6, 1.0]])
    >>> y, s2 = np.array([0.5, -0.3, 1.2]), 0.1
    >>> tau, nu = np.full(3, 1 / s2), y / s2
    >>> posterior = KernelPosterior(K).solve(tau, nu)
    >>> cavity_tau = 1 / posterior.var - tau
    >>> cavity_mean = (posterior.mean / posterior.var - nu) / cavity_tau
    >>> log_z = norm.logpdf(y, cavity_mean, np.sqrt(1 / cavity_tau + s2))
    >>> value = ep_log_evidence(
    ...     log_z, tau, nu, cavity_mean, cavity_tau,
    ...     posterior.mean, posterior.var, posterior.logdet)
    >>> exact = multivariate_normal(np.zeros(3), K + s2 * np.eye(3)).logpdf(y)
    >>> bool(abs(value - exact) < 1e-9)
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
    >>> from sklearn_meanfield.tap._ep import expectation_propagation
    >>> from sklearn_meanfield.tap._evidence import ep_evidence_gradient
    >>> from sklearn_meanfield.tap._posterior import KernelPosterior
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
    >>> from sklearn_meanfield.tap._ep import expectation_propagation
    >>> from sklearn_meanfield.tap._evidence import ep_label_noise_gradient
    >>> from sklearn_meanfield.tap._posterior import KernelPosterior
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
    beta, tilted = tilted_sites(
        likelihood, solution.site_weights, 1.0, solution.weights_below_power
    )
    per_copy = tilted.label_noise_gradient(
        t, solution.copy_cavity_mean, solution.copy_cavity_var
    )
    return float(np.sum(per_copy / beta))
