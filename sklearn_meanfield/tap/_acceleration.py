"""How EP moves from one sweep's proposed sites to the next sites.

The damping schedule (one step for all sites, shrunk on oscillation, or one
step per site) and Anderson mixing of the last sweeps, tried near the fixed
point and undone when it makes the residual worse.  :class:`EPAcceleration`
owns this state between sweeps; :func:`next_step` is also the step control of
the mean-field iteration.
"""

from typing import NamedTuple

import numpy as np

from ._posterior import proper_solution
from ._sweep import EPState, SiteUpdate

__all__ = ["AndersonMixing", "EPAcceleration", "next_step"]


def next_step(step, residual, previous_residual, damping):
    """The damped iterations' step control, shared by both solvers.

    Oscillation (a growing residual) halves the step, down to 0.01; steady
    progress lets it grow back by 10% a sweep, up to ``damping``.
    """
    if residual > previous_residual:
        return max(0.5 * step, 0.01)
    return min(1.1 * step, damping)


# Anderson acceleration is used once the residual is below this: far from the
# fixed point (a cold start on a hard problem) its extrapolations overshoot,
# while the damped iteration makes steady progress there.
_ANDERSON_MAX_RESIDUAL = 0.5


# An accelerated sweep that multiplies the residual by more than this is
# undone and replaced by the damped step: an extrapolation can throw the sites
# far off (a residual of 0.4 became 1e2 on a logistic perceptron).  Smaller
# increases are kept: with label noise the accelerated residual is not
# monotone but still falls faster than when every increase is undone.
_ANDERSON_REJECT_RATIO = 2.0


class AndersonMixing:
    """Anderson acceleration of the EP fixed-point map ``sites -> new sites``.

    Keeps the last ``memory`` differences of the iterates ``x`` and of their
    proposed changes ``f = g(x) - x`` and proposes the combination of past
    iterates whose changes cancel best (Walker and Ni's type-II form with
    mixing 1), in the coordinates of the residual (site precisions times the
    posterior variance, precision-means times its square root) so that no
    handful of near-hard-constraint sites dominates the least squares.  It
    saves sweeps over the damped iteration most where that iteration is slow,
    as with label noise, whose negative sites slow the damped steps down.

    References
    ----------
    .. [1] H. F. Walker and P. Ni, "Anderson acceleration for fixed-point
       iterations", SIAM J. Numer. Anal. 49(4), 1715-1735, 2011.
    """

    def __init__(self, memory):
        self.memory = memory
        self.last = None  # (x, change) of the latest sweep
        self.d_iterates = []  # differences of consecutive iterates ...
        self.d_changes = []  # ... and of their changes, newest last

    def restart(self):
        """Forget all but the last sweep."""
        self.d_iterates.clear()
        self.d_changes.clear()

    def propose(self, x, change, weights):
        """The accelerated next iterate, or None while the history is short."""
        if self.last is not None:
            self.d_iterates.append(x - self.last[0])
            self.d_changes.append(change - self.last[1])
            if len(self.d_iterates) > self.memory:
                del self.d_iterates[0], self.d_changes[0]
        self.last = (x, change)
        if not self.d_iterates:
            return None
        # The least squares min |W (change - dF gamma)| through its m x m
        # normal equations: m <= memory is tiny, while a dense (2n x m)
        # least-squares solver costs O(n m^2) with a large constant.
        weighted = np.array(self.d_changes) * weights  # (m, 2n)
        gram = weighted @ weighted.T
        rhs = weighted @ (change * weights)
        if not (np.all(np.isfinite(gram)) and np.all(np.isfinite(rhs))):
            return None
        gamma = np.linalg.lstsq(gram, rhs, rcond=1e-12)[0]
        step = (np.array(self.d_iterates) + np.array(self.d_changes)).T @ gamma
        proposal = x + change - step
        return proposal if np.all(np.isfinite(proposal)) else None


def _accelerated(mixing, solution, tau, nu, new_tau, new_nu):
    """Anderson-accelerated sites (None while the history is too short), each
    site precision kept on its target's side of zero.

    A site precision whose sign the extrapolation would flip (a log-concave
    likelihood's site made negative, a label-noise site made positive) takes
    its moment-matched target instead: such a flip would only be undone by the
    next sweep, and negative precisions cost a slower factorisation.
    """
    n = len(tau)
    var = solution.var
    proposal = mixing.propose(
        np.concatenate([tau, nu]),
        np.concatenate([new_tau - tau, new_nu - nu]),
        np.concatenate([var, np.sqrt(var)]),
    )
    if proposal is None:
        return None
    accelerated_tau, accelerated_nu = proposal[:n], proposal[n:]
    flipped = ((accelerated_tau < 0) & (new_tau > 0)) | (
        (accelerated_tau > 0) & (new_tau < 0)
    )
    return (
        np.where(flipped, new_tau, accelerated_tau),
        np.where(flipped, new_nu, accelerated_nu),
    )


class _Best(NamedTuple):
    residual: float
    state: EPState


class _Undo(NamedTuple):
    """The sweep an accelerated step started from (to undo it)."""

    state: EPState
    update: SiteUpdate


class EPAcceleration:
    """How EP moves from one sweep's proposal to the next sites.

    Holds the damping schedule (one step for all sites, shrunk on
    oscillation, or one per site), the Anderson mixing of the last sweeps
    (tried once the residual is below ``_ANDERSON_MAX_RESIDUAL``, undone when
    it multiplies the residual by more than ``_ANDERSON_REJECT_RATIO``), the
    best iterate so far and the patience count.

    Parameters
    ----------
    options : EPOptions
    n : int
        Number of sites.
    """

    def __init__(self, options, n):
        self.options = options
        self.step = float(options.damping)
        self.steps = np.full(n, self.step) if options.site_steps else None
        self._last_change = np.zeros((2, n))
        memory = options.anderson_memory
        self._mixing = AndersonMixing(memory) if memory > 0 else None
        self._undo = None  # the state an accelerated sweep started from
        self._previous_residual = np.inf
        self._halved_at = (np.inf, 0)  # (residual, sweep) when the best halved
        self.best = None

    def record(self, state, residual, n_iter):
        """Keep the best iterate; note when the best residual halves."""
        if self.best is None or residual < self.best.residual:
            self.best = _Best(residual, state)
        if residual <= 0.5 * self._halved_at[0]:
            self._halved_at = (residual, n_iter)

    def stalled(self, n_iter):
        """Whether the best residual has not halved within ``patience``."""
        patience = self.options.patience
        return patience is not None and n_iter - self._halved_at[1] > patience

    def advance(self, posterior, state, update):
        """The next :class:`EPState`, or None when no step keeps the
        posterior proper."""
        residual = update.residual
        rejected = (
            self._undo is not None
            and residual > _ANDERSON_REJECT_RATIO * self._undo.update.residual
        )
        if rejected:
            # The accelerated sweep made things worse: undo it, and take the
            # damped step from where it started, with a fresh history.
            state, update = self._undo
            residual = update.residual
            self._mixing.restart()
        self._undo = None
        if not rejected:
            self.step = next_step(
                self.step, residual, self._previous_residual, self.options.damping
            )
        self._previous_residual = residual
        if self.options.site_steps:
            self._update_site_steps(state, update)
        trial = None
        if self._mixing is not None and not self.options.site_steps and not rejected:
            trial = self._accelerate(posterior, state, update)
        if trial is not None:
            return trial
        return self._damped(posterior, state, update)

    def _update_site_steps(self, state, update):
        change = np.stack([update.tau - state.tau, update.nu - state.nu])
        last = self._last_change
        # Opposite signs, compared without a product (which overflows for
        # the huge changes of near-hard-constraint sites).
        reversed_ = np.any(
            ((change > 0) & (last < 0)) | ((change < 0) & (last > 0)), axis=0
        )
        self.steps = np.where(
            reversed_,
            np.maximum(0.5 * self.steps, 0.01),
            np.minimum(1.2 * self.steps, self.options.damping),
        )
        self._last_change = change

    def _accelerate(self, posterior, state, update):
        """The Anderson-accelerated state, or None."""
        accelerated = _accelerated(
            self._mixing, state.solution, state.tau, state.nu, update.tau, update.nu
        )
        # Far from the fixed point (a cold start) the history misleads:
        # damp, and start it afresh.
        if update.residual > _ANDERSON_MAX_RESIDUAL:
            self._mixing.restart()
            return None
        if accelerated is None:
            return None
        trial = proper_solution(posterior, *accelerated)
        if trial is None:
            self._mixing.restart()
            return None
        self._undo = _Undo(state, update)
        return EPState(*accelerated, trial)

    def _damped(self, posterior, state, update):
        """The damped step, halved until the posterior is proper."""
        trial_step = self.steps if self.options.site_steps else self.step
        tau, nu = state.tau, state.nu
        while np.max(trial_step) >= 1e-4:
            trial_tau = tau + trial_step * (update.tau - tau)
            trial_nu = nu + trial_step * (update.nu - nu)
            trial = proper_solution(posterior, trial_tau, trial_nu)
            if trial is not None:
                return EPState(trial_tau, trial_nu, trial)
            trial_step = 0.5 * trial_step
        return None
