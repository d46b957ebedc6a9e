"""Stochastic EP: the sparse GP's hyperparameter search in minibatches.

A full-batch search solves EP over all ``n`` rows at every evaluation of the
evidence, and L-BFGS-B needs tens to hundreds of evaluations; above about
10^5 rows the search, not EP, is the cost.  Here the sites and the
hyperparameters move together, a minibatch of ``b`` rows at a time, in
``O(b m^2 + m^3)`` per step whatever ``n`` (Hernandez-Lobato and
Hernandez-Lobato's scalable EP classifier; Li, Hernandez-Lobato and Turner's
stochastic EP):

* **State.**  Every row keeps its own site ``(tau_i, nu_i)`` on its field
  (``2 n`` numbers), and the sums that define the posterior of the whitened
  inducing values ``w`` (:mod:`._sparse`): ``P = sum_i g_i u_i u_i^T`` and
  ``s = sum_i h_i u_i``, so ``q(w) = N(A^-1 s, A^-1)`` with ``A = I + P``.
  Sites are not tied: at fixed hyperparameters the iteration is EP with a
  minibatch schedule, and its fixed point is full-batch EP's.
* **Site step.**  The minibatch's cavities come from ``q`` with each row's
  own site removed; the moment-matched sites are taken with the EP
  damping, and the minibatch's terms of ``P`` and ``s`` are replaced
  (:func:`minibatch_site_update`).
* **Hyperparameter step.**  At an EP fixed point the evidence's gradient is
  the explicit one at fixed sites (:func:`~._sparse.fitc_evidence_adjoints`):
  a sum over rows plus a term of ``q`` alone.  The minibatch's rows, scaled
  by ``n / b``, with the global term from ``q``, are an unbiased estimate of
  it (a partition's estimates average to the full gradient exactly,
  :func:`minibatch_gradient`).  Adam takes the step, in the search space of
  the full-batch fit (log-hyperparameters, log label noise, inducing
  inputs), within its bounds.
* **Staleness.**  ``P`` and ``s`` hold each row's term at the
  hyperparameters of its last visit.  They are kept in the coordinates of
  the inducing values, ``L^-T P L^-1`` and ``L^-T s``: what a site says
  about the field at the inducing inputs does not change with the kernel's
  amplitude, so a kept term stays close.  An epoch recomputes every row's
  term (:func:`site_statistics`, an ``O(n m^2)`` pass) when the point has
  moved by :data:`REFRESH_MOVE` since they last were, and whenever it has
  moved when the inducing inputs are learned: what a term says about the
  field at the inducing inputs changes as they move.

From zero sites the first epoch moves the sites only (it is EP's first
sweep), so that the gradient starts from a posterior that has seen every
row; given sites (a converged fit's) it moves both from the start.  The
search ends when the mean point of a window of epochs (at least
:data:`MIN_WINDOW_STEPS` steps) moves by less than :data:`POINT_TOL` (root
mean square over the coordinates: log-hyperparameters, inducing inputs in
units of the inputs' spread) from the last window's, and the window's
gradients have no significant direction (a window without one halves
Adam's step), or after :data:`MAX_EPOCHS`
epochs (:data:`MAX_STEPS` steps when the epochs have few); the fit then
solves full-batch EP at that point, so the evidence, predictions and
leave-one-out keep their exact meaning.

**Inducing inputs.**  A row's site is matched to the inducing inputs once
an epoch, so the inputs may move by at most :data:`INDUCING_EPOCH_MOVE` of
their unit an epoch (Adam's step for them shrinks with the minibatches an
epoch has); further, the sites lag behind and the search diverges.
Learning them, the search is scored on held-out rows instead: each window
ends with their Brier score under ``q`` (no extra EP), the point of lowest
score is kept, and the search ends after :data:`VALIDATION_WINDOWS`
windows without a new lowest (early stopping: FITC's evidence over-fits
the inputs, Bauer, van der Wilk and Rasmussen).  The gradients of the
inputs' many coordinates are each small against the minibatch noise while
the inputs still gain, so a window's significance says little about them.

References
----------
.. [1] D. Hernandez-Lobato and J. M. Hernandez-Lobato, "Scalable Gaussian
   process classification via expectation propagation", AISTATS 2016.
.. [2] Y. Li, J. M. Hernandez-Lobato and R. E. Turner, "Stochastic
   expectation propagation", NIPS 28, 2015.
.. [3] D. P. Kingma and J. Ba, "Adam: a method for stochastic optimization",
   ICLR 2015.
.. [4] M. Bauer, M. van der Wilk and C. E. Rasmussen, "Understanding
   probabilistic sparse Gaussian process approximations", NIPS 29, 2016.
"""

from typing import NamedTuple

import numpy as np
from scipy.linalg import LinAlgError, solve_triangular

from ._sparse import (
    RowBlock,
    _blocks,
    _effective_sites,
    _gradient_task,
    _weighted_gram,
    add_inducing_share,
    adjoint_start,
    block_marginals,
    block_site_statistics,
    combine_site_statistics,
    inducing_cholesky,
    whiten_block,
)
from ._sweep import tilted_variance_ratio
from ._weights import tilted_sites

__all__ = [
    "BATCH_SIZE",
    "LEARNING_RATE",
    "MAX_EPOCHS",
    "POINT_TOL",
    "Adam",
    "MinibatchSites",
    "minibatch_gradient",
    "minibatch_site_update",
    "site_statistics",
    "stochastic_search",
]

# Rows a minibatch: at m = 256 a step's O(b m^2) work is then about the
# O(m^3) factorisations it repeats, and the gradient's noise is small
# enough for Adam's default step.
BATCH_SIZE = 2048
# The convergence rule looks at windows of whole epochs of at least this
# many steps: enough for the gradient's standard error, and for Adam to
# carry the point 0.2 across a window.
MIN_WINDOW_STEPS = 20
# Adam's step in the log-hyperparameters (a factor exp(0.05) at most per
# step); the inducing inputs' step is this times each input's spread.
LEARNING_RATE = 0.01
# The search ends when a window's mean point moved by no more than this
# from the last window's (root mean square over the coordinates, in the
# units above; the inducing inputs' many coordinates each jitter), and
# its gradients have no significant direction (_gradient_significance) ...
POINT_TOL = 0.01
# An epoch starts by recomputing every row's term of the statistics at the
# current point when it has moved this far from where they were last
# computed (near the optimum the terms kept from the last visits match);
# with the inducing inputs learned, when it has moved at all (at 200,000
# rows, epochs on kept terms let the inputs bunch up and the length scale
# double within two epochs).
REFRESH_MOVE = 0.1
# ... or after this many epochs, or MAX_STEPS minibatch steps when the
# epochs have few.
MAX_EPOCHS = 40
MAX_STEPS = 2000
# The inducing inputs' largest move an epoch, in their unit: at 180,000
# rows (88 minibatches) Adam's full step, up to 0.88 an epoch, left the
# sites behind and diverged; 0.2 an epoch did not.
INDUCING_EPOCH_MOVE = 0.2
# Scored on held-out rows, the search ends after this many windows without
# a new lowest score (each at least an epoch and MIN_WINDOW_STEPS steps).
VALIDATION_WINDOWS = 5


class MinibatchSites(NamedTuple):
    """A minibatch's new sites and the cavities they were matched to."""

    tau: np.ndarray
    nu: np.ndarray
    cavity_mean: np.ndarray
    cavity_var: np.ndarray
    site_power: object
    tilted: object


def site_statistics(X, kernel, Z, chol_mm, tau, nu, block_size):
    """``P = sum_i g_i u_i u_i^T`` and ``s = sum_i h_i u_i`` over all rows.

    Parameters
    ----------
    X : ndarray of shape (n, n_features)
    kernel : scikit-learn kernel
    Z : ndarray of shape (m, n_features)
    chol_mm : ndarray of shape (m, m)
        From :func:`~._sparse.inducing_cholesky` of ``kernel(Z)``.
    tau, nu : ndarray of shape (n,)
        The sites.
    block_size : int
        Rows whitened at a time.

    Returns
    -------
    precision : ndarray of shape (m, m)
    shift : ndarray of shape (m,)
    """
    m = len(Z)
    precision, shift = np.zeros((m, m)), np.zeros(m)
    for block in _blocks(len(X), block_size):
        U_b, d_b = whiten_block(kernel(X[block], Z), kernel.diag(X[block]), chol_mm)
        block_precision, block_shift, _ = block_site_statistics(
            U_b, d_b, tau[block], nu[block]
        )
        precision += block_precision
        shift += block_shift
    return precision, shift


def minibatch_site_update(
    U_b, d_b, tau_b, nu_b, t_b, weights_b, likelihood, chol_A, mean_w, damping
):
    """EP's damped site update for a minibatch of rows.

    Each cavity removes one copy of the row's own site from the posterior
    ``N(A^-1 s, A^-1)``; the moment-matched site replaces a ``damping``
    share of the old one.  A row whose cavity is improper, whose update is
    not finite or would leave ``1 + d_i tau_i <= 0`` keeps its site.

    Parameters
    ----------
    U_b, d_b : ndarray of shape (b, m) and (b,)
        The rows' whitened cross-covariances and FITC diagonal.
    tau_b, nu_b : ndarray of shape (b,)
        Their sites.
    t_b : ndarray of shape (b,)
        Labels +-1.
    weights_b : ndarray of shape (b,) or None
        Site weights (``sample_weight``; None: all one).
    likelihood : object
    chol_A, mean_w
        From :func:`~._sparse.combine_site_statistics`.
    damping : float in (0, 1]

    Returns
    -------
    MinibatchSites
    """
    mean, var, _ = block_marginals(U_b, d_b, tau_b, nu_b, chol_A, mean_w)
    site_power, tilted = tilted_sites(likelihood, weights_b, 1.0)
    cavity_tau = 1.0 / var - site_power * tau_b
    cavity_nu = mean / var - site_power * nu_b
    valid = cavity_tau > 0
    cavity_var = np.where(valid, 1.0 / np.where(valid, cavity_tau, 1.0), 1.0)
    cavity_mean = cavity_nu * cavity_var
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        _, first, second = tilted.moments(t_b, cavity_mean, cavity_var)
        denominator = site_power * tilted_variance_ratio(cavity_var, second)
        new_tau = tau_b + damping * (second / denominator - tau_b)
        new_nu = nu_b + damping * ((first + cavity_mean * second) / denominator - nu_b)
    valid &= np.isfinite(new_tau) & np.isfinite(new_nu) & (1.0 + d_b * new_tau > 0)
    return MinibatchSites(
        np.where(valid, new_tau, tau_b),
        np.where(valid, new_nu, nu_b),
        cavity_mean,
        cavity_var,
        site_power,
        tilted,
    )


def minibatch_gradient(block, tau_b, nu_b, chol_A, mean_w, chol_mm, kernel, Z,
                       scale, inducing=False):  # fmt: skip
    """Estimate of the EP evidence's gradient from a minibatch of rows.

    The full gradient (:func:`~._sparse.fitc_search_gradient`) is a sum of
    the rows' shares plus ``K_mm``'s share, whose adjoint is ``-1/2 L^-T
    (m_w m_w^T + A + A^-1 - 2 I - sum_i r_i u_i u_i^T) L^-1``.  Here the
    rows' shares and their ``r_i u_i u_i^T`` come from the minibatch,
    multiplied by ``scale``; with ``scale = n / b`` for a uniformly drawn
    minibatch the estimate is unbiased, and the estimates of a partition of
    the rows, each weighted by ``b / n``, add up to the full gradient
    exactly (the adjoint is linear in the rows' terms).

    Parameters
    ----------
    block : RowBlock
        The minibatch's ``U``, ``d`` and inputs.
    tau_b, nu_b : ndarray of shape (b,)
        Its sites.
    chol_A, mean_w
        The posterior of the whitened inducing values.
    chol_mm : ndarray of shape (m, m)
    kernel : scikit-learn kernel
    Z : ndarray of shape (m, n_features)
    scale : float
    inducing : bool, default=False
        Also the gradient in ``Z``.

    Returns
    -------
    theta_gradient : ndarray of shape (n_params,)
    Z_gradient : ndarray of shape (m, n_features) or None
    """
    A_inv, inner = adjoint_start(chol_A, mean_w)
    theta, Z_part, statistic = _gradient_task(
        block, tau_b, nu_b, mean_w, A_inv, chol_mm, kernel, Z, inducing
    )
    inner -= scale * statistic
    Z_part = None if Z_part is None else scale * Z_part
    return add_inducing_share(scale * theta, Z_part, inner, chol_mm, kernel, Z)


class Adam:
    """Adam's ascent steps (Kingma and Ba), one learning rate per coordinate.

    Parameters
    ----------
    learning_rate : ndarray of shape (n_params,)
    beta1, beta2, eps : float
        Adam's defaults.

    Examples
    --------
    Adam's first step moves every coordinate by its learning rate, in the
    direction of the gradient:

    >>> import numpy as np
    >>> adam = Adam(np.array([0.1, 0.5]))
    >>> adam.step(np.zeros(2), np.array([3.0, -0.01])).round(6).tolist()
    [0.1, -0.5]
    """

    def __init__(self, learning_rate, beta1=0.9, beta2=0.999, eps=1e-8):
        self.learning_rate = np.asarray(learning_rate, dtype=float)
        self.beta1, self.beta2, self.eps = beta1, beta2, eps
        self.first = np.zeros_like(self.learning_rate)
        self.second = np.zeros_like(self.learning_rate)
        self.steps = 0

    def step(self, point, gradient):
        """The next point, from ``point`` up the ``gradient``."""
        self.steps += 1
        self.first = self.beta1 * self.first + (1 - self.beta1) * gradient
        self.second = self.beta2 * self.second + (1 - self.beta2) * gradient**2
        first = self.first / (1 - self.beta1**self.steps)
        second = self.second / (1 - self.beta2**self.steps)
        return point + self.learning_rate * first / (np.sqrt(second) + self.eps)


class StochasticRun(NamedTuple):
    """Where a stochastic search ended: the mean point of its last epoch, the
    sites, the epochs run, whether its rule stopped it (not the budget) and
    whether a callback asked to stop."""

    point: np.ndarray
    tau: np.ndarray
    nu: np.ndarray
    epochs: int
    converged: bool
    stopped: bool


def _to_inducing_values(chol_mm, precision, shift):
    """The site statistics in the coordinates of the inducing values
    ``u = L w``: ``L^-T P L^-1`` and ``L^-T s``.  What the sites say about
    the field at the inducing inputs does not change with the kernel's
    amplitude, so rows' terms kept from older hyperparameters stay close."""
    half = solve_triangular(
        chol_mm, precision, lower=True, trans="T", check_finite=False
    )
    precision_u = solve_triangular(
        chol_mm, half.T, lower=True, trans="T", check_finite=False
    )
    shift_u = solve_triangular(
        chol_mm, shift, lower=True, trans="T", check_finite=False
    )
    return 0.5 * (precision_u + precision_u.T), shift_u


def _to_whitened(chol_mm, precision_u, shift_u):
    """Inverse of :func:`_to_inducing_values`: ``L^T P_u L`` and ``L^T s_u``."""
    half = chol_mm.T @ precision_u
    precision = half @ chol_mm
    return 0.5 * (precision + precision.T), chol_mm.T @ shift_u


def _gradient_significance(gradient_sum, gradient_squares, steps):
    """The largest ``|mean| / standard error`` of an epoch's gradients.

    An epoch's minibatches partition the rows, so their mean is the full
    gradient (at the points the epoch passed); its size in units of the
    minibatch noise tells whether Adam's steps still have a direction."""
    mean = gradient_sum / steps
    var = np.maximum(gradient_squares / steps - mean**2, 0.0) * steps / (steps - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.abs(mean) / np.sqrt(var / steps)
    return float(np.max(np.where(mean == 0, 0.0, ratio)))


def _significance_threshold(n_params):
    """About the largest of ``n_params`` standard normal magnitudes, and at
    least 2: with no direction left, the significance of
    :func:`_gradient_significance` stays below it."""
    return max(2.0, float(np.sqrt(2.0 * np.log(2.0 * n_params))))


def _label_noise_gradient(sites, t_b):
    """The minibatch's ``sum_i d log Z_i / d kappa`` at its cavities."""
    per_copy = sites.tilted.label_noise_gradient(
        t_b, sites.cavity_mean, sites.cavity_var
    )
    return float(np.sum(per_copy / sites.site_power))


def _epoch_budget(n, batch_size, max_epochs):
    """The minibatches of an epoch, and the epochs a search may run:
    ``MAX_EPOCHS``, or enough for ``MAX_STEPS`` minibatch steps on small
    data, and at most ``max_epochs`` (None: no more limit)."""
    n_batches = -(-n // batch_size)
    budget = max(MAX_EPOCHS, -(-MAX_STEPS // n_batches))
    return n_batches, budget if max_epochs is None else min(budget, max_epochs)


def _all_rows_information(X, kernel, Z, chol_mm, tau, nu, batch_size):
    """Every row's sites summed, in the coordinates of the inducing values."""
    precision, shift = site_statistics(X, kernel, Z, chol_mm, tau, nu, batch_size)
    return _to_inducing_values(chol_mm, precision, shift)


def _update_minibatch(U_b, d_b, tau_b, nu_b, t_b, w_b, likelihood, chol_mm,
                      information, damping):  # fmt: skip
    """EP's update of a minibatch's sites against ``information``, the sum
    of every row's sites (in inducing-value coordinates).

    Returns the new sites, the whitened precision and shift with the
    minibatch's terms replaced, and the factor and mean of ``q`` they give.
    Raises LinAlgError when the rows' terms no longer make a proper ``q``.
    """
    precision, shift = _to_whitened(chol_mm, *information)
    chol_A, mean_w, _ = combine_site_statistics(precision, shift, 0.0)
    sites = minibatch_site_update(
        U_b, d_b, tau_b, nu_b, t_b, w_b, likelihood, chol_A, mean_w, damping
    )
    _, g_old, h_old = _effective_sites(d_b, tau_b, nu_b)
    _, g_new, h_new = _effective_sites(d_b, sites.tau, sites.nu)
    precision = precision + _weighted_gram(U_b, g_new - g_old)
    shift = shift + U_b.T @ (h_new - h_old)
    chol_A, mean_w, _ = combine_site_statistics(precision, shift, 0.0)
    return sites, precision, shift, chol_A, mean_w


def _search_gradient(block, sites, t_b, chol_A, mean_w, chol_mm, kernel, Z,
                     likelihood, scale, learns_label_noise,
                     learns_inducing):  # fmt: skip
    """The minibatch's estimate of the evidence's gradient over the search
    space: kernel, then label noise and inducing inputs when learned."""
    theta_gradient, Z_gradient = minibatch_gradient(
        block, sites.tau, sites.nu, chol_A, mean_w, chol_mm, kernel, Z, scale,
        learns_inducing,
    )  # fmt: skip
    gradient = [theta_gradient]
    if learns_label_noise:
        kappa = likelihood.label_noise
        gradient.append([scale * kappa * _label_noise_gradient(sites, t_b)])
    if learns_inducing:
        gradient.append(Z_gradient.ravel())
    return np.concatenate(gradient)


class _Window:
    """The steps of a window of epochs: the sum of their points and of their
    gradients (in the coordinates' units) and of the gradients' squares."""

    def __init__(self, n_params):
        self.point_sum = np.zeros(n_params)
        self.gradient_sum = np.zeros(n_params)
        self.gradient_squares = np.zeros(n_params)
        self.steps = 0

    def add(self, point, gradient):
        self.gradient_sum += gradient
        self.gradient_squares += gradient**2
        self.point_sum += point
        self.steps += 1

    def close(self, mean_point, scales):
        """The window's mean point, how far it moved from the last window's
        ``mean_point`` (root mean square, in units) and the significance of
        its gradients."""
        moved = np.inf
        if mean_point is not None:
            move = (self.point_sum / self.steps - mean_point) / scales
            moved = float(np.sqrt(np.mean(move**2)))
        significance = _gradient_significance(
            self.gradient_sum, self.gradient_squares, self.steps
        )
        return self.point_sum / self.steps, moved, significance


class _Validation:
    """The held-out score of ``q`` at each window's end, and the point and
    sites of the lowest so far."""

    def __init__(self, score):
        self.score = score
        self.held = None
        self.best = None
        self.last = self.lowest = np.inf
        self.since_lowest = 0

    def hold(self, point, *q):
        """Keep the last step's ``q`` and the point it belongs to."""
        self.held = point.copy(), q

    def close(self, tau, nu):
        """Score the held ``q``; returns the windows since the lowest score."""
        point, q = self.held
        self.last = float(self.score(*q))
        if self.last < self.lowest:
            self.lowest, self.since_lowest = self.last, 0
            self.best = point, tau.copy(), nu.copy()
        else:
            self.since_lowest += 1
        return self.since_lowest


def stochastic_search(start, bounds, scales, at, X, t, weights, *, jitter, damping,
                      learns_label_noise, learns_inducing, seed, task=None,
                      printer=None, batch_size=BATCH_SIZE, max_epochs=None,
                      sites=None, validation=None):  # fmt: skip
    """Stochastic EP over the sites and the search space's point together.

    Parameters
    ----------
    start : ndarray of shape (n_params,)
        The starting point: the kernel's log-hyperparameters, then
        ``log(label_noise)`` when ``learns_label_noise``, then the raveled
        inducing inputs when ``learns_inducing``.
    bounds : ndarray of shape (n_params, 2)
    scales : ndarray of shape (n_params,)
        Each coordinate's unit: Adam's step is ``LEARNING_RATE * scales``
        and the gradient's significance is measured in it.
    at : callable
        ``at(point) -> (kernel, likelihood, Z)``.
    X : ndarray of shape (n, n_features)
    t : ndarray of shape (n,)
        Labels +-1.
    weights : ndarray of shape (n,) or None
    jitter : float
        Relative nugget of ``K_mm``.
    damping : float in (0, 1]
        EP's damping of the site updates.
    learns_label_noise, learns_inducing : bool
    seed : int
        Seed of the minibatches' order.
    task : CallbackTask or None, default=None
        A step per minibatch; a request to stop ends the search there.
    printer : callable or None, default=None
        ``printer(level, message, *args)``: a line per epoch at level 1.
    batch_size : int, default=BATCH_SIZE
    max_epochs : int or None, default=None
        At most this many epochs (the estimator's ``max_iter``, an epoch
        being a sweep over the sites); None: the budget alone.
    sites : tuple of ndarray of shape (n,) or None, default=None
        The sites ``(tau, nu)`` to start from (None: zero).
    validation : callable or None, default=None
        ``validation(kernel, likelihood, Z, chol_mm, chol_A, mean_w) ->
        float``, a held-out score of ``q`` (lower is better): the search
        returns the point and sites of lowest score, and ends after
        :data:`VALIDATION_WINDOWS` windows without a new lowest.

    Returns
    -------
    StochasticRun
    """
    rng = np.random.RandomState(seed)
    X = np.asarray(X, dtype=float)
    n = len(X)
    point = np.array(start, dtype=float)
    n_batches, max_epochs = _epoch_budget(n, batch_size, max_epochs)
    m = len(at(point)[2])
    learning_rate = LEARNING_RATE * np.asarray(scales, dtype=float)
    if learns_inducing:
        inputs = slice(len(point) - m * X.shape[1], None)
        learning_rate[inputs] *= min(
            1.0, INDUCING_EPOCH_MOVE / (LEARNING_RATE * n_batches)
        )
    adam = Adam(learning_rate)
    mean_point = None
    converged = stopped = False
    refreshed_at = point.copy()
    if sites is None:
        tau, nu = np.zeros(n), np.zeros(n)
        information = np.zeros((m, m)), np.zeros(m)  # zero sites: no statistics
        sites_only_epochs = 1
    else:
        tau, nu = (np.array(site, dtype=float) for site in sites)
        information = None  # the first epoch computes the sites' statistics
        sites_only_epochs = 0
    watch = None if validation is None else _Validation(validation)
    window = _Window(len(point))
    for epoch in range(max_epochs):
        kernel, likelihood, Z = at(point)
        chol_mm, _ = inducing_cholesky(kernel(Z), jitter)
        moved = np.max(np.abs(point - refreshed_at) / scales)
        if (
            information is None
            or moved > REFRESH_MOVE
            or (learns_inducing and moved > 0)
        ):
            information = _all_rows_information(
                X, kernel, Z, chol_mm, tau, nu, batch_size
            )
            refreshed_at = point.copy()
        for rows in np.array_split(rng.permutation(n), n_batches):
            rows = np.sort(rows)
            if epoch >= sites_only_epochs:
                kernel, likelihood, Z = at(point)
                chol_mm, _ = inducing_cholesky(kernel(Z), jitter)
            X_b, t_b = X[rows], t[rows]
            w_b = None if weights is None else weights[rows]
            U_b, d_b = whiten_block(kernel(X_b, Z), kernel.diag(X_b), chol_mm)
            try:
                sites, precision, shift, chol_A, mean_w = _update_minibatch(
                    U_b, d_b, tau[rows], nu[rows], t_b, w_b, likelihood, chol_mm,
                    information, damping,
                )  # fmt: skip
            except LinAlgError:
                # The rows' terms from older hyperparameters no longer match
                # (improper q): recompute every row's term here.
                information = _all_rows_information(
                    X, kernel, Z, chol_mm, tau, nu, batch_size
                )
                refreshed_at = point.copy()
                continue
            information = _to_inducing_values(chol_mm, precision, shift)
            tau[rows], nu[rows] = sites.tau, sites.nu
            if epoch < sites_only_epochs:
                continue
            if watch is not None:  # q and its point, before the step
                watch.hold(point, kernel, likelihood, Z, chol_mm, chol_A, mean_w)
            gradient = _search_gradient(
                RowBlock(U_b, d_b, X_b), sites, t_b, chol_A, mean_w, chol_mm,
                kernel, Z, likelihood, n / len(rows), learns_label_noise,
                learns_inducing,
            )  # fmt: skip
            if not np.all(np.isfinite(gradient)):
                continue
            point = np.clip(adam.step(point, gradient), bounds[:, 0], bounds[:, 1])
            window.add(point, gradient * scales)
            if task is not None and task.step("minibatch"):
                stopped = True
                break
        if window.steps >= MIN_WINDOW_STEPS:  # a window of epochs ends
            if watch is not None:  # scored on held-out rows
                converged = watch.close(tau, nu) >= VALIDATION_WINDOWS
                if printer is not None:
                    printer(
                        1,
                        "stochastic EP epoch %d: %d steps, held-out score %.5g "
                        "(lowest %.5g, %d windows ago)",
                        epoch + 1,
                        window.steps,
                        watch.last,
                        watch.lowest,
                        watch.since_lowest,
                    )
            else:
                mean_point, moved, significance = window.close(mean_point, scales)
                if printer is not None:
                    printer(
                        1,
                        "stochastic EP epoch %d: %d steps, window mean moved "
                        "%.3g, gradient significance %.3g, exp of its first "
                        "coordinates [%s]",
                        epoch + 1,
                        window.steps,
                        moved,
                        significance,
                        ", ".join(f"{x:.4g}" for x in np.exp(mean_point[:4])),
                    )
                aimless = significance < _significance_threshold(len(point))
                converged = aimless and moved < POINT_TOL
                if aimless:
                    # The steps follow the minibatches' noise: smaller ones
                    # bring the mean point to rest.
                    adam.learning_rate *= 0.5
            window = _Window(len(point))
        if stopped or converged:
            break
    if watch is not None and watch.best is not None:
        point, tau, nu = watch.best
        return StochasticRun(point, tau, nu, epoch + 1, converged, stopped)
    final = point if mean_point is None else mean_point
    return StochasticRun(final, tau, nu, epoch + 1, converged, stopped)
