"""Multi-class plumbing shared by the TAP classifiers.

One-vs-rest problems (both classifiers) and one-vs-one problems (the GP
classifier): their binary targets, and how the binary problems'
probabilities of their positive class are combined into class
probabilities, decision values and labels.
"""

import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import CompoundKernel
from sklearn.utils.multiclass import check_classification_targets

__all__ = [
    "ProblemKernels",
    "class_sample_weights",
    "encode_classes",
    "majority_error_rate",
    "warn_if_no_better_than_majority",
    "leave_one_out",
    "one_vs_one_pairs",
    "one_vs_one_votes",
    "one_vs_rest_targets",
    "pairwise_coupling",
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


def one_vs_one_pairs(n_classes):
    """The class pairs ``(i, j)``, ``i < j``, of the one-vs-one problems.

    Problem ``k`` separates class ``j`` (its positive class, target +1) from
    class ``i`` (target -1), in the order of
    :class:`sklearn.multiclass.OneVsOneClassifier`.

    Parameters
    ----------
    n_classes : int

    Returns
    -------
    list of tuple of int
        ``n_classes * (n_classes - 1) / 2`` pairs.

    Examples
    --------
    >>> from sklearn_meanfield.tap._multiclass import one_vs_one_pairs
    >>> one_vs_one_pairs(3)
    [(0, 1), (0, 2), (1, 2)]
    """
    return [(i, j) for i in range(n_classes) for j in range(i + 1, n_classes)]


def one_vs_one_votes(positive, n_classes):
    """Decision values of one-vs-one problems: votes plus bounded confidences.

    Each problem votes for the class it predicts (its positive class ``j``
    when its probability is above 1/2, else ``i``); ties between vote counts
    are broken by the summed confidences (the probabilities of the positive
    classes, counted for ``j`` and against ``i``), squashed into
    ``(-1/3, 1/3)`` so that they never outweigh a vote.  This is the rule of
    :class:`sklearn.multiclass.OneVsOneClassifier` (and so of
    scikit-learn's ``GaussianProcessClassifier(multi_class="one_vs_one")``)
    with probabilities as the binary confidences.

    Parameters
    ----------
    positive : ndarray of shape (n_samples, n_pairs)
        Probability of each pair's positive class, pairs in the order of
        :func:`one_vs_one_pairs`.
    n_classes : int

    Returns
    -------
    ndarray of shape (n_samples, n_classes)
        The argmax of a row is the predicted class.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.tap._multiclass import one_vs_one_votes
    >>> # 1 beats 0, 0 beats 2, 2 beats 1: one vote each, confidences decide.
    >>> one_vs_one_votes(np.array([[0.9, 0.2, 0.6]]), 3).round(3)
    array([[0.825, 1.077, 1.148]])
    """
    votes = np.zeros((positive.shape[0], n_classes))
    confidence = np.zeros_like(votes)
    for k, (i, j) in enumerate(one_vs_one_pairs(n_classes)):
        wins = positive[:, k] > 0.5
        votes[:, j] += wins
        votes[:, i] += ~wins
        confidence[:, j] += positive[:, k]
        confidence[:, i] -= positive[:, k]
    return votes + confidence / (3.0 * (np.abs(confidence) + 1.0))


def pairwise_coupling(positive, n_classes):
    """Class probabilities from one-vs-one probabilities (Wu, Lin and Weng).

    With ``r_ji`` the probability of class ``j`` given that the class is
    ``i`` or ``j``, the class probabilities ``p`` minimise
    ``sum_i sum_{j != i} (r_ji p_i - r_ij p_j)^2`` subject to
    ``sum_i p_i = 1`` (method 2 of [1]_, the one LIBSVM uses): a linear
    system with the constraint's Lagrange multiplier, solved for all samples
    at once.  Pairwise probabilities that are consistent with a distribution
    ``p`` (``r_ij = p_i / (p_i + p_j)``) give back exactly ``p``.  The
    probabilities are clipped to ``[1e-15, 1 - 1e-15]`` first, which keeps
    the system non-singular when a pair's probability is 0 or 1 in floating
    point.

    Parameters
    ----------
    positive : ndarray of shape (n_samples, n_pairs)
        Probability of each pair's positive class ``j``, pairs in the order
        of :func:`one_vs_one_pairs`.
    n_classes : int

    Returns
    -------
    ndarray of shape (n_samples, n_classes)
        Non-negative rows summing to one.

    References
    ----------
    .. [1] T.-F. Wu, C.-J. Lin and R. C. Weng, "Probability estimates for
       multi-class classification by pairwise coupling", Journal of Machine
       Learning Research 5, 975-1005, 2004.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.tap._multiclass import pairwise_coupling
    >>> p = np.array([0.5, 0.3, 0.2])
    >>> consistent = np.array([[p[1] / (p[0] + p[1]), p[2] / (p[0] + p[2]),
    ...                         p[2] / (p[1] + p[2])]])
    >>> pairwise_coupling(consistent, 3).round(12)
    array([[0.5, 0.3, 0.2]])
    """
    r = np.clip(positive, 1e-15, 1.0 - 1e-15)
    n_samples = r.shape[0]
    # R[:, a, b]: probability of class a against class b.
    R = np.zeros((n_samples, n_classes, n_classes))
    for k, (i, j) in enumerate(one_vs_one_pairs(n_classes)):
        R[:, j, i] = r[:, k]
        R[:, i, j] = 1.0 - r[:, k]
    # Q_aa = sum_{b != a} r_ba^2, Q_ab = -r_ba r_ab; bordered by the constraint.
    system = np.zeros((n_samples, n_classes + 1, n_classes + 1))
    Q = system[:, :n_classes, :n_classes]
    Q[...] = -np.transpose(R, (0, 2, 1)) * R
    diagonal = np.einsum("sba,sba->sa", R, R)
    Q[:, np.arange(n_classes), np.arange(n_classes)] = diagonal
    system[:, :n_classes, n_classes] = 1.0
    system[:, n_classes, :n_classes] = 1.0
    rhs = np.zeros((n_samples, n_classes + 1, 1))
    rhs[:, n_classes] = 1.0
    p = np.linalg.solve(system, rhs)[:, :n_classes, 0]
    # The exact solution is non-negative; clip rounding and renormalise.
    p = np.maximum(p, 0.0)
    return p / p.sum(axis=1, keepdims=True)


class ProblemKernels(CompoundKernel):
    """The fitted kernels of the binary problems, printed one per line.

    A :class:`~sklearn.gaussian_process.kernels.CompoundKernel` (same
    ``theta``, ``bounds``, ``__call__`` and ``diag``) that names each binary
    problem in its repr, and whose ``theta`` setter splits the stacked
    hyperparameters by each kernel's own size (the parent's assumes
    attributes of a binary kernel).

    Parameters
    ----------
    kernels : list of Kernel
        One per binary problem.
    names : list of str or None, default=None
        What each problem separates (e.g. ``"class 'setosa'"``); None
        numbers them.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.gaussian_process.kernels import RBF
    >>> from sklearn_meanfield.tap._multiclass import ProblemKernels
    >>> kernel = ProblemKernels([RBF(2.0), RBF(0.5)], ["class 0", "class 1"])
    >>> print(kernel)
    CompoundKernel(
        class 0: RBF(length_scale=2),
        class 1: RBF(length_scale=0.5),
    )
    >>> kernel.theta = np.log([3.0, 4.0])
    >>> print(kernel.kernels[1])
    RBF(length_scale=4)
    """

    def __init__(self, kernels, names=None):
        super().__init__(kernels)
        self.names = names

    def get_params(self, deep=True):
        """Get the parameters of this kernel: ``kernels`` and ``names``.

        Parameters
        ----------
        deep : bool, default=True
            Unused (the kernels are returned as they are).

        Returns
        -------
        params : dict
        """
        return dict(kernels=self.kernels, names=self.names)

    @property
    def theta(self):
        """The stacked log-hyperparameters of the kernels, in order."""
        return np.hstack([kernel.theta for kernel in self.kernels])

    @theta.setter
    def theta(self, theta):
        theta = np.asarray(theta, dtype=float)
        start = 0
        for kernel in self.kernels:
            kernel.theta = theta[start : start + kernel.n_dims]
            start += kernel.n_dims

    def __repr__(self):
        names = self.names
        if names is None:
            names = [str(k) for k in range(len(self.kernels))]
        lines = [f"    {name}: {k!r}," for name, k in zip(names, self.kernels)]
        return "\n".join(["CompoundKernel(", *lines, ")"])


def majority_error_rate(y, sample_weight=None):
    """Error rate of always predicting the (weighted) most frequent class.

    Examples
    --------
    >>> from sklearn_meanfield.tap._multiclass import majority_error_rate
    >>> majority_error_rate([0, 0, 1, 2])
    0.5
    >>> majority_error_rate([0, 0, 1, 2], sample_weight=[1, 1, 6, 0])
    0.25
    """
    _, index = np.unique(np.asarray(y), return_inverse=True)
    totals = np.bincount(index, weights=sample_weight)
    return float(1.0 - totals.max() / totals.sum())


def warn_if_no_better_than_majority(loo_error, y, sample_weight, advice):
    """ConvergenceWarning when ``loo_error`` is no better than predicting the
    majority class: a model that found no structure in the inputs.

    "No better" allows for half a point of the lightest weight, so that a
    constant model's error, computed with its own rounding, counts as equal.
    ``advice`` ends the message: what to try.
    """
    if not np.isfinite(loo_error):
        return
    weights = np.ones(len(y)) if sample_weight is None else np.asarray(sample_weight)
    majority = majority_error_rate(y, weights)
    slack = 0.5 * weights[weights > 0].min() / weights.sum()
    if loo_error >= majority - slack:
        warnings.warn(
            f"The fitted model predicts no better than the majority class: "
            f"leave-one-out error {loo_error:.3g}, always the majority class "
            f"{majority:.3g}. {advice}",
            ConvergenceWarning,
        )


def _label(label):
    """A class label as Python writes it (``0``, not ``np.int64(0)``)."""
    return label.item() if isinstance(label, np.generic) else label


def class_sample_weights(class_weight, classes, y, sample_weight):
    """``sample_weight`` times each sample's class weight, validated.

    ``"balanced"`` gives class ``k`` the weight ``sum(w) / (n_classes
    sum_{y_i = k} w_i)`` with ``w`` the sample weights (as scikit-learn's
    LogisticRegression and ``compute_class_weight`` do), so that integer
    sample weights stay equivalent to repeated samples; a dict maps labels
    to weights (1 for a class not named).  One-vs-rest and one-vs-one
    problems use these weights of the original labels.

    Raises
    ------
    ValueError
        If the dict names a label that is not a class, gives a weight that
        is negative, infinite or NaN, or if a class ends with no weight at
        all (it could never be learned, and its leave-one-out error would be
        undefined).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.tap._multiclass import class_sample_weights
    >>> y = np.array([0, 0, 0, 1])
    >>> class_sample_weights("balanced", np.array([0, 1]), y, np.ones(4))
    array([0.66666667, 0.66666667, 0.66666667, 2.        ])
    >>> class_sample_weights({1: 3}, np.array([0, 1]), y, np.ones(4))
    array([1., 1., 1., 3.])
    """
    index = np.searchsorted(classes, y)
    if isinstance(class_weight, str) and class_weight == "balanced":
        totals = np.bincount(index, weights=sample_weight, minlength=len(classes))
        with np.errstate(divide="ignore"):
            per_class = np.where(
                totals > 0, np.sum(sample_weight) / (len(classes) * totals), 1.0
            )
    else:
        unknown = set(class_weight) - set(classes.tolist())
        if unknown:
            raise ValueError(
                f"The given class_weight dict has labels {sorted(unknown, key=str)} "
                f"that are not classes of y ({classes.tolist()})."
            )
        per_class = np.array(
            [float(class_weight.get(c, 1.0)) for c in classes.tolist()]
        )
        bad = ~(np.isfinite(per_class) & (per_class >= 0))
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"class_weight gives class {_label(classes[k])!r} the weight "
                f"{per_class[k]}; class weights must be finite and non-negative."
            )
    weights = sample_weight * per_class[index]
    totals = np.bincount(index, weights=weights, minlength=len(classes))
    if np.all(totals > 0):
        return weights
    k = int(np.flatnonzero(totals <= 0)[0])
    raise ValueError(
        f"Class {_label(classes[k])!r} has no weight (sample_weight times class_weight "
        "is zero on all its samples): a class the model cannot learn. Drop "
        "its samples from y instead, or give it a positive weight."
    )
