"""Where a second BLAS thread starts to pay: the crossover behind the library's
BLAS-thread policy (``sklearn_meanfield._parallel.blas_threads_for``).

For square problems of growing size it times the factorisation work one EP
sweep does (a Cholesky, a triangular inverse and a matrix product) on one
BLAS thread and on all cores, side by side in one process, on an idle machine
and while a second process keeps one core busy (what a user's other work, or
a CI neighbour, does).  It prints the time ratio one thread / all threads:
above 1 the threads pay.  OpenBLAS's threads spin while they wait for each
other, so under load a second thread can cost many times what it saves.

Run: ``python -m benchmarks.bench_blas_threads [--quick]``.
"""

import argparse
import multiprocessing
import time

import numpy as np
from scipy.linalg import cholesky, lapack
from threadpoolctl import threadpool_limits

from sklearn_meanfield._parallel import factorisation_flops


def _busy(stop):
    x = 0
    while not stop.is_set():
        x += 1


def _sweep(A):
    L = cholesky(A, lower=True, check_finite=False)
    inverse, _ = lapack.dtrtri(L, lower=1)
    return inverse @ L


def _best_time(A, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        _sweep(A)
        times.append(time.perf_counter() - start)
    return min(times)


def measure(sizes, repeats, threads):
    rows = []
    for n in sizes:
        rng = np.random.RandomState(0)
        B = rng.normal(size=(n, n))
        A = B @ B.T / n + np.eye(n)
        with threadpool_limits(1, user_api="blas"):
            one = _best_time(A, repeats)
        with threadpool_limits(threads, user_api="blas"):
            many = _best_time(A, repeats)
        rows.append((n, factorisation_flops(n), one, many))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    sizes = (
        [256, 512, 1024, 2048]
        if args.quick
        else [256, 512, 768, 1024, 1536, 2048, 3072]
    )
    repeats = 3 if args.quick else 5
    threads = multiprocessing.cpu_count()
    print(f"# BLAS threads: 1 against {threads}; time of chol + trtri + gemm")
    for label in ("idle", "one core busy"):
        stop = multiprocessing.Event()
        worker = None
        if label != "idle":
            worker = multiprocessing.Process(target=_busy, args=(stop,), daemon=True)
            worker.start()
            time.sleep(0.5)
        try:
            rows = measure(sizes, repeats, threads)
        finally:
            if worker is not None:
                stop.set()
                worker.join()
        print(f"\n## {label}\n")
        print("| n | GFlop | 1 thread (s) | all threads (s) | ratio 1/all |")
        print("|---|---|---|---|---|")
        for n, flops, one, many in rows:
            gflop, ratio = flops / 1e9, one / many
            print(f"| {n} | {gflop:.2f} | {one:.4f} | {many:.4f} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
