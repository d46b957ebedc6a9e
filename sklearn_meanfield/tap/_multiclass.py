"""One-vs-rest plumbing shared by the TAP classifiers."""

import numpy as np

__all__ = ["leave_one_out", "one_vs_rest_targets", "positive_to_proba"]


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


def leave_one_out(likelihood, solutions, classes, y):
    """Leave-one-out probabilities and error from converged cavities.

    Parameters
    ----------
    likelihood : object
        Provides ``predictive_positive(mean, var)``.
    solutions : list of TAPSolution
        One per binary problem, in the order of :func:`one_vs_rest_targets`.
    classes : ndarray of shape (n_classes,)
    y : ndarray of shape (n_samples,)
        Training labels.

    Returns
    -------
    loo_proba : ndarray of shape (n_samples, n_classes)
    loo_error : float
        Misclassification rate of the leave-one-out predictive.
    """
    positive = np.column_stack(
        [likelihood.predictive_positive(s.cavity_mean, s.cavity_var) for s in solutions]
    )
    loo_proba = positive_to_proba(positive)
    loo_labels = classes[np.argmax(loo_proba, axis=1)]
    return loo_proba, float(np.mean(loo_labels != y))
