"""BetheRBM's log-likelihood estimate against AIS and exact enumeration, on digits.

BetheRBM (default method) and scikit-learn's BernoulliRBM are trained with the
same settings (20 epochs, learning rate 0.05, batch 10, 1400 binarised training
digits) at 16, 64 and 256 hidden units. For each model the table gives the mean
held-out log-likelihood (397 digits, nats per digit) three ways: exact
(enumeration of the hidden layer, 16 units only), annealed importance sampling
(Salakhutdinov and Murray 2008, base rates of the training digits, 100 chains,
10000 equally spaced temperatures; +- its standard error) and the Bethe
estimate (``BetheRBM.score_samples``; for BernoulliRBM's parameters the same
Bethe ``log Z`` from ``sklearn_meanfield.diagnostics.rbm_log_partition``), with
the Bethe estimate's error against exact (or AIS) and the CPU time of AIS.

Run: ``python benchmarks/bench_rbm_log_likelihood.py [--quick] [--seeds N]``.
"""

import argparse
import time
import warnings

import numpy as np
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.neural_network import BernoulliRBM

from sklearn_meanfield import BetheRBM
from sklearn_meanfield.bethe._ais import ais_log_likelihood, base_rate_visible_bias
from sklearn_meanfield.bethe._exact import MAX_ENUMERATED_UNITS, exact_log_likelihood
from sklearn_meanfield.diagnostics import rbm_free_energy, rbm_log_partition


def data():
    X, _ = load_digits(return_X_y=True)
    X = (X > 7).astype(float)
    order = np.random.RandomState(0).permutation(len(X))
    return X[order[:1400]], X[order[1400:]]


def evaluate(name, model, X_train, X_test, n_temperatures, seed):
    """Exact, AIS and Bethe mean held-out log-likelihood of a fitted RBM."""
    params = tuple(
        np.asarray(a, dtype=float)
        for a in (model.components_, model.intercept_visible_, model.intercept_hidden_)
    )
    row = {"model": name, "hidden": params[0].shape[0], "exact": None}
    if min(params[0].shape) <= MAX_ENUMERATED_UNITS:
        row["exact"] = float(exact_log_likelihood(X_test, *params).mean())
    start = time.process_time()
    ais = ais_log_likelihood(
        X_test,
        *params,
        base_visible_bias=base_rate_visible_bias(X_train),
        n_temperatures=n_temperatures,
        random_state=seed,
    )
    row["ais_cpu_s"] = time.process_time() - start
    row["ais"] = float(ais.log_likelihood.mean())
    row["ais_se"] = ais.std_error
    if isinstance(model, BetheRBM):
        row["bethe"] = float(model.score_samples(X_test).mean())
    else:
        bethe_log_z = rbm_log_partition(params, method="bethe")
        row["bethe"] = float(-rbm_free_energy(params, X_test).mean() - bethe_log_z)
    reference = row["exact"] if row["exact"] is not None else row["ais"]
    row["bethe_error"] = row["bethe"] - reference
    return row


def run(quick, n_seeds):
    X_train, X_test = data()
    n_iter = 3 if quick else 20
    sizes = [16, 64] if quick else [16, 64, 256]
    n_temperatures = 1000 if quick else 10000
    rows = []
    for n_components in sizes:
        for seed in range(n_seeds):
            params = dict(
                n_components=n_components,
                learning_rate=0.05,
                batch_size=10,
                n_iter=n_iter,
                random_state=seed,
            )
            for name, cls in (("BernoulliRBM", BernoulliRBM), ("BetheRBM", BetheRBM)):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", ConvergenceWarning)
                    model = cls(**params).fit(X_train)
                row = evaluate(name, model, X_train, X_test, n_temperatures, seed)
                row["seed"] = seed
                rows.append(row)
                print_row(row, header=len(rows) == 1)
    print(
        "\nlog-likelihoods: mean over 397 held-out digits, nats per digit; exact by "
        f"enumeration of the hidden layer (<= {MAX_ENUMERATED_UNITS} units); AIS: "
        f"100 chains, {n_temperatures} temperatures, base rates of the training "
        "digits, +- standard error (delta method); Bethe: -F(v) - log Z_Bethe "
        "(BetheRBM.score_samples); Bethe err = Bethe - exact (or - AIS where no "
        f"exact); AIS CPU s: one core. {n_iter} epochs, learning rate 0.05, batch "
        "10, 1400 training digits."
    )
    return rows


def _fmt(value, spec=".3f"):
    return "-" if value is None else format(value, spec)


def print_row(row, header):
    columns = [
        ("model", "{:<12}", row["model"]),
        ("hidden", "{:>6}", row["hidden"]),
        ("seed", "{:>4}", row["seed"]),
        ("exact", "{:>8}", _fmt(row["exact"])),
        ("AIS", "{:>8}", _fmt(row["ais"])),
        ("+- s.e.", "{:>7}", _fmt(row["ais_se"])),
        (
            "AIS-exact",
            "{:>9}",
            _fmt(None if row["exact"] is None else row["ais"] - row["exact"]),
        ),
        ("Bethe", "{:>8}", _fmt(row["bethe"])),
        ("Bethe err", "{:>9}", _fmt(row["bethe_error"])),
        ("AIS CPU s", "{:>9}", _fmt(row["ais_cpu_s"], ".1f")),
    ]
    if header:
        print("  ".join(fmt.format(name) for name, fmt, _ in columns))
    print("  ".join(fmt.format(value) for _, fmt, value in columns), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="3 epochs, 16/64 hidden, 1000 temperatures"
    )
    parser.add_argument("--seeds", type=int, default=1, help="training seeds per size")
    args = parser.parse_args()
    run(args.quick, args.seeds)
