"""Restart machinery shared by every estimator.

Seeds are drawn from ``random_state`` *before* any work is dispatched, so the
result of each restart (or chain, or one-vs-rest problem) depends only on its
own seed, never on the number of workers or on the joblib backend that runs
it.  The work itself is a pure module-level function so it can be pickled and
shipped to process-based and distributed (Dask, Ray) backends.
"""

import numpy as np
from sklearn.utils import check_random_state
from sklearn.utils.parallel import Parallel, delayed

__all__ = ["draw_seeds", "run_parallel", "run_restarts", "select_best"]

# Seeds are drawn in [0, 2**31 - 1): valid for np.random.RandomState,
# np.random.default_rng and every scikit-learn ``random_state`` argument.
_MAX_SEED = np.iinfo(np.int32).max


def draw_seeds(random_state, n_seeds):
    """Draw ``n_seeds`` independent integer seeds from ``random_state``.

    Parameters
    ----------
    random_state : None, int or numpy.random.RandomState
        Source of randomness, as accepted by
        :func:`sklearn.utils.check_random_state`.
    n_seeds : int
        Number of seeds to draw.

    Returns
    -------
    seeds : ndarray of shape (n_seeds,), dtype int64
        Seeds in ``[0, 2**31 - 1)``.

    Examples
    --------
    >>> from sklearn_meanfield._parallel import draw_seeds
    >>> draw_seeds(0, 3).tolist() == draw_seeds(0, 3).tolist()
    True
    """
    rng = check_random_state(random_state)
    return rng.randint(_MAX_SEED, size=int(n_seeds)).astype(np.int64)


def run_parallel(function, tasks, *, n_jobs=None, verbose=0, prefer=None):
    """Run ``function(*task)`` for every task with joblib and return the results.

    The results come back in the order of ``tasks`` whatever the backend.

    Parameters
    ----------
    function : callable
        A module-level (picklable) function.
    tasks : iterable of tuple
        Positional arguments of each call.
    n_jobs : int or None, default=None
        Number of workers; None defers to :func:`joblib.parallel_config`, so a
        backend chosen by the user (Dask, Ray) takes over.
    verbose : int, default=0
        joblib's verbosity.
    prefer : {"processes", "threads"} or None, default=None
        Soft hint for the default backend.

    Returns
    -------
    results : list
        ``[function(*task) for task in tasks]``.
    """
    return Parallel(n_jobs=n_jobs, verbose=verbose, prefer=prefer)(
        delayed(function)(*task) for task in tasks
    )


def run_restarts(
    function,
    n_restarts,
    random_state,
    *,
    args=(),
    kwargs=None,
    n_jobs=None,
    verbose=0,
    prefer=None,
):
    """Run ``function(*args, seed=seed, **kwargs)`` once per independent seed.

    The seeds are drawn from ``random_state`` up front with :func:`draw_seeds`,
    so the list of results is identical for every ``n_jobs`` and every joblib
    backend.

    Parameters
    ----------
    function : callable
        A module-level function taking a keyword argument ``seed`` (an int).
    n_restarts : int
        Number of independent runs.
    random_state : None, int or numpy.random.RandomState
        Source of the seeds.
    args : tuple, default=()
        Positional arguments shared by every run.
    kwargs : dict or None, default=None
        Keyword arguments shared by every run.
    n_jobs : int or None, default=None
        Number of workers (see :func:`run_parallel`).
    verbose : int, default=0
        joblib's verbosity.
    prefer : {"processes", "threads"} or None, default=None
        Soft hint for the default backend.

    Returns
    -------
    results : list of length n_restarts
        The return values, in seed order.

    Examples
    --------
    >>> from sklearn_meanfield._parallel import run_restarts
    >>> def first_draw(seed):
    ...     import numpy as np
    ...     return np.random.RandomState(seed).rand()
    >>> a = run_restarts(first_draw, 3, random_state=0, n_jobs=1)
    >>> b = run_restarts(first_draw, 3, random_state=0, n_jobs=2, prefer="threads")
    >>> a == b
    True
    """
    kwargs = {} if kwargs is None else dict(kwargs)
    seeds = draw_seeds(random_state, n_restarts)
    return Parallel(n_jobs=n_jobs, verbose=verbose, prefer=prefer)(
        delayed(function)(*args, seed=int(seed), **kwargs) for seed in seeds
    )


def select_best(results, key):
    """Return the index and item of ``results`` with the largest finite ``key``.

    Ties are broken by the first occurrence, so the choice is deterministic.
    Items whose key is NaN or infinite are never preferred to a finite one.

    Parameters
    ----------
    results : sequence
        Restart results.
    key : callable
        Maps a result to a float (larger is better, e.g. a log evidence).

    Returns
    -------
    index : int
    best : object
    """
    values = np.array([key(result) for result in results], dtype=float)
    if values.size == 0:
        raise ValueError("select_best needs at least one result.")
    scores = np.where(np.isfinite(values), values, -np.inf)
    index = int(np.argmax(scores))
    return index, results[index]
