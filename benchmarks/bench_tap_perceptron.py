"""TAPPerceptronClassifier against LogisticRegression: fit time, error, log-loss.

Two tables.  Teacher-student data: a teacher ``w ~ N(0, I_N)``, inputs
``x ~ N(0, I_N)``, training labels ``sign(x . w)`` with 5% of them flipped at
random, and 5000 test points from the same teacher; the test error is measured
against the *clean* teacher labels, so the Bayes-optimal error goes to zero as
the number of samples per weight grows.  Ours:
``TAPPerceptronClassifier(label_noise=0.05, fit_intercept=False)``; peer:
``LogisticRegression(max_iter=1000, fit_intercept=False)``, both ``n_jobs=1``.

Bundled data sets (breast_cancer, digits, iris, wine), standardised, 5-fold
stratified cross-validation: held-out log-loss, accuracy, the leave-one-out
error and the fit time of the default ``TAPPerceptronClassifier()`` (label
noise learned, ``label_noise="auto"``), of ``label_noise=0.05`` and of
``LogisticRegression(max_iter=5000)``.

Run: ``python benchmarks/bench_tap_perceptron.py [--quick]`` (``--quick`` drops
the m = 100,000 teacher case and the digits data set).
"""

import argparse
import os
import time
import warnings

import numpy as np
import scipy
import sklearn
from sklearn.datasets import load_breast_cancer, load_digits, load_iris, load_wine
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, log_loss
from sklearn.model_selection import StratifiedKFold
from sklearn.preprocessing import StandardScaler

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


DATA_SETS = {
    "breast_cancer": load_breast_cancer,
    "digits": load_digits,
    "iris": load_iris,
    "wine": load_wine,
}


def cross_validated(name, model, n_splits=5):
    """Mean held-out log-loss and accuracy, mean leave-one-out error and the
    total fit time over stratified folds of a standardised bundled data set."""
    X, y = DATA_SETS[name](return_X_y=True)
    folds = StratifiedKFold(n_splits, shuffle=True, random_state=0).split(X, y)
    losses, accuracies, loo, seconds = [], [], [], 0.0
    for train, test in folds:
        scaler = StandardScaler().fit(X[train])
        elapsed, _ = timed_fit(model, scaler.transform(X[train]), y[train])
        seconds += elapsed
        proba = model.predict_proba(scaler.transform(X[test]))
        losses.append(log_loss(y[test], proba, labels=model.classes_))
        accuracies.append(accuracy_score(y[test], model.classes_[proba.argmax(1)]))
        loo.append(getattr(model, "loo_error_", np.nan))
    return np.mean(losses), np.mean(accuracies), np.mean(loo), seconds


def bundled_data_table(names):
    models = {
        "ours, auto": lambda: TAPPerceptronClassifier(random_state=0, n_jobs=1),
        "ours, 0.05": lambda: TAPPerceptronClassifier(
            label_noise=0.05, random_state=0, n_jobs=1
        ),
        "LR": lambda: LogisticRegression(max_iter=5000),
    }
    print(
        f"{'data':>14} {'model':>11} {'log-loss':>9} {'accuracy':>9} "
        f"{'LOO err':>8} {'fit s':>7}"
    )
    for name in names:
        for label, make in models.items():
            loss, accuracy, loo, seconds = cross_validated(name, make())
            print(
                f"{name:>14} {label:>11} {loss:>9.4f} {accuracy:>9.4f} "
                f"{loo:>8.4f} {seconds:>7.2f}",
                flush=True,
            )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="drop the m = 100,000 case and digits",
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
    print()
    print("bundled data sets, standardised, 5-fold stratified cross-validation")
    names = [n for n in DATA_SETS if not (args.quick and n == "digits")]
    bundled_data_table(names)


if __name__ == "__main__":
    main()
