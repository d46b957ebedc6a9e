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

Two more estimates come from the distinct Bethe fixed points that message
passing reaches from 30 starts seeded at samples of the model (20 Gibbs sweeps
from uniform random states; ``sklearn_meanfield.bethe._multistate``): the sum of
their Bethe partition functions ("multi"), and the same sum with each fixed
point's loop correction ``-1/2 log det(I - B)`` ("m+l", multi+loop), and
the same with 3 hidden units clamped ("bethe-multi", what
``rbm_log_partition(method="bethe-multi")`` returns with its defaults), with
the number of distinct fixed points and the CPU times.  ``--states`` lists
every fixed point (Bethe ``log Z``, loop correction, stability, how many
starts reached it, mean magnetisation), with the cold-start solution.

``--exact-sweep`` instead measures the errors of the ``log Z`` estimates against
enumeration on 18 models of 12, 16 and 20 hidden units (both estimators, three
training seeds).

Run: ``python benchmarks/bench_rbm_log_likelihood.py [--quick] [--seeds N]
[--states] [--exact-sweep]``.
"""

import argparse
import time
import warnings

import numpy as np
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.neural_network import BernoulliRBM
from sklearn.utils import check_random_state

from sklearn_meanfield import BetheRBM
from sklearn_meanfield.bethe._ais import ais_log_likelihood, base_rate_visible_bias
from sklearn_meanfield.bethe._exact import MAX_ENUMERATED_UNITS, exact_log_likelihood
from sklearn_meanfield.bethe._message_passing import bethe_solve
from sklearn_meanfield.bethe._multistate import (
    clamped_log_partition,
    model_seeds,
    multistate_log_partition,
)
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
    # The seeds of rbm_log_partition(params, method="bethe-multi",
    # random_state=seed): 30 model samples.
    start = time.process_time()
    seeds = model_seeds(*params, 30, 20, check_random_state(seed))
    multi = multistate_log_partition(*params, seeds)
    row["multi_cpu_s"] = time.process_time() - start
    start = time.process_time()
    clamped_log_z, _ = clamped_log_partition(*params, seeds, 3)
    row["clamped_cpu_s"] = time.process_time() - start
    minus_f = float(-rbm_free_energy(params, X_test).mean())
    row["multi"] = minus_f - multi.log_z_bethe
    row["multi_loop"] = minus_f - multi.log_z
    row["clamped"] = minus_f - clamped_log_z
    row["multi_error"] = row["multi"] - reference
    row["multi_loop_error"] = row["multi_loop"] - reference
    row["clamped_error"] = row["clamped"] - reference
    row["n_states"] = len(multi.states)
    row["states"] = multi.states
    row["cold_log_z"] = bethe_solve(*params, damping=0.5, tol=1e-7).log_z
    row["log_z_reference"] = minus_f - reference
    return row


def run(quick, n_seeds, show_states=False):
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
                if show_states:
                    print_states(row)
    print(
        "\nlog-likelihoods: mean over 397 held-out digits, nats per digit; exact by "
        f"enumeration of the hidden layer (<= {MAX_ENUMERATED_UNITS} units); AIS: "
        f"100 chains, {n_temperatures} temperatures, base rates of the training "
        "digits, +- standard error (delta method); Bethe: -F(v) - log Z_Bethe "
        "(BetheRBM.score_samples); Bethe err = Bethe - exact (or - AIS where no "
        f"exact); AIS CPU s: one core. multi: log Z summed over the distinct Bethe "
        "fixed points reached from 30 starts seeded at model samples; m+l "
        "(multi+loop): each with its loop correction -1/2 log det(I - B); "
        "bethe-multi: the same with 3 hidden units clamped (8 terms), "
        "rbm_log_partition(method='bethe-multi') with its defaults; err = estimate "
        "- exact (or - AIS); states: distinct fixed points of the full model; "
        f"CPU s: one core. {n_iter} epochs, learning rate 0.05, batch 10, 1400 "
        "training digits."
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
        ("multi err", "{:>9}", _fmt(row["multi_error"])),
        ("m+l err", "{:>7}", _fmt(row["multi_loop_error"])),
        ("bethe-multi", "{:>11}", _fmt(row["clamped"])),
        ("b-m err", "{:>7}", _fmt(row["clamped_error"])),
        ("states", "{:>6}", row["n_states"]),
        ("AIS CPU s", "{:>9}", _fmt(row["ais_cpu_s"], ".1f")),
        ("m+l CPU s", "{:>9}", _fmt(row["multi_cpu_s"], ".1f")),
        ("b-m CPU s", "{:>9}", _fmt(row["clamped_cpu_s"], ".1f")),
    ]
    if header:
        print("  ".join(fmt.format(name) for name, fmt, _ in columns))
    print("  ".join(fmt.format(value) for _, fmt, value in columns), flush=True)


def exact_sweep():
    """Errors of the log Z estimates against enumeration on 18 small models.

    BernoulliRBM and BetheRBM (``method="bipartite"``) with 12, 16 and 20
    hidden units, training seeds 0, 1, 2, the benchmark's training settings;
    log Z from one Bethe solution (cold messages), BetheRBM's own
    ``log_partition_function``, the multi-state loop-corrected sum
    (``n_clamped=0``) and ``rbm_log_partition(method="bethe-multi")``.
    """
    X_train, _ = data()
    errors = []
    print("model         hidden  seed   cold err   own err  m+l err  b-m err")
    for n_components in (12, 16, 20):
        for name, cls, extra in (
            ("BernoulliRBM", BernoulliRBM, {}),
            ("BetheRBM", BetheRBM, {"method": "bipartite"}),
        ):
            for seed in range(3):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", ConvergenceWarning)
                    model = cls(
                        n_components=n_components,
                        learning_rate=0.05,
                        batch_size=10,
                        n_iter=20,
                        random_state=seed,
                        **extra,
                    ).fit(X_train)
                params = tuple(
                    np.asarray(a, dtype=float)
                    for a in (
                        model.components_,
                        model.intercept_visible_,
                        model.intercept_hidden_,
                    )
                )
                exact = rbm_log_partition(params)
                cold = bethe_solve(*params, damping=0.5, tol=1e-7).log_z
                own = model.log_partition_function() if cls is BetheRBM else cold
                row = [
                    exact - cold,
                    exact - own,
                    exact
                    - rbm_log_partition(
                        params, method="bethe-multi", n_clamped=0, random_state=seed
                    ),
                    exact
                    - rbm_log_partition(
                        params, method="bethe-multi", random_state=seed
                    ),
                ]
                errors.append(row)
                print(
                    f"{name:<12}  {n_components:>6}  {seed:>4}  "
                    + "  ".join(f"{e:>8.3f}" for e in row),
                    flush=True,
                )
    errors = np.abs(np.array(errors))
    print(
        "largest |error|: "
        + ", ".join(f"{e:.3f}" for e in errors.max(axis=0))
        + "; mean |error|: "
        + ", ".join(f"{e:.3f}" for e in errors.mean(axis=0))
        + "\nerror = exact - estimate of log Z (nats; = estimated - exact "
        "log-likelihood per sample). cold: one Bethe solution from zero messages; "
        "own: the estimator's log_partition_function (BernoulliRBM: cold); m+l: "
        "multi-state loop-corrected sum; b-m: rbm_log_partition(method="
        "'bethe-multi') (3 clamped hidden units)."
    )


def print_states(row):
    """The distinct fixed points of one model, highest Bethe log Z first."""
    print(
        f"    log Z: reference {row['log_z_reference']:.3f} (exact or AIS), "
        f"cold-start Bethe {row['cold_log_z']:.3f}"
    )
    for state in row["states"]:
        print(
            f"    fixed point: Bethe log Z {state.log_z_bethe:8.3f}  loop "
            f"{state.loop_correction:6.3f}  stability {state.stability:.3f}  "
            f"starts {state.n_starts:3d}  mean |2<v>-1| "
            f"{np.abs(2 * state.mean_visible - 1).mean():.3f}  mean <h> "
            f"{state.mean_hidden.mean():.3f}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="3 epochs, 16/64 hidden, 1000 temperatures"
    )
    parser.add_argument("--seeds", type=int, default=1, help="training seeds per size")
    parser.add_argument(
        "--states", action="store_true", help="list the Bethe fixed points per model"
    )
    parser.add_argument(
        "--exact-sweep",
        action="store_true",
        help="only the log Z errors against enumeration, 18 models, 12-20 hidden",
    )
    args = parser.parse_args()
    if args.exact_sweep:
        exact_sweep()
    else:
        run(args.quick, args.seeds, args.states)
