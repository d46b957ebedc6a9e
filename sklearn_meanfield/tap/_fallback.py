"""Expectation propagation with a fallback for stalled runs (both TAP shells).

Plain parallel EP on the noise-free or noisy step likelihood can stall: its
tilted distributions have zero width where a cavity sits on the wrong side of
the step, so a few sites jump between near-hard constraints and nothing.  The
fallback is fractional (power) EP, whose fixed points are more stable for
likelihoods that are not log-concave [1]_, with a step per site; its returned
cavities remove whole sites, so the leave-one-out estimates keep their
meaning.  Only the step can be raised to a power in closed form (a noisy step
again), so the probit and the logistic keep plain EP.
"""

from dataclasses import replace
from functools import partial

from ._ep import EPOptions, expectation_propagation, finish_ep
from ._likelihoods import NoisyStepLikelihood
from ._sweep import EPState

__all__ = [
    "FRACTIONAL_PATIENCE",
    "FRACTIONAL_POWERS",
    "PLAIN_EP_PATIENCE",
    "ep_with_fallback",
    "powered_label_noise",
    "powered_likelihood",
]

# Plain parallel EP that has not halved its residual in this many sweeps is
# stalled: it then tends to stay where it is for hundreds of sweeps.
PLAIN_EP_PATIENCE = 25
# The fallback for stalled plain EP: fractional EP with a step per site, from
# the same start, at these powers in turn.  A smaller power gives stabler fixed
# points for likelihoods that are not log-concave (misspecified noisy
# problems); 0.25 converges on some where 0.5 does not.
FRACTIONAL_POWERS = (0.5, 0.25)
FRACTIONAL_PATIENCE = 100


def powered_label_noise(label_noise, power):
    """``p(t | h)**power`` is a noisy step again, with this label noise.

    ``(k + (1 - 2k) Theta)**e = k**e + ((1 - k)**e - k**e) Theta``, i.e. up to
    a constant factor label noise ``k**e / (k**e + (1 - k)**e)``.

    Parameters
    ----------
    label_noise : float in [0, 0.5)
    power : float in (0, 1]

    Returns
    -------
    float

    Examples
    --------
    >>> from sklearn_meanfield.tap._fallback import powered_label_noise
    >>> powered_label_noise(0.0, 0.5)
    0.0
    >>> round(powered_label_noise(0.1, 0.5), 4)  # sqrt(.1) / (sqrt(.1) + sqrt(.9))
    0.25
    """
    if label_noise == 0.0:
        return 0.0
    return 1.0 / (1.0 + ((1.0 - label_noise) / label_noise) ** power)


def powered_likelihood(likelihood, power):
    """``likelihood**power`` up to a constant factor, or None.

    Only the (noisy) step has one: a noisy step with the label noise of
    :func:`powered_label_noise`.  The constant factor does not change the
    tilted moments; the evidence is computed afterwards with the likelihood
    itself.

    Parameters
    ----------
    likelihood : object
    power : float in (0, 1]

    Returns
    -------
    NoisyStepLikelihood or None

    Examples
    --------
    >>> from sklearn_meanfield.tap._fallback import powered_likelihood
    >>> from sklearn_meanfield.tap._likelihoods import make_likelihood
    >>> powered_likelihood(make_likelihood("step", 0.1), 0.5).label_noise
    0.25
    >>> powered_likelihood(make_likelihood("probit", 0.1), 0.5) is None
    True
    """
    if not isinstance(likelihood, NoisyStepLikelihood) or likelihood.sigma != 0.0:
        return None
    return NoisyStepLikelihood(
        powered_label_noise(likelihood.label_noise, power), sigma=0.0
    )


def ep_with_fallback(
    posterior,
    t,
    likelihood,
    options=None,
    *,
    start=None,
    site_weights=None,
    on_iteration=None,
    log=None,
    **overrides,
):
    """Plain EP, then fractional EP where plain EP stalls (step likelihoods).

    Plain EP runs with :data:`PLAIN_EP_PATIENCE`; if it stalls, fractional EP
    with a step per site runs from the same start at each power of
    :data:`FRACTIONAL_POWERS` in turn (within what is left of ``max_iter``),
    on ``likelihood**power``, until one converges.  Its sites are then
    finished with the likelihood itself: the cavities remove whole sites, and
    ``log_z``/``log_evidence`` are those of ``likelihood``.  Fractional EP has
    its own fixed point, a little different from plain EP's (an
    alpha-divergence projection with alpha = power).  A likelihood that
    cannot be raised to a power (:func:`powered_likelihood` is None) gets
    plain EP alone, without patience: exactly
    :func:`~sklearn_meanfield.tap._ep.expectation_propagation`.

    Parameters
    ----------
    posterior, t, likelihood, options, start, site_weights, on_iteration, \
**overrides
        As for :func:`~sklearn_meanfield.tap._ep.expectation_propagation`
        (every run uses the warm starts, ``max_iter``, ``tol`` and
        ``damping``; the ladder sets ``power``, ``site_steps`` and
        ``patience``).
    log : callable or None, default=None
        ``log(level, message, *args)``: told (at level 1) when a run stalls
        and the next power is tried.

    Returns
    -------
    TAPSolution
        ``n_iter`` counts the sweeps of every run.

    References
    ----------
    .. [1] T. Minka, "Power EP", Microsoft Research technical report
       MSR-TR-2004-149, 2004.

    Examples
    --------
    A noisy step on three alternating labels (plain EP converges here; the
    fallback only runs where it stalls):

    >>> import numpy as np
    >>> from sklearn_meanfield.tap._posterior import KernelPosterior
    >>> from sklearn_meanfield.tap._fallback import ep_with_fallback
    >>> from sklearn_meanfield.tap._likelihoods import make_likelihood
    >>> x = np.array([-1.0, 0.0, 1.0])
    >>> K = np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2)
    >>> solution = ep_with_fallback(
    ...     KernelPosterior(K), np.array([1.0, -1.0, 1.0]),
    ...     make_likelihood("step", 0.1), tol=1e-8)
    >>> solution.converged, bool(np.all(solution.cavity_var > 0))
    (True, True)
    """
    options = replace(options or EPOptions(), **overrides)
    can_power = powered_likelihood(likelihood, 0.5) is not None
    run = partial(
        expectation_propagation,
        posterior,
        t,
        start=start,
        site_weights=site_weights,
        on_iteration=on_iteration,
    )
    patience = PLAIN_EP_PATIENCE if can_power else None
    solution = run(likelihood, replace(options, patience=patience))
    if not can_power:
        return solution
    return _fractional_ladder(run, t, likelihood, options, solution, log)


def _fractional_ladder(run, t, likelihood, options, solution, log):
    """Fractional EP at each of :data:`FRACTIONAL_POWERS` until a run
    converges, after plain EP's ``solution`` (``run(likelihood, options)``
    runs EP from the shared start)."""
    n_iter = solution.n_iter
    for power in FRACTIONAL_POWERS:
        budget = options.max_iter - n_iter
        if solution.converged or solution.stopped or budget <= 0:
            break
        if log is not None:
            log(1, "EP not converged after %d sweeps; power EP %.2f", n_iter, power)
        powered = run(
            powered_likelihood(likelihood, power),
            replace(
                options,
                max_iter=budget,
                power=power,
                site_steps=True,
                patience=FRACTIONAL_PATIENCE,
            ),
        )
        n_iter += powered.n_iter
        # Whole-site cavities, log Z and evidence with the likelihood itself.
        solution = finish_ep(
            EPState(powered.tau, powered.nu, powered.posterior),
            t,
            likelihood,
            n_iter,
            powered.converged,
            site_weights=powered.site_weights,
            stopped=powered.stopped,
        )
    solution.n_iter = n_iter
    return solution
