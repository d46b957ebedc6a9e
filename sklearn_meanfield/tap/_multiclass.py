"""One-vs-rest plumbing shared by the TAP classifiers."""

import numpy as np
from sklearn.utils.multiclass import check_classification_targets

__all__ = [
    "encode_classes",
    "leave_one_out",
    "one_vs_rest_targets",
    "positive_to_proba",
]


def encode_classes(y, estimator_name):
    """Sorted class labels and each sample's class index; refuse one class.

    Parameters
    ----------
    y : ndarray of shape (n_samples,)
        Validated target labels.
    estimator_name : str
        Named in the error message.

    Returns
    -------
    classes : ndarray of shape (n_classes,)
    y_index : ndarray of shape (n_samples,)
        Index of each sample's label into ``classes``.

    Raises
    ------
    ValueError
        If ``y`` holds fewer than two classes: there is nothing to classify.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.tap._multiclass import encode_classes
    >>> classes, y_index = encode_classes(np.array(["b", "a", "b"]), "Demo")
    >>> classes.tolist(), y_index.tolist()
    (['a', 'b'], [1, 0, 1])
    """
    check_classification_targets(y)
    classes, y_index = np.unique(y, return_inverse=True)
    if len(classes) < 2:
        raise ValueError(
            f"{estimator_name} needs samples of at least 2 classes in the data, "
            f"but the data contains only one class: {classes[0]!r}."
        )
    return classes, y_index


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

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.tap._multiclass import one_vs_rest_targets
    >>> one_vs_rest_targets(np.array([0, 1, 1]), 2)
    [array([-1.,  1.,  1.])]
    >>> len(one_vs_rest_targets(np.array([0, 1, 2]), 3))
    3
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

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.tap._multiclass import positive_to_proba
    >>> positive_to_proba(np.array([[0.25]]))
    array([[0.75, 0.25]])
    >>> positive_to_proba(np.array([[0.2, 0.6, 0.2], [0.0, 0.0, 0.0]]))
    array([[0.2       , 0.6       , 0.2       ],
           [0.33333333, 0.33333333, 0.33333333]])
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
    likelihood : object or list of objects
        Provides ``predictive_positive(mean, var)``; a list gives one per
        binary problem (each with its own label noise).
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

    Examples
    --------
    >>> import numpy as np
    >>> from types import SimpleNamespace
    >>> from sklearn_meanfield.tap._likelihoods import make_likelihood
    >>> from sklearn_meanfield.tap._multiclass import leave_one_out
    >>> cavities = SimpleNamespace(
    ...     cavity_mean=np.array([-2.0, 0.5]), cavity_var=np.array([1.0, 3.0]))
    >>> proba, error = leave_one_out(
    ...     make_likelihood("probit", 0.0), [cavities], np.array([0, 1]),
    ...     np.array([0, 0]))
    >>> proba.round(3)
    array([[0.921, 0.079],
           [0.401, 0.599]])
    >>> error
    0.5
    """
    if not isinstance(likelihood, (list, tuple)):
        likelihood = [likelihood] * len(solutions)
    positive = np.column_stack(
        [
            lik.predictive_positive(s.cavity_mean, s.cavity_var)
            for lik, s in zip(likelihood, solutions)
        ]
    )
    loo_proba = positive_to_proba(positive)
    loo_labels = classes[np.argmax(loo_proba, axis=1)]
    return loo_proba, float(np.mean(loo_labels != y))
