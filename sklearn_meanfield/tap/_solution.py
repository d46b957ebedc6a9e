"""The result of a TAP / EP solve, shared by both solvers."""

from dataclasses import dataclass, field

import numpy as np

__all__ = ["TAPSolution"]


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
    >>> from sklearn_meanfield.tap._ep import expectation_propagation
    >>> from sklearn_meanfield.tap._posterior import KernelPosterior
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
