"""Pieces shared by the estimator shells (not by the numerical cores)."""

import functools

import numpy as np
import scipy.sparse as sp
from sklearn.utils.validation import _check_sample_weight, validate_data

__all__ = [
    "Standardizer",
    "StandardizedRegressorMixin",
    "atomic_fit",
    "weighted_mean_std",
]


def atomic_fit(fit):
    """Make ``fit`` all-or-nothing: an exception leaves the estimator as it was.

    A fit that is interrupted (``KeyboardInterrupt`` from the user, a
    ``MemoryError``, a failure in a worker) may already have stored some fitted
    attributes.  Such a half-fitted estimator passes ``check_is_fitted`` and then
    predicts from a mixture of old and new state.  The wrapper snapshots the
    instance's attributes before the fit and restores them when the fit raises,
    so the estimator is either unfitted (as before a first fit) or still holds
    its previous complete fit.  Only the attribute bindings are restored, which
    suffices because the fits bind new arrays rather than mutate fitted ones.

    Parameters
    ----------
    fit : callable
        The estimator's ``fit(self, ...)`` method.

    Returns
    -------
    callable
        The wrapped method, with ``fit``'s name and docstring.

    Examples
    --------
    >>> from sklearn.base import BaseEstimator
    >>> class Fragile(BaseEstimator):
    ...     @atomic_fit
    ...     def fit(self, X):
    ...         self.mean_ = sum(X) / len(X)
    ...         raise KeyboardInterrupt
    >>> estimator = Fragile()
    >>> try:
    ...     estimator.fit([1.0, 2.0])
    ... except KeyboardInterrupt:
    ...     pass
    >>> hasattr(estimator, "mean_")
    False
    """

    @functools.wraps(fit)
    def wrapper(self, *args, **kwargs):
        snapshot = dict(vars(self))
        try:
            return fit(self, *args, **kwargs)
        except BaseException:
            vars(self).clear()
            vars(self).update(snapshot)
            raise

    return wrapper


# A constant column's scale is its magnitude, kept inside these bounds, so
# that squared errors and precisions in its units (scale**2 and its inverse)
# neither overflow nor underflow.  An all-zero column gets scale 1.  Target
# columns whose spread lies outside them are refused by the regressor shell.
_MIN_SCALE = 1e-150
_MAX_SCALE = 1e150
# Standardised values are clipped here: both networks saturate long before,
# and a value this far out would otherwise overflow to inf (then NaN).
_MAX_STANDARDISED = 1e150
# A column whose standard deviation is below this fraction of its mean's
# magnitude is constant up to the rounding of its values.
_CONSTANT_RTOL = 1e-12


def _power_of_two_scale(data):
    """Per column, ``2**e`` with ``max |x| / 2**e`` in [1, 2); 1 for zero columns.

    Dividing by a power of two is exact (barring underflow of negligible
    values), so moments computed on the rescaled data are the moments of the
    data rescaled, and squares neither overflow (values up to 1.8e308) nor
    underflow (values down to 1e-308).
    """
    largest = np.max(np.abs(data), axis=0)
    _, exponent = np.frexp(largest)
    # 2**(e - 1) <= max |x| < 2**e; e - 1 kept in the normal range of doubles.
    return np.where(largest > 0, np.ldexp(1.0, np.clip(exponent - 1, -1022, 1023)), 1.0)


def weighted_mean_std(data, sample_weight=None):
    """Column means and standard deviations that neither overflow nor underflow.

    Parameters
    ----------
    data : ndarray of shape (n_samples, n_columns)
        Finite values (any magnitude a double holds).
    sample_weight : ndarray of shape (n_samples,) or None, default=None
        Non-negative weights with a positive sum; an integer weight counts
        the row that many times (the moments of the repeated data).

    Returns
    -------
    mean, std : ndarray of shape (n_columns,)
        The (weighted) mean and the (weighted, biased) standard deviation.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield._base import weighted_mean_std
    >>> mean, std = weighted_mean_std(np.array([[1e300], [-1e300]]))
    >>> float(mean[0]), float(std[0])
    (0.0, 1e+300)
    >>> mean, std = weighted_mean_std(np.array([[0.0], [1.0]]), np.array([1.0, 3.0]))
    >>> float(mean[0]), round(float(std[0]) ** 2, 12)  # those of [0, 1, 1, 1]
    (0.75, 0.1875)
    """
    data = np.asarray(data, dtype=float)
    ref = _power_of_two_scale(data)
    scaled = data / ref
    if sample_weight is None:
        mean = scaled.mean(axis=0)
        std = scaled.std(axis=0)
    else:
        w = np.asarray(sample_weight, dtype=float) / np.sum(sample_weight)
        mean = w @ scaled
        std = np.sqrt(w @ (scaled - mean) ** 2)
    return mean * ref, std * ref


class Standardizer:
    """Centre and scale columns, at any magnitude a double can hold.

    The scale of a column is its standard deviation (weighted, when sample
    weights are given), computed without overflow or underflow.  A constant
    column (spread below ``1e-12`` of its magnitude) has no spread to scale
    with: its scale is ``constant_scale`` times its magnitude ``|c|`` (times
    1 for an all-zero column), kept in ``[1e-150, 1e150]``, so that what is
    predicted for it, and its uncertainty, scale with the data.
    Standardised values beyond ``1e150`` in magnitude are clipped there.

    Parameters
    ----------
    data : ndarray of shape (n_samples, n_columns)
    sample_weight : ndarray of shape (n_samples,) or None, default=None
        Non-negative weights: an integer weight counts the row that many
        times, a zero weight ignores it.
    constant_scale : float, default=1.0
        Scale of a constant column relative to its magnitude.  Inputs keep 1
        (a new input value is then measured relative to the constant);
        targets use ``1e-12``, the largest relative spread that still counts
        as constant, so that a constant target is predicted with the
        uncertainty of a target whose spread is just above the threshold.

    Attributes
    ----------
    mean, scale : ndarray of shape (n_columns,)
    constant : ndarray of shape (n_columns,), bool
        The columns without spread; their mean is their value exactly.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield._base import Standardizer
    >>> s = Standardizer(np.array([[1.0, 5.0], [3.0, 5.0]]))
    >>> s.transform(np.array([[2.0, 5.0]])).tolist()
    [[0.0, 0.0]]
    >>> s.scale.tolist()  # the constant column: its magnitude
    [1.0, 5.0]
    >>> s.inverse_mean(np.array([[1.0, 0.0]])).tolist()
    [[3.0, 5.0]]
    """

    def __init__(self, data, sample_weight=None, constant_scale=1.0):
        data = np.asarray(data, dtype=float)
        if sample_weight is not None:
            # Zero-weight rows are dropped, so that they leave no trace at all.
            keep = np.asarray(sample_weight) > 0
            data, sample_weight = data[keep], np.asarray(sample_weight)[keep]
        mean, scale = weighted_mean_std(data, sample_weight)
        exact = np.all(data == data[:1], axis=0)
        self.constant = exact | (scale <= _CONSTANT_RTOL * np.abs(mean))
        # A constant column's mean is its value, not a rounded average of it.
        self.mean = np.where(exact, data[0], mean)
        magnitude = np.where(self.mean != 0, np.abs(self.mean), 1.0)
        self.scale = np.where(
            self.constant,
            np.clip(constant_scale * magnitude, _MIN_SCALE, _MAX_SCALE),
            np.maximum(scale, np.finfo(float).tiny),
        )

    def transform(self, data):
        """Standardised copy of ``data`` (clipped to +-1e150)."""
        data = np.asarray(data, dtype=float)
        with np.errstate(over="ignore"):
            out = (data - self.mean) / self.scale
            if not np.all(np.isfinite(out)):
                # x - mean overflowed (opposite signs near the largest
                # double) or the quotient did: divide first.
                out = data / self.scale - self.mean / self.scale
        return np.clip(out, -_MAX_STANDARDISED, _MAX_STANDARDISED)

    def inverse_mean(self, data):
        """Map standardised values back to the original units."""
        with np.errstate(over="ignore"):
            out = data * self.scale + self.mean
            if not np.all(np.isfinite(out)):
                # data * scale overflowed although the sum may not: halve.
                out = 2.0 * (data * (0.5 * self.scale) + 0.5 * self.mean)
        return out

    def inverse_scale(self, data):
        """Map standardised spreads (standard deviations) to the original units."""
        return data * self.scale


class StandardizedRegressorMixin:
    """The shell both network regressors share: validation, scaling, shapes.

    The Bayesian network regressors work on standardised inputs and targets
    (their priors are stated in those units) and accept one or several
    outputs.  The mixin validates the training data, keeps the two
    :class:`Standardizer` objects (``_x_scaler``, ``_y_scaler``) and gives
    predictions the shape of the training ``y``.  Place it left of
    ``RegressorMixin``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.base import BaseEstimator, RegressorMixin
    >>> class MeanRegressor(StandardizedRegressorMixin, RegressorMixin,
    ...                     BaseEstimator):
    ...     def fit(self, X, y):
    ...         X, y, Xs, Ys = self._validate_training_data(X, y)
    ...         self.mean_ = self._y_scaler.inverse_mean(Ys.mean(axis=0))
    ...         return self
    ...     def predict(self, X):
    ...         return self._like_y(np.tile(self.mean_, (len(X), 1)))
    >>> MeanRegressor().fit([[0.0], [1.0]], [1.0, 3.0]).predict([[5.0]])
    array([2.])
    """

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.single_output = True
        tags.target_tags.multi_output = True
        return tags

    def _validate_training_data(self, X, y):
        """Validate, fit the scalers; return X, y and their standardised 2-D forms.

        At least two samples are required: one sample has no spread to
        standardise with and leaves nothing for leave-one-out.
        """
        return self._validate_weighted_training_data(X, y, None)[:4]

    def _validate_weighted_training_data(self, X, y, sample_weight):
        """:meth:`_validate_training_data` with sample weights.

        ``y`` is converted to float64 (numeric strings included; anything
        else raises ``ValueError`` here, before any work).  ``sample_weight``
        is validated by scikit-learn's rules (length, finite, non-negative,
        not all zero) and the scalers are fitted with it: an integer weight
        counts its row that many times, a zero weight drops the row.  A
        target column whose spread lies outside [1e-150, 1e150] is refused:
        the mean squared errors, variances and precisions reported in its
        units would overflow or underflow.

        Returns
        -------
        X, y : ndarray
            Validated inputs (float64) and targets (float64, shape kept).
        Xs, Ys : ndarray of shape (n_samples, n_features), (n_samples, n_outputs)
            Standardised inputs and targets.
        sample_weight : ndarray of shape (n_samples,) or None
            Validated weights (float64), None when none were given.
        """
        if y is not None and not sp.issparse(y):
            y_array = np.asarray(y)
            if y_array.dtype.kind in "OSU":
                # Strings would pass validation (y_numeric converts object
                # arrays only) and fail in the arithmetic at the end of a fit.
                try:
                    y = y_array.astype(np.float64)
                except (TypeError, ValueError) as error:
                    raise ValueError(
                        f"y must be numeric for a regressor: {error}"
                    ) from error
        X, y = validate_data(
            self,
            X,
            y,
            multi_output=True,
            y_numeric=True,
            dtype=np.float64,
            ensure_min_samples=2,
            # Row-major whatever the input (a DataFrame is column-major): the
            # scalers' sums and the models' products then round the same way
            # for the same data, and chaotic chains make the same draws.
            order="C",
        )
        y = np.ascontiguousarray(y, dtype=np.float64)
        if sample_weight is not None:
            sample_weight = _check_sample_weight(
                sample_weight, X, dtype=np.float64, ensure_non_negative=True
            )
        Y = y.reshape(len(y), -1)
        y_scaler = Standardizer(Y, sample_weight, constant_scale=_CONSTANT_RTOL)
        scale, spread = y_scaler.scale, ~y_scaler.constant
        for j in np.flatnonzero(spread & ((scale > _MAX_SCALE) | (scale < _MIN_SCALE))):
            large = scale[j] > _MAX_SCALE
            raise ValueError(
                f"Target column {j} of y has a standard deviation of "
                f"{scale[j]:.3g}, {'above' if large else 'below'} "
                f"{_MAX_SCALE if large else _MIN_SCALE:.0e}: the mean squared "
                "errors, variances and precisions reported in its units would "
                f"{'overflow' if large else 'underflow'} float64. "
                f"{'Divide' if large else 'Multiply'} y by a constant."
            )
        self._x_scaler, self._y_scaler = Standardizer(X, sample_weight), y_scaler
        return (
            X,
            y,
            self._x_scaler.transform(X),
            self._y_scaler.transform(Y),
            sample_weight,
        )

    def _like_y(self, values):
        """Drop the output axis (axis 1) when there is one output.

        Like ``GaussianProcessRegressor`` and ``MLPRegressor``, a training
        ``y`` of shape (n_samples, 1) gives 1-D predictions.
        """
        return values[:, 0] if values.shape[1] == 1 else values
