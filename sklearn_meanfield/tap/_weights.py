"""Sample weights as site weights.

A sample of weight ``w`` is a site standing for its likelihood raised to
``w`` (an integer weight is the sample repeated).  Here: which samples are
kept, the power of power EP and the tilted likelihood each weight asks for,
and the weighted error rate behind ``loo_error_``.
"""

import numpy as np

__all__ = [
    "AUTO_TEMPERED_BELOW",
    "check_site_weights",
    "positive_site_weights",
    "tilted_sites",
    "weighted_error_rate",
]


# weights_below_power="auto": sites lighter than this fraction of the power
# are tempered (plain EP on p**w), heavier ones keep power EP (consistent
# under splitting).  Power EP's cavity removes 1/w of a site, and below this
# it turns improper where the site dominates (on a probit GP of amplitude
# 1000, weights 0.6 did not converge in 500 sweeps).
AUTO_TEMPERED_BELOW = 0.7


def tilted_sites(likelihood, w, power, mode="auto"):
    """Per-site power ``beta`` of power EP and the tilted distributions'
    likelihood, for site weights ``w`` (None: unweighted) and ``power``.

    Site ``i`` approximates ``p**w_i`` with power ``beta_i = min(1, power /
    w_i)``: its cavity removes ``beta_i`` of the site and its tilted
    distribution holds ``p**min(w_i, power)``.  For ``w_i >= power`` that is
    ``likelihood`` itself (``p**power`` by contract; an integer weight is
    then exactly its repeated copies).  A weight below ``power`` would ask
    for a power above one (a cavity removing more than the site, improper
    where the site outweighs the rest of the posterior, so that EP does not
    converge); when the likelihood can be
    raised to a power (``likelihood.powered(e)``: the step in closed form,
    probit and logistic by quadrature) it is plain EP on ``p**w_i`` instead
    (unless ``mode="power"``), else the power above one is kept.
    """
    if w is None:
        return power, likelihood
    powered = None if mode == "power" else getattr(likelihood, "powered", None)
    closed_form = getattr(likelihood, "powered_in_closed_form", False)
    below = AUTO_TEMPERED_BELOW if mode == "auto" and not closed_form else 1.0
    temper = w < below * power
    if powered is None or not np.any(temper):
        return power / w, likelihood
    exponent = np.where(temper, w / power, 1.0)
    return np.where(temper, 1.0, power / w), powered(exponent)


def check_site_weights(site_weights, n):
    """None for unweighted sites (None or all ones), else positive floats."""
    if site_weights is None:
        return None
    w = np.asarray(site_weights, dtype=float)
    if w.shape != (n,):
        raise ValueError(f"site_weights must have shape ({n},), got {w.shape}.")
    if not np.all(np.isfinite(w)) or np.any(w <= 0):
        raise ValueError(
            "site_weights must be positive and finite; drop points of weight "
            "zero (positive_site_weights)."
        )
    if np.all(w == 1.0):
        return None
    return w


def positive_site_weights(sample_weight, n):
    """The points to keep and their site weights, for ``sample_weight``.

    A point of weight zero is a point that is not there: the shells drop it
    before EP, and its leave-one-out prediction is the full model's
    predictive (the model fitted without it).

    Parameters
    ----------
    sample_weight : array-like of shape (n,) or None
        Non-negative weights (validated by scikit-learn's
        ``_check_sample_weight``), or None.
    n : int
        Number of points.

    Returns
    -------
    keep : ndarray of int
        Indices of the points with positive weight, in order.
    site_weights : ndarray of shape (len(keep),) or None
        Their weights for :func:`expectation_propagation` /
        :func:`mean_field_iteration`; None when all are one.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.tap._weights import positive_site_weights
    >>> keep, w = positive_site_weights(np.array([1.0, 0.0, 2.0]), 3)
    >>> keep.tolist(), w.tolist()
    ([0, 2], [1.0, 2.0])
    >>> keep, w = positive_site_weights(None, 2)
    >>> keep.tolist(), w
    ([0, 1], None)
    """
    if sample_weight is None:
        return np.arange(n), None
    sample_weight = np.asarray(sample_weight, dtype=float)
    keep = np.flatnonzero(sample_weight > 0)
    return keep, check_site_weights(sample_weight[keep], len(keep))


def weighted_error_rate(y_true, y_pred, sample_weight=None):
    """Misclassification rate weighted by ``sample_weight``.

    Under weights the estimators' ``loo_error_`` is this rate of the
    leave-one-out predictions ``loo_proba_``, each of which leaves out the
    whole weighted point (the model fitted without it): a point of weight
    ``w`` counts ``w`` times in the rate, its prediction is made without
    any of its ``w`` copies.

    Parameters
    ----------
    y_true, y_pred : ndarray of shape (n,)
    sample_weight : ndarray of shape (n,) or None

    Returns
    -------
    float

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.tap._weights import weighted_error_rate
    >>> weighted_error_rate(np.array([0, 1, 1]), np.array([0, 0, 1]), [1, 2, 1])
    0.5
    """
    wrong = np.asarray(y_true) != np.asarray(y_pred)
    if sample_weight is None:
        return float(np.mean(wrong))
    sample_weight = np.asarray(sample_weight, dtype=float)
    return float(np.sum(sample_weight * wrong) / np.sum(sample_weight))
