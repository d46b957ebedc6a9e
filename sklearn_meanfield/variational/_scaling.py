"""Standardisation of inputs and targets, kept with the fitted model."""

import numpy as np

__all__ = ["Standardizer"]


class Standardizer:
    """Centre and scale columns; constant columns keep scale 1.

    Parameters
    ----------
    data : ndarray of shape (n_samples, n_columns)

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.variational._scaling import Standardizer
    >>> s = Standardizer(np.array([[1.0, 5.0], [3.0, 5.0]]))
    >>> s.transform(np.array([[2.0, 5.0]])).tolist()
    [[0.0, 0.0]]
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
