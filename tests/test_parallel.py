import warnings
from typing import NamedTuple

import numpy as np
import pytest
from joblib import cpu_count, parallel_config
from sklearn.exceptions import ConvergenceWarning
from threadpoolctl import threadpool_limits

from sklearn_meanfield._parallel import (
    blas_threads_per_worker,
    draw_seeds,
    run_parallel,
    select_best,
)


def _noisy_sum(scale, seed):
    # A pure, module-level function so process backends can pickle it.
    rng = np.random.default_rng(seed)
    return scale * rng.standard_normal(5)


def test_draw_seeds_reproducible_and_distinct():
    a = draw_seeds(0, 50)
    b = draw_seeds(np.random.RandomState(0), 50)
    np.testing.assert_array_equal(a, b)
    assert len(np.unique(a)) == 50
    assert a.min() >= 0 and a.max() < 2**31 - 1


def test_draw_seeds_consumes_the_callers_generator():
    rng = np.random.RandomState(3)
    first = draw_seeds(rng, 4)
    second = draw_seeds(rng, 4)
    assert not np.array_equal(first, second)


def _seeded_tasks(random_state, n_tasks, scale=2.0):
    # The estimators' pattern: seeds drawn up front from the caller's
    # random_state, then one argument tuple per task (its seed, plus whatever
    # else the task needs, e.g. its subtask or initial state).
    return [(scale, int(seed)) for seed in draw_seeds(random_state, n_tasks)]


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_seeded_tasks_independent_of_n_jobs(n_jobs):
    reference = [_noisy_sum(2.0, int(s)) for s in draw_seeds(7, 6)]
    results = run_parallel(_noisy_sum, _seeded_tasks(7, 6), n_jobs=n_jobs)
    assert len(results) == 6
    for expected, got in zip(reference, results):
        np.testing.assert_array_equal(expected, got)


def test_seeded_tasks_threading_backend_matches_sequential():
    sequential = run_parallel(_noisy_sum, _seeded_tasks(11, 5, 1.0), n_jobs=1)
    with parallel_config(backend="threading", n_jobs=2):
        threaded = run_parallel(_noisy_sum, _seeded_tasks(11, 5, 1.0))
    for a, b in zip(sequential, threaded):
        np.testing.assert_array_equal(a, b)


def test_seeded_tasks_process_backend_matches_sequential():
    sequential = run_parallel(_noisy_sum, _seeded_tasks(1, 4, 3.0), n_jobs=1)
    with parallel_config(backend="loky", n_jobs=2):
        processes = run_parallel(_noisy_sum, _seeded_tasks(1, 4, 3.0))
    for a, b in zip(sequential, processes):
        np.testing.assert_array_equal(a, b)


def _walk(start, seed, n_steps):
    # A task with a per-task initial state next to its seed.
    steps = np.random.default_rng(seed).standard_normal((n_steps, start.size))
    return start + np.cumsum(steps, axis=0)[-1]


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_seeds_and_initial_states_travel_with_their_task(n_jobs):
    starts = [np.full(3, float(k)) for k in range(4)]
    seeds = draw_seeds(np.random.RandomState(5), len(starts))
    tasks = [(start, int(seed), 10) for start, seed in zip(starts, seeds)]
    with parallel_config(backend="loky"):
        results = run_parallel(_walk, tasks, n_jobs=n_jobs)
    for (start, seed, n_steps), got in zip(tasks, results):
        np.testing.assert_array_equal(got, _walk(start, seed, n_steps))


def test_run_parallel_keeps_task_order():
    tasks = [(float(k), k) for k in range(6)]
    results = run_parallel(_noisy_sum, tasks, n_jobs=2)
    for (scale, seed), got in zip(tasks, results):
        np.testing.assert_array_equal(got, _noisy_sum(scale, seed))


def test_select_best_skips_non_finite_and_breaks_ties_first():
    results = [{"v": 1.0}, {"v": np.nan}, {"v": 3.0}, {"v": 3.0}, {"v": np.inf}]
    index, best = select_best(results, key=lambda r: r["v"])
    assert index == 2 and best is results[2]
    with pytest.raises(ValueError, match="at least one"):
        select_best([], key=float)


def _blas_threads(_):
    # Runs in the worker: the BLAS thread limit it sees.
    from threadpoolctl import threadpool_info

    return [
        pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"
    ]


def _main_blas_threads():
    return _blas_threads(None)


needs_blas = pytest.mark.skipif(
    not _main_blas_threads(), reason="no BLAS library seen by threadpoolctl"
)


@needs_blas
@pytest.mark.parametrize("backend", ["threading", "loky"])
def test_blas_threads_limited_inside_workers(backend):
    before = _main_blas_threads()
    expected = blas_threads_per_worker(2)
    with threadpool_limits(limits=cpu_count(), user_api="blas"):
        # Start from the machine's full count, so the limit is not vacuous
        # when the machine has more than one core.
        with parallel_config(backend=backend, n_jobs=2):
            seen = run_parallel(_blas_threads, [(k,) for k in range(4)])
    assert all(threads == [expected] * len(before) for threads in seen), seen
    # The caller's own limit is back once the work is done.
    assert _main_blas_threads() == before


@needs_blas
def test_blas_threads_untouched_when_sequential():
    with threadpool_limits(limits=cpu_count(), user_api="blas"):
        full = _main_blas_threads()
        seen = run_parallel(_blas_threads, [(0,), (1,)], n_jobs=1)
    assert seen == [full, full]


def test_blas_threads_per_worker_shares_cores():
    assert blas_threads_per_worker(1, n_cpus=4) == 4
    assert blas_threads_per_worker(3, n_cpus=8) == 2
    assert blas_threads_per_worker(9, n_cpus=8) == 1
    assert blas_threads_per_worker(2) == max(1, cpu_count() // 2)


def _misaligned_copy(array):
    # The data one byte past an aligned address, as a distributed backend may
    # hand it over from the middle of a message.
    buffer = np.zeros(array.nbytes + 1, dtype=np.uint8)
    view = buffer[1:].view(array.dtype).reshape(array.shape)
    view[...] = array
    assert not view.flags.aligned
    return view


class _Holder:
    def __init__(self, matrix):
        self.matrix = matrix


def _alignment_report(matrix, nested, holder, seed):
    return (
        matrix.flags.aligned,
        nested["inner"][0].flags.aligned,
        holder.matrix.flags.aligned,
        float(matrix.sum() + nested["inner"][0].sum() + holder.matrix.sum()),
    )


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_tasks_receive_aligned_arrays(n_jobs):
    # Distributed backends rebuild arrays at arbitrary byte offsets; NumPy
    # does not pass misaligned arrays to BLAS, and its own loops sum in
    # another order.  Every task gets aligned copies with the same values.
    matrix = np.arange(12.0).reshape(4, 3)
    args = (
        _misaligned_copy(matrix),
        {"inner": [_misaligned_copy(matrix)]},
        _Holder(_misaligned_copy(matrix)),
    )
    with parallel_config(backend="threading"):
        tasks = [(*args, int(seed)) for seed in draw_seeds(0, 2)]
        reports = run_parallel(_alignment_report, tasks, n_jobs=n_jobs)
    for report in reports:
        assert report == (True, True, True, 3 * matrix.sum())


def test_aligned_arrays_are_passed_without_a_copy():
    from sklearn_meanfield._parallel import _realigned

    matrix = np.ones((3, 3))
    holder = _Holder(matrix)
    args = _realigned((matrix, [matrix], holder))
    assert args[0] is matrix and args[1][0] is matrix and holder.matrix is matrix


class _Pair(NamedTuple):
    first: np.ndarray
    second: float


def test_named_tuples_keep_their_type_when_realigned():
    # Task arguments that are NamedTuples reached workers as plain tuples.
    from sklearn_meanfield._parallel import _realigned

    matrix = np.ones((3, 3))
    pair = _Pair(matrix, 2.0)
    assert _realigned(pair) is pair
    moved = _realigned(_Pair(_misaligned_copy(matrix), 2.0))
    assert type(moved) is _Pair and moved.second == 2.0
    assert moved.first.flags.aligned
    np.testing.assert_array_equal(moved.first, matrix)


def _warn_and_square(value):
    warnings.warn(f"task {value} warns", ConvergenceWarning)
    if value == 2:
        warnings.warn("a second warning", UserWarning)
    return value * value


@pytest.mark.parametrize("backend", ["sequential", "threading", "loky"])
def test_warnings_of_worker_processes_reach_the_caller(backend):
    # A process-based worker's own warnings go to its stderr, out of reach of
    # the caller's filters; run_parallel relays them, in task order.
    with parallel_config(backend=backend, n_jobs=2):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            results = run_parallel(_warn_and_square, [(1,), (2,), (3,)])
    assert results == [1, 4, 9]
    relayed = [(w.category, str(w.message)) for w in caught]
    if backend == "threading":  # threads interleave; the set is what counts
        relayed = sorted(relayed, key=str)
    expected = [
        (ConvergenceWarning, "task 1 warns"),
        (ConvergenceWarning, "task 2 warns"),
        (UserWarning, "a second warning"),
        (ConvergenceWarning, "task 3 warns"),
    ]
    assert relayed == (
        sorted(expected, key=str) if backend == "threading" else expected
    )
    assert all(w.filename.endswith("test_parallel.py") for w in caught)


def test_relayed_warnings_obey_the_callers_filters():
    # The default action shows a warning once per location, across the tasks
    # of one run, as for warnings raised in the caller; "error" raises.
    with parallel_config(backend="loky", n_jobs=2):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            run_parallel(_warn_and_square, [(1,), (1,)])
        assert [str(w.message) for w in caught] == ["task 1 warns"]
        with warnings.catch_warnings():
            warnings.simplefilter("error", ConvergenceWarning)
            with pytest.raises(ConvergenceWarning, match="task 1 warns"):
                run_parallel(_warn_and_square, [(1,)])


def _warn_many_times(n):
    for _ in range(n):
        warnings.warn("the same warning", RuntimeWarning)
    warnings.warn("another one", RuntimeWarning)
    return n


def test_a_repeated_worker_warning_is_relayed_once():
    # A loop that warns on every pass must not ship every repetition back.
    with parallel_config(backend="loky", n_jobs=2):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run_parallel(_warn_many_times, [(10_000,), (3,)])
    assert [str(w.message) for w in caught] == [
        "the same warning",
        "another one",
        "the same warning",
        "another one",
    ]


def test_blas_threads_follow_the_work_and_the_load():
    from sklearn_meanfield._parallel import (
        MULTITHREAD_MIN_FLOPS,
        blas_threads_for_work,
        factorisation_flops,
    )

    # Below the measured crossover: one thread, however idle the machine.
    assert factorisation_flops(1400) < MULTITHREAD_MIN_FLOPS
    assert blas_threads_for_work(factorisation_flops(1400), n_cpus=8, load=0) == 1
    # Above it: the cores other processes leave free (this process counts
    # for one core of the load average).
    big = factorisation_flops(4000)
    assert blas_threads_for_work(big, n_cpus=8, load=0.3) == 8
    assert blas_threads_for_work(big, n_cpus=8, load=4.0) == 5
    assert blas_threads_for_work(big, n_cpus=2, load=2.0) == 1
    assert blas_threads_for_work(big, n_cpus=2, load=50.0) == 1


def test_blas_limit_for_a_large_matrix_on_a_busy_machine(monkeypatch):
    from threadpoolctl import threadpool_info

    from sklearn_meanfield import _parallel

    def blas_threads():
        return {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}

    # A 569-row problem (breast cancer) used two threads before, which spin
    # against each other when another process holds a core: now one.
    with _parallel.blas_threads_for_matrix(569):
        assert blas_threads() == {1}
    # A large one gets one thread too when the other cores are busy ...
    monkeypatch.setattr(_parallel.os, "getloadavg", lambda: (40.0, 40.0, 40.0))
    with _parallel.blas_threads_for_matrix(5000):
        assert blas_threads() == {1}
    # ... and otherwise keeps what the caller allowed (never raised above it).
    monkeypatch.setattr(_parallel.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    outside = blas_threads()
    with _parallel.blas_threads_for_matrix(5000):
        assert blas_threads() == outside
