"""TAPGaussianProcessClassifier: multinomial vs one-vs-rest, one-vs-one, Laplace GPC.

Four classifiers, side by side in one process on the same splits:
``TAPGaussianProcessClassifier(multi_class=...)`` with ``"multinomial"`` (one
multinomial probit GP model for all classes, solved by nested EP),
``"one_vs_rest"`` and ``"one_vs_one"`` (binary probit problems), and
scikit-learn's ``GaussianProcessClassifier`` (Laplace, one-vs-rest).  Ours use
their default kernel (``kernel=None``: ``ConstantKernel(1.0) * RBF(ell)``,
``ell`` the median distance between the training rows); scikit-learn's gets
``ConstantKernel(1.0) * RBF(ell)`` with ``ell`` the median pairwise distance
of the distinct training rows, so that every model starts on the data's
scale.  All optimise the kernel's hyperparameters (``fmin_l_bfgs_b``,
``n_restarts_optimizer=0``), with ``random_state=0`` and ``n_jobs=1`` (the
binary problems are fitted one after the other).

Data, every set standardised by a ``StandardScaler`` fitted on its training
part; the splits are stratified with ``random_state=0``:

* iris and wine (bundled): 70% train, 30% held out;
* digits (bundled): 600 training rows (300 with ``--quick``), the rest
  held out;
* classification-8: ``make_classification(n_samples=6000, n_features=12,
  n_informative=8, n_redundant=2, n_classes=8, n_clusters_per_class=2,
  flip_y=0.02, random_state=0)``, 600 training rows, 2000 held out;
* quantiles-6: ``make_gaussian_quantiles(n_samples=4000, n_features=4,
  n_classes=6, random_state=0)`` (classes are nested shells), 600 training
  rows (300 with ``--quick``), 2000 held out.

Columns, per data set and method: held-out log-loss of ``predict_proba``;
held-out error of ``predict``; our ``loo_error_`` (leave-one-out error of
``predict``'s rule from the cavity distributions, no refitting; "-" for
scikit-learn); fit time in wall-clock seconds (``time.perf_counter``, one
run, after a warm-up fit of every method); the ratio of the fit time to
one-vs-rest's, in wall-clock and in process CPU time (``time.process_time``,
steadier on a shared machine); and the number of ConvergenceWarnings a fit
raised (suppressed, blank when none; their messages follow the table).  BLAS
runs on one thread by default (``--blas-threads``), as in
``bench_tap_gpc.py``.

A second table, the sparse mode: the three larger sets with up to 4000
training rows, at most half of each set (digits 898, quantiles-6 2000,
classification-8 3000; held out: the rest, at most 2000),
``n_inducing=128`` k-means inducing inputs for every model, multinomial
against one-vs-rest and one-vs-one (scikit-learn's classifier has no sparse
mode: at these sizes its exact fits are not the comparison), and
``mn-1e5``: the multinomial model with the default kernel's amplitude bound
raised from 1e3 to 1e5 (the bound the binary problems lift theirs to when
their evidence still climbs at 1e3; the multinomial model keeps 1e3 unless
given such a kernel).

A third part, on the sparse table's splits: the multinomial model with 16
inducing inputs, kept at their k-means start against learned
(``optimize_inducing_points=True``): held-out log-loss and error, the
learned model's LOO error and its fit time over the fixed one's.

The summary reports, without asserting, whether three targets hold: the
multinomial model's held-out log-loss below one-vs-rest's and below
scikit-learn's on every data set; ``|loo_error_ - held-out error| <= 0.02``
for the multinomial model; and the multinomial fit time at most 2x
one-vs-rest's.  On one split the leave-one-out and held-out errors differ
by sampling alone with a standard error of 0.02 to 0.04 on these sets, more
than the tolerance, so the leave-one-out target takes the mean difference
over several stratified splits (``random_state`` 0, the table's, 1, 2, ...;
20 for iris and wine, 3 for digits, 5 for the other two, 3 for every set
of the sparse table, at most 3 with ``--quick``), next to the standard
error of that mean from the splits' spread.

Run: ``python benchmarks/bench_tap_gpc_multiclass.py [--quick]
[--datasets NAME ...] [--blas-threads K]``; ``--quick`` runs iris, wine,
digits and quantiles-6 with at most 300 training rows and no sparse table,
the full mode all five sets with at most 600, then the sparse table.
"""

import argparse
import os
import time
import warnings

import numpy as np
import scipy
import sklearn
from scipy.spatial.distance import pdist
from sklearn.datasets import (
    load_digits,
    load_iris,
    load_wine,
    make_classification,
    make_gaussian_quantiles,
)
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process import GaussianProcessClassifier
from sklearn.gaussian_process.kernels import RBF, ConstantKernel
from sklearn.metrics import log_loss
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_info, threadpool_limits

from sklearn_meanfield import TAPGaussianProcessClassifier

# Exact GP fits cost O(n^3) a sweep (times the classes), so the training part
# of the larger sets is subsampled; the held-out part is capped too.
MAX_TRAIN = 600
MAX_TRAIN_QUICK = 300
MAX_TEST = 2000
SMALL_TEST_FRACTION = 0.3
LOO_GAP = 0.02
TIME_RATIO = 2.0
# Splits of the leave-one-out target (the table's split is the first): the
# small sets' fits take a fraction of a second, the larger ones' many.
LOO_SPLITS = {
    "iris": 20,
    "wine": 20,
    "digits": 3,
    "classification-8": 5,
    "quantiles-6": 5,
}
LOO_SPLITS_SPARSE = 3
LOO_SPLITS_QUICK = 3  # the larger sets' with --quick

METHODS = ("multinomial", "one_vs_rest", "one_vs_one", "sklearn")
# The sparse mode's table: larger training parts, inducing inputs for all.
SPARSE_DATA_SETS = ("digits", "classification-8", "quantiles-6")
SPARSE_METHODS = ("multinomial", "one_vs_rest", "one_vs_one", "mn-1e5")
# mn-1e5's amplitude bounds.
LIFTED_AMPLITUDE = (1e-5, 1e5)
SPARSE_MAX_TRAIN = 4000
SPARSE_N_INDUCING = 128
# The learned-inputs part: few inducing inputs, where their placement
# matters most.
LEARNED_N_INDUCING = 16


def _classification_8():
    return make_classification(
        n_samples=6000,
        n_features=12,
        n_informative=8,
        n_redundant=2,
        n_classes=8,
        n_clusters_per_class=2,
        flip_y=0.02,
        random_state=0,
    )


def _quantiles_6():
    return make_gaussian_quantiles(
        n_samples=4000, n_features=4, n_classes=6, random_state=0
    )


# name: (loader, small set split 70/30)
DATA_SETS = {
    "iris": (lambda: load_iris(return_X_y=True), True),
    "wine": (lambda: load_wine(return_X_y=True), True),
    "digits": (lambda: load_digits(return_X_y=True), False),
    "classification-8": (_classification_8, False),
    "quantiles-6": (_quantiles_6, False),
}
QUICK_DATA_SETS = ("iris", "wine", "digits", "quantiles-6")


def load(name, max_train, seed=0):
    """Standardised stratified train and held-out parts of a data set, the
    split drawn with ``random_state=seed``."""
    loader, small = DATA_SETS[name]
    X, y = loader()
    if small:
        sizes = {"test_size": SMALL_TEST_FRACTION}
    else:
        n_train = min(max_train, len(y) // 2)
        sizes = {"train_size": n_train, "test_size": min(MAX_TEST, len(y) - n_train)}
    X_train, X_test, y_train, y_test = train_test_split(
        X, y, stratify=y, random_state=seed, **sizes
    )
    if len(y_train) > max_train:
        X_train, _, y_train, _ = train_test_split(
            X_train, y_train, train_size=max_train, stratify=y_train, random_state=seed
        )
    scaler = StandardScaler().fit(X_train)
    return scaler.transform(X_train), y_train, scaler.transform(X_test), y_test


def median_distance(X):
    """Median pairwise distance between the distinct rows of ``X``."""
    return float(np.median(pdist(np.unique(X, axis=0))))


def make_model(method, X_train, optimizer="fmin_l_bfgs_b", n_inducing="auto"):
    if method == "sklearn":
        kernel = ConstantKernel(1.0) * RBF(median_distance(X_train))
        return GaussianProcessClassifier(
            kernel,
            optimizer=optimizer,
            n_restarts_optimizer=0,
            n_jobs=1,
            random_state=0,
        )
    kernel = None
    learn_inputs = method == "mn-learned"
    if learn_inputs:
        method = "multinomial"
    if method == "mn-1e5":
        ell = median_distance(X_train)
        kernel = ConstantKernel(1.0, LIFTED_AMPLITUDE) * RBF(
            ell, (1e-3 * ell, 1e3 * ell)
        )
        method = "multinomial"
    return TAPGaussianProcessClassifier(
        kernel,
        multi_class=method,
        optimizer=optimizer,
        n_restarts_optimizer=0,
        n_jobs=1,
        random_state=0,
        n_inducing=n_inducing,
        optimize_inducing_points=learn_inputs,
    )


def measure(method, X_train, y_train, X_test, y_test, n_inducing="auto"):
    """Fit time, warnings, held-out log-loss and error, and the LOO error."""
    model = make_model(method, X_train, n_inducing=n_inducing)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        start, start_cpu = time.perf_counter(), time.process_time()
        model.fit(X_train, y_train)
        seconds = time.perf_counter() - start
        cpu = time.process_time() - start_cpu
        proba = model.predict_proba(X_test)
        predicted = model.predict(X_test)
    return {
        "logloss": log_loss(y_test, proba, labels=model.classes_),
        "error": float(np.mean(predicted != y_test)),
        "loo": getattr(model, "loo_error_", None),
        "seconds": seconds,
        "cpu": cpu,
        "warnings": [
            str(w.message) for w in caught if issubclass(w.category, ConvergenceWarning)
        ],
    }


def warm_up():
    """One small fixed-kernel fit of every method: the first calls pay for
    lazy imports and BLAS initialisation."""
    X, y = load_iris(return_X_y=True)
    X = StandardScaler().fit_transform(X[::3])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for method in METHODS:
            make_model(method, X, optimizer=None).fit(X, y[::3])


COLUMNS = (
    ("data", 16),
    ("train", 5),
    ("test", 5),
    ("classes", 7),
    ("method", 11),
    ("log-loss", 8),
    ("error", 6),
    ("LOO error", 9),
    ("fit s", 7),
    ("/ OvR", 6),
    ("cpu / OvR", 9),
    ("conv. warnings", 14),
)


def table_line(cells):
    return (
        "| "
        + " | ".join(
            f"{cell:<{width}}" if i < 2 or i == 4 else f"{cell:>{width}}"
            for i, (cell, (_, width)) in enumerate(zip(cells, COLUMNS))
        )
        + " |"
    )


def table_rows(name, shape, results):
    n_train, n_test, n_classes = shape
    base = results["one_vs_rest"]
    rows = []
    for method in results:
        r = results[method]
        rows.append(
            table_line(
                (
                    name,
                    str(n_train),
                    str(n_test),
                    str(n_classes),
                    method,
                    f"{r['logloss']:.4f}",
                    f"{r['error']:.3f}",
                    "-" if r["loo"] is None else f"{r['loo']:.3f}",
                    f"{r['seconds']:.2f}",
                    f"{r['seconds'] / base['seconds']:.2f}x",
                    f"{r['cpu'] / base['cpu']:.2f}x",
                    str(len(r["warnings"])) if r["warnings"] else "",
                )
            )
        )
    return rows


def verdict(failures):
    return "holds" if not failures else "does not hold (" + ", ".join(failures) + ")"


def summary(all_results, loo_pairs):
    """One line per target: whether it holds, and where it fails."""
    names = list(all_results)
    lines = []
    peers = [("one_vs_rest", "one-vs-rest"), ("sklearn", "scikit-learn")]
    for peer, label in peers:
        if not all(peer in r for _, r in all_results.values()):
            continue
        failures = [
            f"{name}: {r['multinomial']['logloss']:.4f} vs {r[peer]['logloss']:.4f}"
            for name, (_, r) in all_results.items()
            if not r["multinomial"]["logloss"] < r[peer]["logloss"]
        ]
        lines.append(
            f"Multinomial held-out log-loss below {label}'s on every data set "
            f"({len(names) - len(failures)}/{len(names)}): {verdict(failures)}."
        )
    gaps, failures = [], []
    for name, pairs in loo_pairs.items():
        # The mean over the splits of the paired difference, and its
        # standard error from their spread.
        difference = pairs[:, 0] - pairs[:, 1]
        gap = abs(difference.mean())
        se = difference.std(ddof=1) / np.sqrt(len(difference))
        gaps.append(f"{name} {gap:.4f} (se {se:.4f}, {len(difference)} splits)")
        if not gap <= LOO_GAP:
            failures.append(name)
    lines.append(
        f"Multinomial |mean LOO error - mean held-out error| <= {LOO_GAP} "
        f"[{'; '.join(gaps)}]: {verdict(failures)}."
    )
    ratios, failures = [], []
    for name, (_, r) in all_results.items():
        ratio = r["multinomial"]["seconds"] / r["one_vs_rest"]["seconds"]
        ratios.append(f"{name} {ratio:.2f}x")
        if not ratio <= TIME_RATIO:
            failures.append(name)
    lines.append(
        f"Multinomial fit time <= {TIME_RATIO:g}x one-vs-rest's "
        f"[{'; '.join(ratios)}]: {verdict(failures)}."
    )
    return lines


def measure_sets(names, max_train, methods, n_inducing="auto"):
    """Every method on every set, with a progress line each."""
    all_results = {}
    for name in names:
        X_train, y_train, X_test, y_test = load(name, max_train)
        shape = (len(y_train), len(y_test), len(np.unique(y_train)))
        results = {}
        for method in methods:
            r = measure(method, X_train, y_train, X_test, y_test, n_inducing)
            results[method] = r
            # Progress, so that a run stopped early still reports something.
            loo = "-" if r["loo"] is None else f"{r['loo']:.3f}"
            print(
                f"  {name} {method}: fit {r['seconds']:.2f} s (cpu {r['cpu']:.2f} s),"
                f" log-loss {r['logloss']:.4f}, error {r['error']:.3f}, LOO {loo}",
                flush=True,
            )
        all_results[name] = (shape, results)
    return all_results


def loo_splits(all_results, max_train, n_splits, n_inducing="auto"):
    """The multinomial model's leave-one-out and held-out errors on
    ``n_splits(name)`` splits of every set, the table's first: an array of
    ``(loo, error)`` rows per set."""
    pairs = {}
    for name, (_, results) in all_results.items():
        first = results["multinomial"]
        rows = [(first["loo"], first["error"])]
        for seed in range(1, n_splits(name)):
            r = measure("multinomial", *load(name, max_train, seed), n_inducing)
            rows.append((r["loo"], r["error"]))
            print(
                f"  {name} multinomial, split {seed}: LOO {r['loo']:.3f}, "
                f"error {r['error']:.3f}, fit {r['seconds']:.2f} s",
                flush=True,
            )
        pairs[name] = np.array(rows, dtype=float)
    return pairs


def report(all_results, loo_pairs, title=None):
    """The table (under ``title``), the warnings' messages and the targets'
    summary."""
    print()
    if title:
        print(title)
    print(table_line([label for label, _ in COLUMNS]))
    print("| " + " | ".join("-" * width for _, width in COLUMNS) + " |")
    for name, (shape, results) in all_results.items():
        for row in table_rows(name, shape, results):
            print(row)
    print()
    print(
        "log-loss, error: held out; LOO error: the fit's own leave-one-out "
        "estimate; fit s: wall-clock seconds; / OvR: fit time over one-vs-rest's."
    )
    if any("mn-1e5" in results for _, results in all_results.values()):
        print(
            "mn-1e5: the multinomial model, the default kernel's amplitude "
            f"bounded by {LIFTED_AMPLITUDE[1]:g} instead of 1e3."
        )
    messages = {
        (name, method, message): None
        for name, (_, results) in all_results.items()
        for method, r in results.items()
        for message in r["warnings"]
    }
    if messages:
        print()
        print("ConvergenceWarnings (each distinct message once):")
        for name, method, message in messages:
            print(f"* {name} {method}: {message}")
    print()
    print("Targets (not asserted):")
    for line in summary(all_results, loo_pairs):
        print(f"* {line}")


def run(names, max_train, sparse_names=(), quick=False):
    blas = [
        f"{info['internal_api']} {info['num_threads']} thread(s)"
        for info in threadpool_info()
        if info["user_api"] == "blas"
    ]
    print(
        f"numpy {np.__version__}, scipy {scipy.__version__}, "
        f"sklearn {sklearn.__version__}, os.cpu_count() = {os.cpu_count()}, "
        f"BLAS: {', '.join(blas)}",
        flush=True,
    )
    warm_up()

    def n_splits(name):
        small = DATA_SETS[name][1]
        return LOO_SPLITS[name] if small or not quick else LOO_SPLITS_QUICK

    results = measure_sets(names, max_train, METHODS)
    report(results, loo_splits(results, max_train, n_splits))
    if sparse_names:
        print()
        title = (
            f"Sparse mode: n_inducing={SPARSE_N_INDUCING}, at most "
            f"{SPARSE_MAX_TRAIN} training rows."
        )
        print(title, flush=True)
        results = measure_sets(
            sparse_names, SPARSE_MAX_TRAIN, SPARSE_METHODS, SPARSE_N_INDUCING
        )
        pairs = loo_splits(
            results, SPARSE_MAX_TRAIN, lambda name: LOO_SPLITS_SPARSE, SPARSE_N_INDUCING
        )
        report(results, pairs, title=f"{title} Table:")
        learned_inputs_part(sparse_names)


def learned_inputs_part(names):
    """The multinomial model with LEARNED_N_INDUCING inducing inputs, kept
    at their k-means start and learned, on the sparse table's splits."""
    print()
    title = (
        f"Learned inducing inputs: the multinomial model, "
        f"n_inducing={LEARNED_N_INDUCING}, at most {SPARSE_MAX_TRAIN} training rows."
    )
    print(title, flush=True)
    lines, failures = [], []
    for name in names:
        X_train, y_train, X_test, y_test = load(name, SPARSE_MAX_TRAIN)
        fits = {}
        for method in ("multinomial", "mn-learned"):
            r = measure(method, X_train, y_train, X_test, y_test, LEARNED_N_INDUCING)
            fits[method] = r
            print(
                f"  {name} {method}: fit {r['seconds']:.2f} s, log-loss "
                f"{r['logloss']:.4f}, error {r['error']:.3f}, LOO {r['loo']:.3f}",
                flush=True,
            )
        fixed, learned = fits["multinomial"], fits["mn-learned"]
        lines.append(
            f"| {name:<16} | {len(y_train):>5} | {fixed['logloss']:>14.4f} | "
            f"{learned['logloss']:>16.4f} | {fixed['error']:>11.3f} | "
            f"{learned['error']:>13.3f} | {learned['loo']:>11.3f} | "
            f"{learned['seconds'] / fixed['seconds']:>12.1f}x |"
        )
        if not learned["logloss"] < fixed["logloss"]:
            failures.append(name)
    print()
    print(f"{title} Table:")
    print(
        "| data             | train | fixed log-loss | learned log-loss | "
        "fixed error | learned error | learned LOO | time / fixed |"
    )
    print(
        "| ---------------- | ----- | -------------- | ---------------- | "
        "----------- | ------------- | ----------- | ------------ |"
    )
    for line in lines:
        print(line)
    print()
    print(
        "fixed: the k-means inducing inputs; learned: optimize_inducing_points=True "
        "(the kernel, then kernel and inputs on 90% of the rows, kept when the "
        "other 10% score better)."
    )
    print()
    print("Targets (not asserted):")
    print(
        "* Learned inducing inputs' held-out log-loss below the fixed ones' on "
        f"every data set ({len(names) - len(failures)}/{len(names)}): "
        f"{verdict(failures)}."
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"iris, wine, digits and quantiles-6, at most {MAX_TRAIN_QUICK} "
        "training rows",
    )
    parser.add_argument(
        "--datasets", nargs="+", choices=list(DATA_SETS), help="override the sets"
    )
    parser.add_argument(
        "--blas-threads",
        type=int,
        default=1,
        help="BLAS threads for every model (default 1; 0 leaves BLAS alone)",
    )
    args = parser.parse_args()
    names = args.datasets or (QUICK_DATA_SETS if args.quick else tuple(DATA_SETS))
    max_train = MAX_TRAIN_QUICK if args.quick else MAX_TRAIN
    sparse_names = () if args.quick else [n for n in SPARSE_DATA_SETS if n in names]
    limit = args.blas_threads if args.blas_threads > 0 else None
    with threadpool_limits(limits=limit, user_api="blas"):
        run(names, max_train, sparse_names, quick=args.quick)


if __name__ == "__main__":
    main()
