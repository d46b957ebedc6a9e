"""TAP mean-field theory / expectation propagation on a Gaussian prior.

Opper and Winther's adaptive TAP equations for Gaussian-process classification
reach the same fixed point as expectation propagation (EP): every training point
carries a Gaussian *site* ``exp(-tau_i h_i**2 / 2 + nu_i h_i)``, the posterior of
the fields is ``N(mu, Sigma)`` with ``Sigma = (K^-1 + diag(tau))^-1`` and
``mu = Sigma nu``, and the *cavity* distribution of ``h_i`` (the posterior with
point ``i``'s site removed) is the leave-one-out predictive distribution of the
field.  The naive mean-field theory replaces the cavity variance by the prior
variance ``K_ii``; the 1996 perceptron paper's closure by ``1 - |<w>|^2 / N``
(:mod:`~sklearn_meanfield.tap._mean_field`).

The driver below is written once against a small *posterior* interface so that
the same code serves a kernel matrix (Gaussian-process classifier, perceptron
with fewer samples than features), a weight-space representation (perceptron
with many samples) and the sparse FITC prior.  Its step is
:func:`~sklearn_meanfield.tap._sweep.ep_sweep`, its adaptation
:class:`~sklearn_meanfield.tap._acceleration.EPAcceleration`.  Formulas:
NOTES.md section 1; Rasmussen and Williams (2006), sections 3.6 and 5.5.2.

References
----------
.. [1] M. Opper and O. Winther, "Mean field methods for classification with
   Gaussian processes", NIPS 11, 1998.
.. [2] M. Opper and O. Winther, "A mean field algorithm for Bayes learning in
   large feed-forward neural networks", NIPS 9, 1996.
.. [3] C. E. Rasmussen and C. K. I. Williams, "Gaussian Processes for Machine
   Learning", MIT Press, 2006, algorithms 3.5 and 3.6.
"""

from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np
from scipy.linalg import LinAlgError

from ._acceleration import EPAcceleration
from ._evidence import ep_log_evidence
from ._solution import TAPSolution
from ._sweep import EPState, Sweep, cavity_parameters, ep_sweep
from ._weights import check_site_weights, tilted_sites

__all__ = ["EPOptions", "expectation_propagation", "finish_ep"]


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
        :func:`tilted_sites`): integer weights are repeated points.  The
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
    >>> from sklearn_meanfield.tap._posterior import KernelPosterior
    >>> from sklearn_meanfield.tap._likelihoods import make_likelihood
    >>> x = np.array([-1.5, -0.5, 0.5, 1.5])
    >>> K = np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2)
    >>> solution = expectation_propagation(
    ...     KernelPosterior(K), np.sign(x), make_likelihood("step", 0.0))
    >>> solution.converged, bool(np.all(np.sign(solution.mean) == np.sign(x)))
    (True, True)
    """
    options = replace(options or EPOptions(), **overrides)
    w = check_site_weights(site_weights, posterior.n)
    # Per-site power of power EP (power / w removes one copy of a weighted
    # site) and the likelihood of the tilted distributions.
    site_power, tilted = tilted_sites(
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
    return finish_ep(final, t, likelihood, n_iter, converged, known, w, mode, stopped)


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
    cavity_tau, cavity_nu = cavity_parameters(solution, tau, nu)
    # A best iterate of a run that did not converge may hold sites that leave
    # no proper cavity; those points fall back on their posterior marginal.
    invalid = ~(cavity_tau > 0)
    beta = tilted = copy_tau = copy_nu = None
    if w is not None:
        beta, tilted = tilted_sites(likelihood, w, 1.0, weights_below_power)
        copy_tau, copy_nu = cavity_parameters(solution, beta * tau, beta * nu)
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
def finish_ep(
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
