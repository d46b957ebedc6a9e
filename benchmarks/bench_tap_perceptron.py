"""TAPPerceptronClassifier against LogisticRegression: fit time and test error.

Teacher-student data: a teacher ``w ~ N(0, I_N)``, inputs ``x ~ N(0, I_N)``,
training labels ``sign(x . w)`` with 5% of them flipped at random, and 5000
test points from the same teacher.  The test error is measured against the
*clean* teacher labels (no flips), so the Bayes-optimal error goes to zero as
the number of samples per weight grows.

Ours: ``TAPPerceptronClassifier(label_noise=0.05, fit_intercept=False)``.
Peer: ``LogisticRegression(max_iter=1000, fit_intercept=False)`` with default C.

Every fit runs with the defaults (``tol=1e-6``, ``max_iter=1000``,
``n_restarts=4``); the table reports the sweeps and whether a
ConvergenceWarning was raised.

Fit times are wall-clock seconds of a single fit (``n_jobs=1`` for both).

Run: ``python benchmarks/bench_tap_perceptron.py [--quick]`` (``--quick`` drops
the m = 100,000 case).

Measured 2026-11-23 02:22 UTC (numpy 2.4.6, scipy 1.17.1, scikit-learn 1.9.1,
2 CPUs, load average 0.2; EP sweeps Anderson-accelerated, which cut the
sweeps from 22/43/54/12 to the counts below)::

  m       N     space   ours s   LR s   ratio  ours err  LR err  LOO     iter  conv
  100     50    weight   0.024  0.005     4.9  0.2124    0.2434  0.1700    14  yes
  1000    50    weight   0.047  0.007     6.4  0.0260    0.0520  0.0750    21  yes
  100000  50    weight   2.482  0.105    23.7  0.0010    0.0068  0.0495    33  yes
  500     2000  dual     0.056  0.055     1.0  0.3668    0.3720  0.4460     7  yes

The first session's run (load about 6) took 99.7 s for m = 100,000 with
``n_restarts=0, max_iter=100``; a weight-space sweep there is now two blocked
``O(m N^2)`` products on one BLAS thread (0.05-0.2 s at this load, 0.02-0.03 s
on a quiet core).
"""

import argparse
import os
import time
import warnings

import numpy as np
import scipy
import sklearn
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression

from sklearn_meanfield.tap.perceptron import TAPPerceptronClassifier

LABEL_NOISE = 0.05
N_TEST = 5000
LARGE = 20000  # --quick drops the sizes from here on


def teacher_student(m, n_features, seed):
    rng = np.random.RandomState(seed)
    teacher = rng.normal(size=n_features)
    X = rng.normal(size=(m, n_features))
    y = np.sign(X @ teacher)
    y[y == 0] = 1
    flip = rng.uniform(size=m) < LABEL_NOISE
    y[flip] = -y[flip]
    X_test = rng.normal(size=(N_TEST, n_features))
    y_test = np.sign(X_test @ teacher)
    y_test[y_test == 0] = 1
    return X, y, X_test, y_test


def timed_fit(model, X, y):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        start = time.perf_counter()
        model.fit(X, y)
        elapsed = time.perf_counter() - start
    converged = not any(issubclass(w.category, ConvergenceWarning) for w in caught)
    return elapsed, converged


def run(m, n_features, seed=0):
    X, y, X_test, y_test = teacher_student(m, n_features, seed)
    params = dict(label_noise=LABEL_NOISE, fit_intercept=False, n_jobs=1)
    ours = TAPPerceptronClassifier(random_state=seed, **params)
    our_time, converged = timed_fit(ours, X, y)
    lr = LogisticRegression(max_iter=1000, fit_intercept=False)
    lr_time, _ = timed_fit(lr, X, y)
    return {
        "m": m,
        "N": n_features,
        "space": ours.space_,
        "ours_s": our_time,
        "lr_s": lr_time,
        "ratio": our_time / lr_time,
        "ours_err": float(np.mean(ours.predict(X_test) != y_test)),
        "lr_err": float(np.mean(lr.predict(X_test) != y_test)),
        "loo": ours.loo_error_,
        "n_iter": ours.n_iter_,
        "converged": converged,
    }


HEADER = (
    f"{'m':>7} {'N':>5} {'space_':>7} {'ours s':>8} {'LR s':>8} {'ratio':>7} "
    f"{'ours err':>9} {'LR err':>7} {'ours LOO':>9} {'n_iter_':>8} {'converged':>9}"
)


def format_row(r):
    return (
        f"{r['m']:>7d} {r['N']:>5d} {r['space']:>7} {r['ours_s']:>8.3f} "
        f"{r['lr_s']:>8.3f} {r['ratio']:>7.1f} {r['ours_err']:>9.4f} "
        f"{r['lr_err']:>7.4f} {r['loo']:>9.4f} {r['n_iter']:>8d} "
        f"{str(r['converged']):>9}"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="drop the m = 100,000 case"
    )
    args = parser.parse_args()
    sizes = [(100, 50), (1000, 50), (100000, 50), (500, 2000)]
    if args.quick:
        sizes = [s for s in sizes if s[0] < LARGE]

    print(
        f"numpy {np.__version__}, scipy {scipy.__version__}, "
        f"scikit-learn {sklearn.__version__}, os.cpu_count() = {os.cpu_count()}"
    )
    print(
        f"label noise {LABEL_NOISE} (train), test error vs clean teacher labels "
        f"({N_TEST} points); ratio = ours s / LR s"
    )
    print(HEADER)
    for m, n_features in sizes:
        print(format_row(run(m, n_features)), flush=True)


if __name__ == "__main__":
    main()
