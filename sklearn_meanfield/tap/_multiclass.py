"""One-vs-rest plumbing shared by the TAP classifiers."""

import numpy as np

__all__ = ["one_vs_rest_targets", "positive_to_proba"]


def one_vs_rest_targets(y_index, n_classes):
    """+-1 targets of the binary problems: one for two classes, else one a class.

    Parameters
    ----------
    y_index : ndarray of shape (n_samples,)
        Class indices into ``classes_``.
    n_classes : int

    Returns
    -------
    list of ndarray of shape (n_samples,)
    """
    if n_classes == 2:
        return [np.where(y_index == 1, 1.0, -1.0)]
    return [np.where(y_index == k, 1.0, -1.0) for k in range(n_classes)]


def positive_to_proba(positive):
    """Positive-class probabilities of the binary problems to class rows.

    Parameters
    ----------
    positive : ndarray of shape (n_samples, n_problems)

    Returns
    -------
    ndarray of shape (n_samples, n_classes)
        Two classes: ``[1 - p, p]``; more: the one-vs-rest probabilities
        normalised to sum to one (uniform where every problem says zero).
    """
    if positive.shape[1] == 1:
        p = positive[:, 0]
        return np.column_stack([1.0 - p, p])
    total = positive.sum(axis=1, keepdims=True)
    uniform = np.full_like(positive, 1.0 / positive.shape[1])
    with np.errstate(invalid="ignore", divide="ignore"):
        normalised = positive / total
    return np.where(total > 0, normalised, uniform)
