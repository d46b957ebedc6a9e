"""Kernels on the data's own scale: the default kernel and a start for the
optimiser that a kernel's initial values can miss.

An RBF kernel whose length scale is far below the distances between the
inputs makes every off-diagonal kernel value vanish (64 standardised
features: distances of about 10, ``exp(-50)`` at length scale 1); there the
evidence rises towards the constant model, and a gradient method follows it
to the length scale's upper bound.  Starting from the median distance
between the inputs, the kernel sees the data's structure from the first
evaluation on.
"""

import numpy as np
from scipy.spatial.distance import pdist
from sklearn.gaussian_process.kernels import RBF
from sklearn.gaussian_process.kernels import ConstantKernel as C

__all__ = [
    "BINDING_AMPLITUDE_SLOPE",
    "DEFAULT_AMPLITUDE_BOUNDS",
    "LIFTED_AMPLITUDE_BOUNDS",
    "data_length_scale",
    "default_kernel",
    "ignores_inputs",
    "length_scale_outside_bounds",
    "with_length_scale",
    "with_lifted_amplitude",
]

# Rows the median distance is computed from (evenly spaced through the data):
# 2000 rows give the median to about 2% at the cost of 2e6 distances.
_MEDIAN_ROWS = 2000

# The default kernel's amplitude (the prior variance of the latent function).
# Beyond a variance of 1e3 (standard deviation 32) the probit and logistic
# likelihoods are saturated everywhere but within 1/32 of the decision
# boundary; separable classes drive the amplitude up without end, and more
# than this changes no prediction while EP needs more sweeps.
DEFAULT_AMPLITUDE_BOUNDS = (1e-5, 1e3)

# Where the evidence still climbs steeply at that bound, the bound, not the
# saturated likelihood, holds the model back, and the search goes on to this
# one.  Steeply: more than BINDING_AMPLITUDE_SLOPE nats of log evidence per
# e-fold of the amplitude.  Saturated, separable classes stay below it (0.8
# at most on the digits' one-vs-rest problems, which gain under a nat up to
# 1e5); raw wine's two classes on features of unequal scales climb at 5.5
# and end 17 nats higher, with a longer length scale.
LIFTED_AMPLITUDE_BOUNDS = (1e-5, 1e5)
BINDING_AMPLITUDE_SLOPE = 1.0

# The default length scale's bounds, relative to the median distance.
_LENGTH_SCALE_RANGE = (1e-3, 1e3)

# A kernel whose correlation between every pair of training inputs is above
# this is a constant model, and one with none above 1 minus this white noise:
# neither tells near points from far ones.
_CONSTANT_CORRELATION = 0.99


def data_length_scale(X, sample_weight=None):
    """The median Euclidean distance between the distinct rows of ``X``.

    Distinct rows of positive weight only, so that a row given weight 2 and
    the same row repeated give the same value, and a row of weight 0 is
    absent; and on at most ``_MEDIAN_ROWS`` of them, evenly spaced in sorted
    order (no random draw: the same data in any order give the same value).
    Rows are scaled by the largest absolute entry before the distances are
    taken, so values near the ends of the floating-point range neither
    overflow nor underflow.  1.0 when there are fewer than two distinct rows.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.tap._kernels import data_length_scale
    >>> float(data_length_scale(np.array([[0.0], [1.0], [3.0]])))
    2.0
    >>> float(data_length_scale(np.array([[0.0], [1.0], [1.0], [3.0]])))
    2.0
    >>> print(f"{data_length_scale(np.array([[0.0], [1e300], [3e300]])):.6g}")
    2e+300
    """
    rows = _distinct_rows(X, sample_weight, _MEDIAN_ROWS)
    scale = np.max(np.abs(rows)) if rows.size else 0.0
    if not np.isfinite(scale) or scale == 0.0 or len(rows) < 2:
        return 1.0
    median = float(np.median(pdist(rows / scale))) * scale
    return median if np.isfinite(median) and median > 0.0 else 1.0


def default_kernel(X, sample_weight=None):
    """``ConstantKernel(1.0) * RBF(ell)``, ``ell`` the median distance between
    the distinct rows of ``X`` of positive weight (:func:`data_length_scale`).

    The length scale may range over a factor 1000 either way of ``ell``; the
    amplitude within :data:`DEFAULT_AMPLITUDE_BOUNDS`.
    """
    ell = data_length_scale(X, sample_weight)
    low, high = _LENGTH_SCALE_RANGE
    return C(1.0, DEFAULT_AMPLITUDE_BOUNDS) * RBF(ell, (low * ell, high * ell))


def with_lifted_amplitude(kernel):
    """A copy of the default kernel (:func:`default_kernel`) whose amplitude
    may range within :data:`LIFTED_AMPLITUDE_BOUNDS`.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.tap._kernels import with_lifted_amplitude
    >>> kernel = default_kernel(np.array([[0.0], [2.0]]))
    >>> with_lifted_amplitude(kernel).k1.constant_value_bounds
    (1e-05, 100000.0)
    >>> kernel.k1.constant_value_bounds
    (1e-05, 1000.0)
    """
    lifted = kernel.clone_with_theta(kernel.theta)
    return lifted.set_params(k1__constant_value_bounds=LIFTED_AMPLITUDE_BOUNDS)


def _length_scale_names(kernel):
    """Names (``get_params`` keys) of the free length scales of ``kernel``."""
    free = {h.name for h in kernel.hyperparameters if not h.fixed}
    return [
        name
        for name in kernel.get_params()
        if name.split("__")[-1] == "length_scale" and name in free
    ]


def with_length_scale(kernel, X, sample_weight=None):
    """``kernel`` with every free length scale set to the median distance
    between the distinct rows of ``X`` of positive weight (clipped to its
    bounds); None when it has no free length scale."""
    names = _length_scale_names(kernel)
    if not names:
        return None
    ell = data_length_scale(X, sample_weight)
    params = kernel.get_params()
    values = {}
    for name in names:
        bounds = np.asarray(params[name + "_bounds"], dtype=float)
        values[name] = np.clip(
            np.full(np.shape(params[name]), ell), bounds[..., 0], bounds[..., -1]
        )
        if np.ndim(params[name]) == 0:
            values[name] = float(values[name])
    return kernel.clone_with_theta(kernel.theta).set_params(**values)


def length_scale_outside_bounds(kernel, X, sample_weight=None):
    """``(ell, bounds)`` for the first free length scale of ``kernel`` whose
    bounds exclude the median distance ``ell`` of ``X`` by more than a
    factor 1000 (None when every one can reach it)."""
    ell = data_length_scale(X, sample_weight)
    params = kernel.get_params()
    for name in _length_scale_names(kernel):
        low, high = np.asarray(params[name + "_bounds"], dtype=float).reshape(-1, 2)[0]
        if not 1e-3 * low <= ell <= 1e3 * high:
            return ell, (float(low), float(high))
    return None


def _distinct_rows(X, sample_weight, max_rows):
    """At most ``max_rows`` distinct rows of positive weight, evenly spaced
    in sorted order: the same for repeated and weighted rows, in any order."""
    X = np.asarray(X, dtype=float)
    if sample_weight is not None:
        X = X[np.asarray(sample_weight) > 0]
    rows = np.unique(X, axis=0) if X.ndim == 2 and len(X) else X
    return rows[:: max(1, len(rows) // max_rows)]


def ignores_inputs(kernel, X, sample_weight=None, max_rows=500):
    """Whether ``kernel`` is blind to the geometry of ``X``.

    True when it correlates every pair of rows above
    ``_CONSTANT_CORRELATION`` (a constant model: the length scale far above
    the distances) or no pair above ``1 - _CONSTANT_CORRELATION`` (white
    noise: far below them, where the evidence's gradient in the length scale
    vanishes and the optimiser stays where it started).  Computed on at most
    ``max_rows`` distinct rows of ``X`` of positive weight.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.gaussian_process.kernels import RBF
    >>> from sklearn_meanfield.tap._kernels import ignores_inputs
    >>> X = np.random.RandomState(0).normal(size=(50, 64))  # distances ~11
    >>> [ignores_inputs(RBF(ell), X) for ell in (1.0, 10.0, 1e4)]
    [True, False, True]
    """
    rows = _distinct_rows(X, sample_weight, max_rows)
    if len(rows) < 2:
        return False
    K = np.asarray(kernel(rows), dtype=float)
    scale = np.sqrt(np.diag(K))
    with np.errstate(all="ignore"):
        correlation = (K / np.outer(scale, scale))[~np.eye(len(rows), dtype=bool)]
    if not np.all(np.isfinite(correlation)):
        return False
    return bool(
        correlation.min() > _CONSTANT_CORRELATION
        or correlation.max() < 1.0 - _CONSTANT_CORRELATION
    )
