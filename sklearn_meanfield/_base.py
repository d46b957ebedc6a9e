"""Pieces shared by the estimator shells (not by the numerical cores)."""

import functools

import numpy as np
from sklearn.utils.validation import validate_data

__all__ = ["Standardizer", "StandardizedRegressorMixin", "atomic_fit"]


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


class Standardizer:
    """Centre and scale columns; constant columns keep scale 1.

    Parameters
    ----------
    data : ndarray of shape (n_samples, n_columns)

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield._base import Standardizer
    >>> s = Standardizer(np.array([[1.0, 5.0], [3.0, 5.0]]))
    >>> s.transform(np.array([[2.0, 5.0]])).tolist()
    [[0.0, 0.0]]
    >>> s.inverse_mean(np.array([[1.0, 0.0]])).tolist()
    [[3.0, 5.0]]
    """

    def __init__(self, data):
        data = np.asarray(data, dtype=float)
        self.mean = data.mean(axis=0)
        scale = data.std(axis=0)
        # A constant column carries no information; scale 1 avoids 0 / 0.
        self.scale = np.where(scale > 1e-12 * (1.0 + np.abs(self.mean)), scale, 1.0)

    def transform(self, data):
        """Standardised copy of ``data``."""
        return (np.asarray(data, dtype=float) - self.mean) / self.scale

    def inverse_mean(self, data):
        """Map standardised values back to the original units."""
        return data * self.scale + self.mean


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
        X, y = validate_data(
            self,
            X,
            y,
            multi_output=True,
            y_numeric=True,
            dtype=np.float64,
            ensure_min_samples=2,
        )
        Y = y.reshape(len(y), -1)
        self._y_ndim = y.ndim
        self._x_scaler, self._y_scaler = Standardizer(X), Standardizer(Y)
        return X, y, self._x_scaler.transform(X), self._y_scaler.transform(Y)

    def _like_y(self, values):
        """Drop the output axis (axis 1) when the training ``y`` was 1-D."""
        return values[:, 0] if self._y_ndim == 1 else values
