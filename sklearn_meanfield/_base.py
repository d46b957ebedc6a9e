"""Pieces shared by the estimator shells (not by the numerical cores)."""

import functools

__all__ = ["atomic_fit"]


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
