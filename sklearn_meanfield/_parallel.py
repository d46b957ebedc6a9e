"""Restart machinery shared by every estimator.

Seeds are drawn from ``random_state`` *before* any work is dispatched, so the
result of each restart (or chain, or one-vs-rest problem) depends only on its
own seed, never on the number of workers or on the joblib backend that runs
it.  The work itself is a pure module-level function so it can be pickled and
shipped to process-based and distributed (Dask, Ray) backends.

When the library runs tasks concurrently it also caps the BLAS threads each of
them may use (:func:`blas_threads_per_worker`), so that ``n_jobs`` workers
times BLAS threads per worker does not exceed the cores of the machine.
"""

import os
import warnings
from contextlib import contextmanager
from functools import lru_cache
from numbers import Integral

import numpy as np
from joblib import cpu_count, effective_n_jobs
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval
from sklearn.utils.parallel import Parallel, delayed
from threadpoolctl import ThreadpoolController

__all__ = [
    "N_JOBS_CONSTRAINT",
    "blas_threads_for_matrix",
    "blas_threads_for_work",
    "blas_threads_per_worker",
    "dask_client",
    "factorisation_flops",
    "draw_seeds",
    "run_parallel",
    "select_best",
]

# ``n_jobs`` as joblib reads it: None, a positive count, or -1, -2, ... for
# "all cores but k - 1".  Zero means nothing in joblib (it raises deep inside a
# fit, or is quietly taken as 1), so parameter validation refuses it up front.
N_JOBS_CONSTRAINT = [
    None,
    Interval(Integral, 1, None, closed="left"),
    Interval(Integral, None, -1, closed="right"),
]

# A BLAS call gets more than one thread only above this much work (flops of
# the factorisation it belongs to): below it the threads' synchronisation
# costs more than they share, and OpenBLAS's threads spin while they wait
# for each other, so on a busy machine they lose at any size.
# ``benchmarks/bench_blas_threads.py`` measures the break-even: two idle
# threads gain from about n = 1024 (0.36 GFlop of Cholesky).
MULTITHREAD_MIN_FLOPS = 1e9


def blas_threads_for_work(flops, n_cpus=None, load=None):
    """BLAS threads worth using for calls of ``flops`` floating-point operations.

    One thread below ``MULTITHREAD_MIN_FLOPS`` (1 GFlop, a Cholesky of
    about 1440 rows): threads cannot pay for their synchronisation there.
    Above it, the cores that other processes leave free: the 1-minute load
    average, less the one core this process is taken to account for, is
    subtracted from the cores (at least one thread).

    Parameters
    ----------
    flops : float
        Work of one call, e.g. :func:`factorisation_flops` of the largest
        matrix.
    n_cpus : int or None, default=None
        Cores; None means :func:`joblib.cpu_count`.
    load : float or None, default=None
        The 1-minute load average; None reads it from the system (taken as
        0 where the system has none).

    Returns
    -------
    n_threads : int

    Examples
    --------
    >>> from sklearn_meanfield._parallel import blas_threads_for_work
    >>> blas_threads_for_work(1e8, n_cpus=2, load=0.0)
    1
    >>> blas_threads_for_work(1e10, n_cpus=2, load=0.5)
    2
    >>> blas_threads_for_work(1e10, n_cpus=2, load=2.0)  # another process busy
    1
    """
    if flops < MULTITHREAD_MIN_FLOPS:
        return 1
    n_cpus = cpu_count() if n_cpus is None else n_cpus
    if load is None:
        try:
            load = os.getloadavg()[0]
        except (OSError, AttributeError):  # not available on this system
            load = 0.0
    others = max(load - 1.0, 0.0)
    return int(max(1, min(n_cpus, np.floor(n_cpus - others + 0.5))))


def factorisation_flops(n):
    """Floating-point operations of a Cholesky factorisation of an n x n matrix.

    The unit in which the library's BLAS-thread policy measures the work of
    one call: ``n**3 / 3``.

    Parameters
    ----------
    n : int
        Rows (and columns) of the matrix.

    Returns
    -------
    flops : float

    Examples
    --------
    >>> from sklearn_meanfield._parallel import factorisation_flops
    >>> factorisation_flops(3000) / 1e9
    9.0
    """
    return n**3 / 3.0


@lru_cache(maxsize=1)
def _threadpool_controller():
    # Built once and shared: a fresh threadpool_limits scans the loaded
    # libraries (2-17 ms) on every call.
    return ThreadpoolController()


@contextmanager
def blas_threads_for_matrix(side):
    """Run the block on the BLAS threads its largest factorisation is worth.

    Parameters
    ----------
    side : int
        Number of rows of the largest square matrix the block factorises;
        its work is :func:`factorisation_flops` and the thread count
        :func:`blas_threads_for_work`.  The limit only ever lowers the
        threads the caller has (a joblib worker's share stays the ceiling).

    Yields
    ------
    None

    Examples
    --------
    >>> from threadpoolctl import threadpool_info
    >>> from sklearn_meanfield._parallel import blas_threads_for_matrix
    >>> with blas_threads_for_matrix(569):  # 0.06 GFlop: one thread
    ...     print({info["num_threads"] for info in threadpool_info()
    ...            if info["user_api"] == "blas"})
    {1}
    """
    controller = _threadpool_controller()
    current = [
        info["num_threads"] for info in controller.info() if info["user_api"] == "blas"
    ]
    threads = blas_threads_for_work(factorisation_flops(side))
    if current and threads < max(current):
        with controller.limit(limits=threads, user_api="blas"):
            yield
    else:
        yield


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


def blas_threads_per_worker(n_workers, n_cpus=None):
    """BLAS threads each of ``n_workers`` concurrent tasks may use.

    The cores are shared out evenly, with at least one thread per task:
    ``max(1, n_cpus // n_workers)``.

    Parameters
    ----------
    n_workers : int
        Number of tasks that run at the same time.
    n_cpus : int or None, default=None
        Cores available; None means :func:`joblib.cpu_count` of the machine the
        task runs on (it respects CPU affinity and container limits).

    Returns
    -------
    n_threads : int

    Examples
    --------
    >>> from sklearn_meanfield._parallel import blas_threads_per_worker
    >>> blas_threads_per_worker(2, n_cpus=8)
    4
    >>> blas_threads_per_worker(16, n_cpus=8)
    1
    """
    if n_cpus is None:
        n_cpus = cpu_count()
    return max(1, int(n_cpus) // max(1, int(n_workers)))


# How deep ``_realigned`` looks into containers and objects for arrays.
_REALIGN_DEPTH = 4


def _realigned(value, depth=_REALIGN_DEPTH):
    """``value`` with every misaligned ndarray in it replaced by an aligned copy.

    Distributed backends (Dask, Ray) rebuild arrays as views into the message
    they arrived in, at whatever byte offset the array had there: seen here,
    float64 data at addresses 15 and 31 mod 64.  NumPy does not hand
    misaligned arrays to BLAS; its own loops add in another order, so a task
    would differ from the same task run locally in the last bits (7.8e-15 in a
    perceptron's weights), and a converging iteration can amplify that.
    Aligned arrays, the only kind a local run ever sees, are returned as they
    are, without a copy.  Tuples, lists, dicts and the attributes of plain
    objects are searched ``depth`` levels deep; objects whose attributes hold
    misaligned arrays (fresh copies in the worker) are updated in place.
    """
    if isinstance(value, np.ndarray):
        if value.flags.aligned:
            return value
        return np.require(value, requirements="A")
    if depth == 0:
        return value
    if isinstance(value, tuple):
        items = [_realigned(item, depth - 1) for item in value]
        if all(new is old for new, old in zip(items, value)):
            return value  # NamedTuples keep their type, and nothing is copied
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, list):
        return [_realigned(item, depth - 1) for item in value]
    if isinstance(value, dict):
        return {key: _realigned(item, depth - 1) for key, item in value.items()}
    attributes = getattr(value, "__dict__", None)
    if isinstance(attributes, dict) and not isinstance(value, type):
        for name, item in attributes.items():
            aligned = _realigned(item, depth - 1)
            if aligned is not item:
                attributes[name] = aligned
    return value


class _RelayedWarnings:
    """A task's result and the warnings it raised in another process.

    A warning raised in a worker process stays there: joblib's process-based
    backends (loky, multiprocessing) and Dask print it on the worker's
    stderr, where ``warnings`` filters, ``pytest.warns`` and the caller's
    ``catch_warnings`` never see it, so a ConvergenceWarning of a
    one-vs-rest problem fitted with ``n_jobs=2`` was lost.  The task records
    its warnings; :func:`_dispatch` raises them again in the caller.
    """

    def __init__(self, result, records):
        self.result = result
        self.records = records

    def unwrap(self, registry):
        """Raise the recorded warnings here, in order; return the result.

        ``registry`` is shared by the tasks of one dispatch, so that the
        caller's filters apply as to warnings raised in the caller (the
        default action shows a warning once per location).
        """
        for message, category, filename, lineno in self.records:
            warnings.warn_explicit(
                message, category, filename, lineno, registry=registry
            )
        return self.result


def _run_task(function, n_workers, args, kwargs, caller_pid=None):
    # Runs inside the worker.  Arrays that travelled are realigned first.
    args, kwargs = _realigned(args), _realigned(kwargs)
    if caller_pid is None or os.getpid() == caller_pid:
        # The caller's process (sequential, or its threads, where
        # catch_warnings, which is process-wide, would race): warnings reach
        # the caller as they are.
        return _call_with_blas_limit(function, n_workers, args, kwargs)
    # Each distinct warning (text, category, place) is kept once, in order of
    # first occurrence: a loop that warns a million times costs one record.
    records = {}

    def record(message, category, filename, lineno, file=None, line=None):
        key = (str(message), category, filename, lineno)
        records.setdefault(key, (message, category, filename, lineno))

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = record
        result = _call_with_blas_limit(function, n_workers, args, kwargs)
    return _RelayedWarnings(result, list(records.values()))


def _call_with_blas_limit(function, n_workers, args, kwargs):
    if n_workers == 1:
        return function(*args, **kwargs)
    # The core count is that of the worker's machine.  In a worker *process*
    # this sets the process's limit.  In a worker *thread* of the dispatching
    # process, OpenBLAS's pthreads pool is shared with that process, whose
    # limit ``_dispatch`` has already set, and threadpoolctl lets only one
    # thread (the dispatcher) change it: this call then changes nothing.
    # Per-thread layers (OpenMP) take the limit here.
    with _threadpool_controller().limit(
        limits=blas_threads_per_worker(n_workers), user_api="blas"
    ):
        return function(*args, **kwargs)


def _unwrapped(results):
    registry = {}
    return [
        r.unwrap(registry) if isinstance(r, _RelayedWarnings) else r for r in results
    ]


def _concurrency(parallel, n_jobs, n_tasks):
    """How many of ``n_tasks`` the ``parallel`` object runs at the same time."""
    try:
        n_workers = parallel._effective_n_jobs()
    except AttributeError:  # pragma: no cover - older or newer joblib
        n_workers = effective_n_jobs(n_jobs)
    return max(1, min(int(n_workers), n_tasks))


def dask_client(parallel=None):
    """The Dask client behind a joblib backend, or None.

    Parameters
    ----------
    parallel : joblib.Parallel, default=None
        Whose backend to read; None reads the active ``parallel_config``.

    Returns
    -------
    client : distributed.Client or None
        The client when the backend is joblib's Dask backend and this code
        runs outside a Dask task; None for any other backend, or inside a
        task (nested work then goes through joblib, not a direct gather).

    Examples
    --------
    >>> from joblib import parallel_config
    >>> from sklearn_meanfield._parallel import dask_client
    >>> with parallel_config(backend="threading"):
    ...     print(dask_client())
    None
    """
    if parallel is None:
        parallel = Parallel()
    backend = getattr(parallel, "_backend", None)
    if type(backend).__name__ != "DaskDistributedBackend":
        return None
    try:
        import distributed

        distributed.get_worker()
    except ImportError:  # pragma: no cover - the backend needs distributed
        return None
    except ValueError:  # not inside a worker
        return backend.client
    # Nested in a Dask task: joblib's backend secedes from the worker's
    # thread pool while it waits, which a plain gather would not.
    return None


def _gather_on_dask(parallel, client, function, calls, n_workers, caller_pid):
    """Submit the tasks to the Dask cluster directly and gather their results.

    joblib's Dask backend waits forever for a task that the scheduler gave
    up on (``KilledWorker``: its workers died while running it, e.g. killed
    for memory), because its completion callback only runs for tasks that
    return.  Submitted directly, such a task raises here; and an interrupted
    or failed gather cancels the tasks still queued or running, so the
    cluster is free for the next fit.  Arrays the user scattered with
    ``parallel_config(backend="dask", scatter=[...])`` are passed as their
    futures; other arguments travel with each task (scattering them here
    would put them on one worker, and lose them, and every task that needs
    them, when that worker dies).
    """
    futures_of = getattr(parallel._backend, "data_futures", {})

    def remote(value):
        return futures_of.get(id(value), value)

    futures = [
        client.submit(
            _run_task,
            function,
            n_workers,
            tuple(remote(arg) for arg in args),
            {name: remote(arg) for name, arg in kwargs.items()},
            caller_pid,
            pure=False,
        )
        for args, kwargs in calls
    ]
    try:
        return client.gather(futures)
    except BaseException:
        client.cancel(futures)
        raise


def _dispatch(function, calls, *, n_jobs, verbose, prefer):
    """Run ``function(*args, **kwargs)`` for every ``(args, kwargs)`` in calls."""
    calls = list(calls)
    parallel = Parallel(n_jobs=n_jobs, verbose=verbose, prefer=prefer)
    n_workers = _concurrency(parallel, n_jobs, len(calls))
    caller_pid = os.getpid()
    client = dask_client(parallel)

    def run():
        if client is not None:
            return _gather_on_dask(
                parallel, client, function, calls, n_workers, caller_pid
            )
        return parallel(
            delayed(_run_task)(function, n_workers, args, kwargs, caller_pid)
            for args, kwargs in calls
        )

    if n_workers == 1:
        # One task at a time (in this process or a single worker): leave the
        # BLAS threads alone.
        return _unwrapped(run())
    # Thread-based workers share this process's BLAS pool: limit it here, for
    # the whole run; process-based workers limit their own in the worker.
    with _threadpool_controller().limit(
        limits=blas_threads_per_worker(n_workers), user_api="blas"
    ):
        results = run()
    return _unwrapped(results)


def run_parallel(function, tasks, *, n_jobs=None, verbose=0, prefer=None):
    """Run ``function(*task)`` for every task with joblib and return the results.

    The results come back in the order of ``tasks`` whatever the backend.  When
    more than one task runs at a time, each may use
    :func:`blas_threads_per_worker` BLAS threads while it runs.

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

    Examples
    --------
    >>> from operator import mul
    >>> from sklearn_meanfield._parallel import run_parallel
    >>> run_parallel(mul, [(2, 3), (4, 5)], n_jobs=2, prefer="threads")
    [6, 20]
    """
    calls = ((tuple(task), {}) for task in tasks)
    return _dispatch(function, calls, n_jobs=n_jobs, verbose=verbose, prefer=prefer)


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
        Position of the best result.
    best : object
        ``results[index]``.

    Examples
    --------
    >>> from sklearn_meanfield._parallel import select_best
    >>> select_best([1.0, float("nan"), 3.0, 3.0], key=float)
    (2, 3.0)
    """
    values = np.array([key(result) for result in results], dtype=float)
    if values.size == 0:
        raise ValueError("select_best needs at least one result.")
    scores = np.where(np.isfinite(values), values, -np.inf)
    index = int(np.argmax(scores))
    return index, results[index]
