"""BetheRBM against scikit-learn's BernoulliRBM on binarised digits.

For 16, 64 and 256 hidden units, both models are trained with the same
epochs, learning rate and batch size on 1400 digits; the table reports the
CPU time per epoch, the exact held-out log-likelihood (by enumerating the hidden
layer, only possible for 16 hidden units), the Bethe estimate of it (for both
models: the Bethe log Z is computed for BernoulliRBM's parameters too), the
stability factor of the Bethe fixed point, and ratios.

Run: ``python benchmarks/bench_bethe_rbm.py [--quick]``.
"""

import argparse
import time
import warnings

import numpy as np
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.neural_network import BernoulliRBM

from sklearn_meanfield import BetheRBM
from sklearn_meanfield.diagnostics import (
    MAX_ENUMERATED_UNITS,
    rbm_bethe_solve,
    rbm_free_energy,
    rbm_log_likelihood,
)


def data():
    X, _ = load_digits(return_X_y=True)
    X = (X > 7).astype(float)
    order = np.random.RandomState(0).permutation(len(X))
    return X[order[:1400]], X[order[1400:]]


def evaluate(model, X_test):
    """Exact and Bethe held-out log-likelihood and stability of any RBM."""
    exact = None
    if min(model.components_.shape) <= MAX_ENUMERATED_UNITS:
        exact = rbm_log_likelihood(model, X_test).mean()
    solution = rbm_bethe_solve(model, damping=0.5, max_sweeps=2000)
    bethe = -rbm_free_energy(model, X_test).mean() - solution.log_z
    return exact, bethe, solution.stability


def run(quick):
    X_train, X_test = data()
    n_iter = 3 if quick else 20
    sizes = [16, 64] if quick else [16, 64, 256]
    rows = []
    for n_components in sizes:
        params = dict(
            n_components=n_components,
            learning_rate=0.05,
            batch_size=10,
            n_iter=n_iter,
            random_state=0,
        )
        row = {"hidden": n_components}
        for name, cls in (("bernoulli", BernoulliRBM), ("bethe", BetheRBM)):
            model = cls(**params)
            # CPU time of this process (all its threads): robust to other
            # load on the machine, unlike wall-clock time.
            start = time.process_time()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", ConvergenceWarning)
                model.fit(X_train)
            row[name + "_epoch_s"] = (time.process_time() - start) / n_iter
            row[name + "_exact"], row[name + "_bethe"], row[name + "_lambda"] = (
                evaluate(model, X_test)
            )
            row[name + "_warned"] = bool(caught)
        rows.append(row)
        print_row(row, header=len(rows) == 1)
    print(
        "\nlog-likelihoods: nats per held-out digit (397 digits), higher is better; "
        "exact by enumeration of the hidden layer (16 units only), Bethe = "
        "-F(v) - log Z_Bethe; lambda: stability factor of the Bethe fixed point "
        "(< 1 stable); time ratio = BetheRBM / BernoulliRBM; dLL = BetheRBM - "
        f"BernoulliRBM (exact where available). {n_iter} epochs, learning rate "
        "0.05, batch 10, 1400 training digits."
    )
    return rows


def _fmt(value, spec=".2f"):
    return "-" if value is None else format(value, spec)


def print_row(row, header):
    columns = [
        ("hidden", "{:>6}", row["hidden"]),
        ("CPU s/ep RBM", "{:>12}", _fmt(row["bernoulli_epoch_s"], ".3f")),
        ("CPU s/ep Bethe", "{:>14}", _fmt(row["bethe_epoch_s"], ".3f")),
        ("time ratio", "{:>10}", _fmt(row["bethe_epoch_s"] / row["bernoulli_epoch_s"])),
        ("RBM exact", "{:>9}", _fmt(row["bernoulli_exact"])),
        ("RBM Bethe", "{:>9}", _fmt(row["bernoulli_bethe"])),
        ("RBM lambda", "{:>10}", _fmt(row["bernoulli_lambda"], ".3f")),
        ("Bethe exact", "{:>11}", _fmt(row["bethe_exact"])),
        ("Bethe est.", "{:>10}", _fmt(row["bethe_bethe"])),
        ("Bethe lambda", "{:>12}", _fmt(row["bethe_lambda"], ".3f")),
        ("dLL", "{:>6}", _fmt(_delta(row))),
    ]
    if header:
        print("  ".join(fmt.format(name) for name, fmt, _ in columns))
    print("  ".join(fmt.format(value) for _, fmt, value in columns), flush=True)


def _delta(row):
    if row["bethe_exact"] is not None:
        return row["bethe_exact"] - row["bernoulli_exact"]
    return row["bethe_bethe"] - row["bernoulli_bethe"]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 epochs, 16/64 hidden")
    run(parser.parse_args().quick)
