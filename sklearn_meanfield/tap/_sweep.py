"""One parallel sweep of EP site updates, and the records it passes on.

:func:`ep_sweep` maps an :class:`EPState` (the sites and their solved
posterior) to a :class:`SiteUpdate`: the moment-matched sites computed from
every cavity at once, which of them are valid, and the size of the change.
:class:`Sweep` is what an ``on_iteration`` callable sees of each sweep.
"""

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

__all__ = ["EPState", "SiteUpdate", "Sweep", "ep_sweep"]


class Sweep(NamedTuple):
    """One sweep of an iteration, as its ``on_iteration`` callable sees it.

    ``str(sweep)`` is the progress line printed at ``verbose=2``.

    Examples
    --------
    >>> from sklearn_meanfield.tap._sweep import Sweep
    >>> str(Sweep("EP", 3, 0.0123, 0.8))
    'EP sweep 3: residual 0.0123, step 0.80'
    """

    solver: str  # "EP" or "mean-field"
    number: int  # 1, 2, ...
    residual: float
    step: float | None = None  # the damped step (EP)

    def __str__(self):
        text = f"{self.solver} sweep {self.number}: residual {self.residual:.3g}"
        return text if self.step is None else f"{text}, step {self.step:.2f}"


@dataclass
class EPState:
    """Sites ``(tau, nu)`` and the posterior solved for them."""

    tau: np.ndarray
    nu: np.ndarray
    solution: object


class SiteUpdate(NamedTuple):
    """What one sweep proposes: new sites, which of them are valid (a
    proper cavity and a finite update; the others keep their value), the
    tilted log normalisers and the residual of the change."""

    tau: np.ndarray
    nu: np.ndarray
    valid: np.ndarray
    log_z: np.ndarray
    residual: float


def ep_sweep(state, t, tilted, site_power, site_weights=None):
    """One parallel sweep of site updates from the cavities.

    Every cavity removes ``site_power`` of its site; the tilted moments of
    ``tilted`` give the moment-matched sites (GPy's EP ``_local_updates``,
    all sites at once).  ``site_weights`` (None: all one) measure the
    residual on one copy of each site.

    Returns
    -------
    SiteUpdate
    """
    tau, nu = state.tau, state.nu
    cavity_tau, cavity_nu = cavity_parameters(
        state.solution, site_power * tau, site_power * nu
    )
    valid = cavity_tau > 0
    cavity_var = np.where(valid, 1.0 / np.where(valid, cavity_tau, 1.0), 1.0)
    cavity_mean = cavity_nu * cavity_var
    log_z, first, second = tilted.moments(t, cavity_mean, cavity_var)
    denominator = site_power * tilted_variance_ratio(cavity_var, second)
    proposed_tau = second / denominator
    proposed_nu = (first + cavity_mean * second) / denominator
    # A site whose update overflows (a noise-free step site of a point
    # that cannot be classified, its cavity collapsed) keeps its value.
    valid &= np.isfinite(proposed_tau) & np.isfinite(proposed_nu)
    new_tau = np.where(valid, proposed_tau, tau)
    new_nu = np.where(valid, proposed_nu, nu)
    if site_weights is None:
        residual = _residual(state.solution, new_tau, new_nu, tau, nu)
    else:  # measured on one copy, as for the repeated points
        share = np.minimum(1.0, 1.0 / site_weights)
        residual = _residual(
            state.solution, share * new_tau, share * new_nu, share * tau, share * nu
        )
    return SiteUpdate(new_tau, new_nu, valid, log_z, residual)


def cavity_parameters(solution, tau, nu):
    """Cavity precisions and precision-means: the posterior marginals of
    ``solution`` with the sites ``(tau, nu)`` taken out."""
    cavity_tau = 1.0 / solution.var - tau
    cavity_nu = solution.mean / solution.var - nu
    return cavity_tau, cavity_nu


# The tilted variance (cavity variance times 1 - v b) is kept above this share of
# the cavity variance.  A noise-free step likelihood whose cavity sits far on the
# wrong side would otherwise ask for an infinite site precision (and 1 - v b is
# computed with cancellation there); a site 1e6 times more precise than its
# cavity is already a hard constraint.  Negative site precisions are untouched.
_MIN_TILTED_VARIANCE_RATIO = 1e-6


def tilted_variance_ratio(cavity_var, second):
    """The tilted variance over the cavity variance, ``1 - v b`` (``b`` the
    likelihood's ``second`` moment term), bounded below as explained above."""
    return np.maximum(1.0 - cavity_var * second, _MIN_TILTED_VARIANCE_RATIO)


def _residual(solution, new_tau, new_nu, tau, nu):
    """Size of a proposed site change, in units of the posterior marginals.

    Measured on the marginals ``N(mu_i, var_i)`` that site ``i`` alone would
    produce from its cavity, which is scale-free and finite even when a site
    precision is huge (near-deterministic step likelihood).
    """
    var = solution.var
    cavity_tau = 1.0 / var - tau
    cavity_nu = solution.mean / var - nu
    new_precision = cavity_tau + new_tau
    with np.errstate(divide="ignore", invalid="ignore"):
        # old precision is 1 / var; the old mean is solution.mean.
        log_ratio = np.abs(np.log(new_precision * var))
        new_mean = (cavity_nu + new_nu) / new_precision
        shift = np.abs(new_mean - solution.mean) / np.sqrt(var)
    values = np.concatenate([log_ratio, shift])
    values = values[np.isfinite(values)]
    return float(values.max()) if values.size else np.inf
