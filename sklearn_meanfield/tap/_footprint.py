"""What a Gaussian-process fit holds in memory at its peak, counted up front.

An exact GP fit holds n x n arrays; how many at once depends on the kernel
(scikit-learn's kernels build temporaries of the size of their gradient: a
``ConstantKernel() * RBF()`` call with its gradient peaks at 9 n x n arrays,
an ARD RBF on five inputs at 21), on the EP solver and on how many problems
run at once.  The kernel's share is measured, not guessed: one call on a
small probe of the rows under :mod:`tracemalloc` (numpy reports its
allocations there), at two probe sizes so that the rows' own O(n) arrays are
told apart from the O(n^2) ones.

The solver's share is a count of n x n arrays per solve of the EP solvers
of :mod:`sklearn_meanfield.tap._ep`, by likelihood, and for the evidence
gradient on top of the kernel and its gradient; a fitted problem keeps one
n x n factor for its predictive variances.  ``tests/test_gp_footprint.py``
holds the estimate against the peak resident memory of whole fits.
"""

import tracemalloc

from .._memory import check_memory, format_bytes

__all__ = ["gp_fit_peak_bytes", "check_gp_fit_memory"]

# Peak resident memory of an EP solve above the kernel matrix, in n x n arrays
# (peak resident set of solves at n = 1000-2000).  The noisy step needs most:
# its negative sites keep a second factor.  Part of it is LAPACK workspace and
# heap that tracemalloc does not see, hence resident memory.
_EP_WORK = {"probit": 3.1, "logistic": 3.4}
_EP_WORK_OTHER = 5.2
_GRADIENT_WORK = 4.2  # ... the evidence gradient above K and its gradient
_KEPT = 1.0  # ... a fitted binary problem keeps (its predictive factor)
_MIN_PROBE, _MAX_PROBE = 48, 512  # rows of the kernel probes


def _kernel_call_peak(kernel, X, eval_gradient):
    """Peak traced bytes of one ``kernel(X)`` call, or None if not measurable."""
    if tracemalloc.is_tracing():  # the caller is profiling: leave it alone
        return None
    tracemalloc.start()
    try:
        kernel(X, eval_gradient=eval_gradient)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def kernel_call_bytes(kernel, X, n_samples, eval_gradient):
    """Peak bytes of a kernel call on ``n_samples`` rows like those of ``X``.

    The call is measured on probes of ``X``'s first ``m`` and ``2 m`` rows,
    with ``m`` four times the number of columns (at least 48): there the
    n x n arrays dominate the rows' own copies, the peak grows fourfold from
    one probe to the next, and its n^2 coefficient carries over to
    ``n_samples``.  Where that cannot be measured (too few rows, many
    columns, ``X`` not an array, tracemalloc already in use, or the probes
    not in the quadratic regime) three arrays per kernel matrix and gradient
    slice are counted: scikit-learn's kernels make two temporaries of each
    (9 arrays for ``ConstantKernel() * RBF()`` with its gradient).
    """
    n_arrays = 1 + (kernel.n_dims if eval_gradient else 0)
    counted = 3.0 * 8.0 * n_samples**2 * n_arrays
    if not hasattr(X, "shape") or X.ndim != 2:
        return counted
    m = max(_MIN_PROBE, 4 * X.shape[1])
    if 2 * m > min(len(X), _MAX_PROBE):
        return counted
    peaks = [_kernel_call_peak(kernel, X[:size], eval_gradient) for size in (m, 2 * m)]
    if None in peaks or peaks[1] < 3.5 * peaks[0]:
        return counted
    return peaks[1] / (2 * m) ** 2 * n_samples**2


def gp_fit_peak_bytes(
    kernel,
    X,
    *,
    optimise=True,
    n_problems=1,
    n_concurrent=1,
    method="tap",
    likelihood="probit",
):
    """Peak bytes of a TAP GP classifier fit, all concurrent workers counted.

    Parameters
    ----------
    kernel : Kernel
        The (unfitted) kernel.
    X : ndarray of shape (n_samples, n_features) or list
        The training inputs (a few rows are used for the kernel probe).
    optimise : bool, default=True
        Whether the kernel hyperparameters are optimised (kernel gradients are
        built).
    n_problems : int, default=1
        Binary problems fitted (one per class for one-vs-rest with three or
        more classes); each finished problem's factor is held until the end.
    n_concurrent : int, default=1
        Problems or optimiser restarts that run at the same time (joblib
        workers, at most ``n_problems`` for several problems, at most the
        restarts for one); each holds a full problem's peak.
    method : {"tap", "naive"}, default="tap"
        The naive mean field solves EP first, then its own iteration.
    likelihood : str, default="probit"
        The likelihood's name (its EP moments hold different work arrays).

    Returns
    -------
    peak : float
        Bytes.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.gaussian_process.kernels import RBF, ConstantKernel
    >>> from sklearn_meanfield.tap._footprint import gp_fit_peak_bytes
    >>> X = np.random.RandomState(0).normal(size=(200, 3))
    >>> kernel = ConstantKernel() * RBF()
    >>> peak = gp_fit_peak_bytes(kernel, X, optimise=True)
    >>> round(peak / (8 * 200**2))  # n x n arrays at the peak
    9
    """
    n = len(X)
    square = 8.0 * n**2
    ep_work = _EP_WORK.get(likelihood, _EP_WORK_OTHER)
    solve = max(kernel_call_bytes(kernel, X, n, False), square * (1.0 + ep_work))
    if method == "naive":
        solve += square * _KEPT
    problem = solve
    if optimise:
        gradient_arrays = square * (1.0 + kernel.n_dims)
        evaluation = max(
            kernel_call_bytes(kernel, X, n, True),
            gradient_arrays + square * max(ep_work, _GRADIENT_WORK),
        )
        problem = max(problem, evaluation)
    # Workers at their peak, plus the factors of the problems already done.
    kept = square * _KEPT * max(n_problems - n_concurrent, 0)
    return n_concurrent * problem + kept


def check_gp_fit_memory(kernel, X, **options):
    """Raise ``MemoryError`` before a GP fit whose arrays cannot fit.

    Parameters
    ----------
    kernel, X, **options
        As for :func:`gp_fit_peak_bytes`.

    Raises
    ------
    MemoryError
        With the estimated peak and what to do instead.
    """
    n = len(X)
    needed = gp_fit_peak_bytes(kernel, X, **options)
    concurrent = options.get("n_concurrent", 1)
    per_worker = (
        f" ({concurrent} concurrent workers, {format_bytes(needed / concurrent)} "
        "each: a smaller n_jobs needs less)"
        if concurrent > 1
        else ""
    )
    check_memory(
        needed,
        f"A Gaussian-process fit on {n} samples{per_worker}",
        "Subsample the data, fix the kernel (optimizer=None needs no gradient "
        "arrays), or use TAPPerceptronClassifier (weight space) for linear models.",
    )
