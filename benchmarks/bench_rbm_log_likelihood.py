"""BetheRBM's log-likelihood estimate against AIS and exact enumeration, on digits.

BetheRBM (default method) and scikit-learn's BernoulliRBM are trained with the
same settings (20 epochs, learning rate 0.05, batch 10, 1400 binarised training
digits) at 16, 64 and 256 hidden units.  For each model the table gives the
mean held-out log-likelihood (397 digits, nats per digit) by enumeration (16
units only), by annealed importance sampling (base rates of the training
digits, 100 chains, 10000 temperatures, +- standard error) and by
``BetheRBM.score_samples`` (``log_partition="auto"``); the errors against the
exact or AIS value of ``score_samples``, of one fixed point
(``log_partition="single"``, or ``rbm_log_partition(method="bethe")`` for
BernoulliRBM), of the sum over fixed points reached from 30 model samples
("multi"), the same with loop corrections ("m+l") and with 3 hidden units
clamped ("bethe-multi", ``rbm_log_partition(method="bethe-multi")``); and
the CPU times.  The table's caption explains every column.

``--states`` lists every fixed point; ``--upsampled`` trains on the digits
upsampled to 28 x 28 with BernoulliRBM's defaults, where AIS also runs from
the 3 highest TAP fixed points ("mode AIS"); ``--exact-sweep`` measures the
errors of the ``log Z`` estimates against enumeration on models of 12 to 20
hidden units.

Run: ``python benchmarks/bench_rbm_log_likelihood.py [--quick] [--seeds N]
[--states] [--upsampled] [--mode-ais] [--exact-sweep]``.
"""

import os

os.environ["OPENBLAS_NUM_THREADS"] = "1"  # before numpy loads BLAS: CPU times

import argparse  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
from scipy.ndimage import zoom  # noqa: E402
from scipy.special import expit, logsumexp  # noqa: E402
from sklearn.base import clone  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.exceptions import ConvergenceWarning  # noqa: E402
from sklearn.neural_network import BernoulliRBM  # noqa: E402
from sklearn.utils import check_random_state  # noqa: E402

from sklearn_meanfield import BetheRBM  # noqa: E402
from sklearn_meanfield.bethe._ais import (  # noqa: E402
    ais_log_likelihood,
    ais_log_partition,
    base_rate_visible_bias,
)
from sklearn_meanfield.bethe._exact import exact_log_likelihood  # noqa: E402
from sklearn_meanfield.bethe._message_passing import bethe_solve  # noqa: E402
from sklearn_meanfield.bethe._multistate import (  # noqa: E402
    clamped_log_partition,
    estimate_log_partition,
    model_seeds,
    multistate_log_partition,
    relaxed_multistate_log_partition,
)
from sklearn_meanfield.diagnostics import rbm_free_energy, rbm_log_partition  # noqa: E402

# Exact held-out log-likelihoods up to this many hidden units.
MAX_EXACT_UNITS = 16


def data(upsampled=False):
    """Binarised digits, 1400 to train and 397 held out; 28 x 28 if upsampled."""
    images, _ = load_digits(return_X_y=True)
    if upsampled:
        # As bench_bethe_rbm.py: bilinear upsampling of the grey levels.
        images = zoom(images.reshape(-1, 8, 8), (1, 3.5, 3.5), order=1)
        images = images.reshape(len(images), -1)
    X = (images > 7).astype(float)
    order = np.random.RandomState(0).permutation(len(X))
    return X[order[:1400]], X[order[1400:]]


def auto_seeds(model, params, X_train):
    """The seeds of BetheRBM's log_partition="auto": the persistent fixed
    point's visible means (BetheRBM), the chains' visible means, 20 evenly
    spaced training rows."""
    weights, visible_bias, _ = params
    seeds = []
    if isinstance(model, BetheRBM):
        seeds.append(model._solve_at(params, model.messages_).mean_visible[None])
    seeds.append(expit(np.asarray(model.h_samples_, float) @ weights + visible_bias))
    rows = np.unique(np.linspace(0, len(X_train) - 1, 20).astype(int))
    seeds.append(X_train[rows])
    return np.vstack(seeds)


def evaluate(name, model, X_train, X_test, ais, seed, multi=True, mode_ais=False):
    """Exact, AIS and Bethe mean held-out log-likelihood of a fitted RBM."""
    params = tuple(
        np.asarray(a, dtype=float)
        for a in (model.components_, model.intercept_visible_, model.intercept_hidden_)
    )
    row = {"model": name, "hidden": params[0].shape[0], "exact": None}
    if min(params[0].shape) <= MAX_EXACT_UNITS:
        row["exact"] = float(exact_log_likelihood(X_test, *params).mean())
    minus_f = float(-rbm_free_energy(params, X_test).mean())
    start = time.process_time()
    result = ais_log_likelihood(
        X_test,
        *params,
        base_visible_bias=base_rate_visible_bias(X_train),
        **ais,
        random_state=seed,
    )
    row["ais_cpu_s"] = time.process_time() - start
    row["ais"] = float(result.log_likelihood.mean())
    row["ais_se"] = result.std_error
    # The default estimate (BetheRBM: log_partition_, from fit), its cost and
    # the single fixed point it replaces.
    seeds = auto_seeds(model, params, X_train)
    start = time.process_time()
    auto_log_z = estimate_log_partition(*params, seeds)
    row["auto_cpu_s"] = time.process_time() - start
    if isinstance(model, BetheRBM):
        assert np.isclose(auto_log_z, model.log_partition_, rtol=0, atol=1e-8)
        row["bethe"] = float(model.score_samples(X_test).mean())
        single = clone(model).set_params(log_partition="single")
        single.__dict__.update(
            {key: value for key, value in vars(model).items() if key.endswith("_")}
        )
        single_log_z = single.log_partition_function()
    else:
        row["bethe"] = minus_f - auto_log_z
        single_log_z = rbm_log_partition(params, method="bethe")
    row["single"] = minus_f - single_log_z
    row["mode_ais"] = row["mode_lse"] = row["lse_error"] = None
    if mode_ais:
        # AIS from base rates at the means of the highest TAP fixed points:
        # each is an unbiased estimate of Z (a different base, the same
        # target), which reaches the modes that the data's base rates miss.
        states = relaxed_multistate_log_partition(*params, seeds).states[:3]
        estimates = [
            ais_log_partition(
                *params,
                base_visible_bias=base_rate_visible_bias(state.mean_visible[None]),
                **ais,
                random_state=seed,
            ).log_z
            for state in states
        ]
        row["mode_ais"] = minus_f - max(estimates)
        # When the fixed points are separate modes, each run stays in its own
        # (on 28 x 28 each estimate is within 0.1 nat of its fixed point's
        # TAP log Z) and Z is their sum.
        row["mode_lse"] = minus_f - logsumexp(estimates)
        row["lse_error"] = row["bethe"] - row["mode_lse"]
    if row["exact"] is not None:
        reference = row["exact"]
    else:  # the largest AIS log Z: the smallest log-likelihood
        reference = min(v for v in (row["ais"], row["mode_ais"]) if v is not None)
    row["reference"] = reference
    row["bethe_error"] = row["bethe"] - reference
    row["single_error"] = row["single"] - reference
    row["log_z_reference"] = minus_f - reference
    row["cold_log_z"] = bethe_solve(*params, damping=0.5, tol=1e-7).log_z
    for key in ("multi", "multi_loop", "clamped"):
        row[key] = row[key + "_error"] = row[key + "_cpu_s"] = None
    row["n_states"], row["states"] = None, []
    if not multi:
        return row
    # The seeds of rbm_log_partition(params, method="bethe-multi",
    # random_state=seed): 30 model samples.
    start = time.process_time()
    seeds = model_seeds(*params, 30, 20, check_random_state(seed))
    result = multistate_log_partition(*params, seeds)
    row["multi_loop_cpu_s"] = time.process_time() - start
    start = time.process_time()
    clamped_log_z, _ = clamped_log_partition(*params, seeds, 3)
    row["clamped_cpu_s"] = time.process_time() - start
    row["multi"] = minus_f - result.log_z_bethe
    row["multi_loop"] = minus_f - result.log_z
    row["clamped"] = minus_f - clamped_log_z
    for key in ("multi", "multi_loop", "clamped"):
        row[key + "_error"] = row[key] - reference
    row["n_states"] = len(result.states)
    row["states"] = result.states
    return row


def run(quick, n_seeds, show_states=False, upsampled=False, mode_ais=False):
    X_train, X_test = data(upsampled)
    if upsampled:
        # bench_bethe_rbm.py's models: BernoulliRBM's defaults.
        n_iter, learning_rate = (2 if quick else 10), 0.1
        sizes = [64] if quick else [64, 256]
        ais = dict(n_chains=50, n_temperatures=300 if quick else 3000)
        mode_ais = True
    else:
        n_iter, learning_rate = (3 if quick else 20), 0.05
        sizes = [16, 64] if quick else [16, 64, 256]
        ais = dict(n_chains=100, n_temperatures=1000 if quick else 10000)
    rows = []
    for n_components in sizes:
        for seed in range(n_seeds):
            params = dict(
                n_components=n_components,
                learning_rate=learning_rate,
                batch_size=10,
                n_iter=n_iter,
                random_state=seed,
            )
            for name, cls in (("BernoulliRBM", BernoulliRBM), ("BetheRBM", BetheRBM)):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", ConvergenceWarning)
                    model = cls(**params).fit(X_train)
                row = evaluate(
                    name,
                    model,
                    X_train,
                    X_test,
                    ais,
                    seed,
                    multi=not upsampled,
                    mode_ais=mode_ais,
                )
                row["seed"] = seed
                rows.append(row)
                print_row(row, header=len(rows) == 1)
                if show_states:
                    print_states(row)
    problem = "28 x 28 upsampled" if upsampled else "8 x 8"
    print(
        f"\n{problem} binarised digits. log-likelihoods: mean over 397 held-out "
        "digits, nats per digit; exact by enumeration of the hidden layer (<= "
        f"{MAX_EXACT_UNITS} units); AIS: {ais['n_chains']} chains, "
        f"{ais['n_temperatures']} temperatures, base rates of the training "
        "digits, +- standard error (delta method); mode AIS: the same from "
        "base rates at each of the 3 highest TAP fixed points, the largest "
        "log Z (- when not run); mode lse: their log-sum-exp (Z when the fixed "
        "points are separate modes; lse err: score - mode lse). score: "
        "BetheRBM.score_samples (log_partition='auto'; for BernoulliRBM "
        "-F(v) - estimate_log_partition with its chains and 20 training rows as "
        "seeds); err = estimate - reference, the reference being exact, else the "
        "smallest AIS log-likelihood (largest AIS log Z); single err: one fixed "
        "point (BetheRBM log_partition='single', warm-started; BernoulliRBM "
        "rbm_log_partition(method='bethe')). auto CPU s: the default estimate's "
        "log Z (BetheRBM: part of fit); AIS CPU s: one core. multi: log Z summed "
        "over the distinct Bethe fixed points reached from 30 starts seeded at "
        "model samples; m+l (multi+loop): each with its loop correction "
        "-1/2 log det(I - B); bethe-multi: the same with 3 hidden units clamped "
        "(8 terms), rbm_log_partition(method='bethe-multi') with its defaults; "
        f"states: distinct fixed points of the full model. {n_iter} epochs, "
        f"learning rate {learning_rate}, batch 10, 1400 training digits."
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
        ("mode AIS", "{:>8}", _fmt(row["mode_ais"])),
        ("mode lse", "{:>8}", _fmt(row["mode_lse"])),
        ("score", "{:>8}", _fmt(row["bethe"])),
        ("err", "{:>6}", _fmt(row["bethe_error"], ".2f")),
        ("lse err", "{:>7}", _fmt(row["lse_error"], ".2f")),
        ("single err", "{:>10}", _fmt(row["single_error"], ".2f")),
        ("multi err", "{:>9}", _fmt(row["multi_error"], ".2f")),
        ("m+l err", "{:>7}", _fmt(row["multi_loop_error"], ".2f")),
        ("b-m err", "{:>7}", _fmt(row["clamped_error"], ".2f")),
        ("states", "{:>6}", _fmt(row["n_states"], "d")),
        ("auto CPU s", "{:>10}", _fmt(row["auto_cpu_s"], ".2f")),
        ("AIS CPU s", "{:>9}", _fmt(row["ais_cpu_s"], ".1f")),
        ("m+l CPU s", "{:>9}", _fmt(row["multi_loop_cpu_s"], ".1f")),
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
        "--upsampled",
        action="store_true",
        help="28 x 28 digits, 64/256 hidden, BernoulliRBM's defaults, mode AIS",
    )
    parser.add_argument(
        "--mode-ais",
        action="store_true",
        help="also AIS from the 3 highest TAP fixed points (reference: largest)",
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
        run(args.quick, args.seeds, args.states, args.upsampled, args.mode_ais)
