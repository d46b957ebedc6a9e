"""Validation of what the public RBM tools accept: models, data and counts.

The tools of :mod:`sklearn_meanfield.diagnostics` take a fitted
:class:`~sklearn_meanfield.BetheRBM`, a fitted
:class:`sklearn.neural_network.BernoulliRBM` or a tuple of the three parameter
arrays; the functions here turn any of them into float64 arrays and refuse
what the computations cannot use, with messages that name the problem.
"""

from numbers import Integral

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator
from sklearn.utils import check_array
from sklearn.utils.validation import check_is_fitted

from ._exact import MAX_ENUMERATED_UNITS
from ._message_passing import METHODS as _MESSAGE_FORMS

__all__ = [
    "BETHE_FORMS",
    "check_bethe_form",
    "check_count",
    "check_enumerable",
    "check_visible",
    "rbm_parameters",
]

#: Forms of the Bethe equations, as BetheRBM's ``method``.
BETHE_FORMS = (*_MESSAGE_FORMS, "relaxed")

_RBM_ATTRIBUTES = ("components_", "intercept_visible_", "intercept_hidden_")


def rbm_parameters(rbm):
    """Float64 ``(weights, visible_bias, hidden_bias)`` of a fitted RBM or tuple.

    Parameters
    ----------
    rbm : BetheRBM, BernoulliRBM or tuple of three arrays
        Any object with ``components_``, ``intercept_visible_`` and
        ``intercept_hidden_``, or ``(components, intercept_visible,
        intercept_hidden)``.

    Returns
    -------
    weights : ndarray of shape (n_hidden, n_visible)
    visible_bias : ndarray of shape (n_visible,)
    hidden_bias : ndarray of shape (n_hidden,)
    """
    if isinstance(rbm, BaseEstimator):
        check_is_fitted(rbm)
    if isinstance(rbm, (tuple, list)) and len(rbm) == 3:
        params = tuple(rbm)
    elif all(hasattr(rbm, name) for name in _RBM_ATTRIBUTES):
        params = tuple(getattr(rbm, name) for name in _RBM_ATTRIBUTES)
    else:
        raise TypeError(
            "rbm must be a fitted BetheRBM or BernoulliRBM (an object with "
            "components_, intercept_visible_ and intercept_hidden_) or a tuple "
            f"(components, intercept_visible, intercept_hidden); got "
            f"{type(rbm).__name__}."
        )
    weights, visible_bias, hidden_bias = (
        np.asarray(a, dtype=np.float64) for a in params
    )
    if weights.ndim != 2 or 0 in weights.shape:
        raise ValueError(
            "components must have shape (n_hidden, n_visible) with both positive, "
            f"got {weights.shape}."
        )
    n_hidden, n_visible = weights.shape
    if visible_bias.shape != (n_visible,) or hidden_bias.shape != (n_hidden,):
        raise ValueError(
            f"components of shape {weights.shape} need intercept_visible of shape "
            f"({n_visible},) and intercept_hidden of shape ({n_hidden},); got "
            f"{visible_bias.shape} and {hidden_bias.shape}."
        )
    if not all(np.all(np.isfinite(a)) for a in (weights, visible_bias, hidden_bias)):
        raise ValueError("The RBM's parameters must be finite.")
    return weights, visible_bias, hidden_bias


def check_visible(X, n_visible):
    """Float64 visible states (CSR if sparse) with values in [0, 1].

    Parameters
    ----------
    X : {array-like, sparse matrix} of shape (n_samples, n_visible)
    n_visible : int
        The RBM's number of visible units.

    Returns
    -------
    ndarray or sparse matrix
    """
    X = check_array(X, accept_sparse="csr", dtype=np.float64)
    if X.shape[1] != n_visible:
        raise ValueError(
            f"X has {X.shape[1]} features, but the RBM has {n_visible} visible units."
        )
    values = X.data if sp.issparse(X) else X
    if values.size and (values.min() < 0 or values.max() > 1):
        raise ValueError(
            "X must have values in [0, 1] (binary units or their probabilities)."
        )
    return X


def check_enumerable(weights):
    """Refuse an RBM whose smaller layer is too large to enumerate.

    Parameters
    ----------
    weights : ndarray of shape (n_hidden, n_visible)
    """
    n_hidden, n_visible = weights.shape
    if min(n_hidden, n_visible) > MAX_ENUMERATED_UNITS:
        raise ValueError(
            "method='exact' enumerates the states of the smaller layer and "
            f"accepts at most {MAX_ENUMERATED_UNITS} units there; this RBM has "
            f"{n_hidden} hidden and {n_visible} visible units. Use "
            "method='bethe' for an estimate."
        )


def check_count(value, name, minimum=1):
    """``value`` as an int, refused unless it is an integer >= ``minimum``.

    Parameters
    ----------
    value : object
    name : str
        The parameter's name, for the message.
    minimum : {0, 1}, default=1
        1 for a positive count, 0 for a non-negative one.

    Returns
    -------
    int
    """
    if not isinstance(value, Integral) or isinstance(value, bool) or value < minimum:
        what = "positive" if minimum == 1 else "non-negative"
        raise ValueError(f"{name} must be a {what} integer, got {value!r}.")
    return int(value)


def check_bethe_form(bethe_form):
    """Refuse an unknown form of the Bethe equations.

    Parameters
    ----------
    bethe_form : str
        One of :data:`BETHE_FORMS`.
    """
    if bethe_form not in BETHE_FORMS:
        raise ValueError(
            f"bethe_form must be one of {BETHE_FORMS}, got {bethe_form!r}."
        )
