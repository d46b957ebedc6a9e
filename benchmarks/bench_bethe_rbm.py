"""BetheRBM against scikit-learn's BernoulliRBM: epoch time and held-out likelihood.

Two problems: binarised digits (8 x 8 = 64 visible units) and the same digits
upsampled to 28 x 28 = 784 visible units (``scipy.ndimage.zoom``, bilinear),
an MNIST-sized input; 1400 digits train, 397 are held out.  Both models use
BernoulliRBM's defaults and the same seed, BetheRBM its default ``method``.
The two fits alternate in one process with one BLAS thread each, so that load
on the machine hits both alike.

Columns: ``s/ep``, CPU seconds per training epoch, and ``ratio``, their median
ratio BetheRBM / BernoulliRBM; ``logZ s``, the one-off ``log Z`` at the end of
BetheRBM's ``fit``, and ``fit ratio``, the ratio of whole fits; the held-out
log-likelihood in nats per digit (mean +- sample sd over 3 seeds), exact by
enumeration at 16 hidden units, else annealed importance sampling from the
training digits' base rates (as ``rbm_log_likelihood(model, X, method="ais")``;
at 784 visible units also from the 3 highest TAP fixed points, the largest
``log Z`` kept), ``se`` the largest AIS standard error.

``--float32`` prints instead the epoch-time ratio on float32 and on float64
data, the dtype BetheRBM trains in, and the held-out log-likelihood of the
float32 fit minus the float64 fit per seed (to be read against the spread over
seeds: training amplifies rounding).

Run: ``python benchmarks/bench_bethe_rbm.py [--quick] [--method M] [--float32]``.
"""

import os

os.environ["OPENBLAS_NUM_THREADS"] = "1"  # before numpy loads BLAS

import argparse  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

# A sibling script (benchmarks/ is the script's directory): the seeds of
# BetheRBM's log_partition="auto", reused for the mode AIS runs.
from bench_rbm_log_likelihood import auto_seeds  # noqa: E402
from scipy.ndimage import zoom  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.exceptions import ConvergenceWarning  # noqa: E402
from sklearn.neural_network import BernoulliRBM  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from sklearn_meanfield import BetheRBM  # noqa: E402
from sklearn_meanfield.bethe._multistate import (  # noqa: E402
    relaxed_multistate_log_partition,
)
from sklearn_meanfield.diagnostics import rbm_log_likelihood  # noqa: E402

N_TRAIN = 1400


def problems():
    """``{name: (X_train, X_test)}``: binarised digits at 8 x 8 and 28 x 28."""
    images, _ = load_digits(return_X_y=True)
    order = np.random.RandomState(0).permutation(len(images))
    images = images[order]
    small = (images > 7).astype(float)
    # Bilinear upsampling of the 0-16 grey levels, then the same threshold.
    large = zoom(images.reshape(-1, 8, 8), (1, 3.5, 3.5), order=1) > 7
    large = large.reshape(len(images), -1).astype(float)
    return {
        "digits 8x8": (small[:N_TRAIN], small[N_TRAIN:]),
        "digits 28x28": (large[:N_TRAIN], large[N_TRAIN:]),
    }


def mode_base_rates(model, X_train, n_modes=3):
    """Visible means of the ``n_modes`` highest TAP fixed points of ``model``,
    reached from the seeds of BetheRBM's ``log_partition="auto"``."""
    params = [
        np.asarray(a, dtype=float)
        for a in (model.components_, model.intercept_visible_, model.intercept_hidden_)
    ]
    states = relaxed_multistate_log_partition(
        *params, auto_seeds(model, params, X_train)
    ).states[:n_modes]
    return [state.mean_visible[np.newaxis] for state in states]


def held_out(model, X_train, X_test, ais, mode_ais=False):
    """Mean held-out log-likelihood and its standard error (0 when exact).

    With ``mode_ais``, the smallest over AIS from the data's base rates and
    from the base rates of the model's highest fixed points (the largest
    ``log Z``).
    """
    if model.components_.shape[0] <= 16:
        return float(rbm_log_likelihood(model, X_test, method="exact").mean()), 0.0
    bases = [X_train] + (mode_base_rates(model, X_train) if mode_ais else [])
    runs = [
        rbm_log_likelihood(
            model, X_test, method="ais", base_rates=base, return_std=True, **ais
        )
        for base in bases
    ]
    log_lik, std_error = min(runs, key=lambda run: run[0].mean())
    return float(log_lik.mean()), float(std_error)


def timed_fit(model, X):
    """CPU seconds per training epoch, and of the one-off end-of-fit ``log Z``
    (``log_partition="auto"``; 0 for BernoulliRBM)."""
    from sklearn_meanfield.bethe import rbm as rbm_module

    spent = []
    estimate = rbm_module.estimate_log_partition

    def timed_estimate(*args, **kwargs):
        start = time.process_time()
        try:
            return estimate(*args, **kwargs)
        finally:
            spent.append(time.process_time() - start)

    rbm_module.estimate_log_partition = timed_estimate
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            start = time.process_time()
            model.fit(X)
            total = time.process_time() - start
    finally:
        rbm_module.estimate_log_partition = estimate
    log_z = sum(spent)
    return (total - log_z) / model.n_iter, log_z


def training_dtype(X, options):
    """The dtype in which BetheRBM(**options) trains on ``X`` (relaxed form).

    Read off the arguments of the relaxed training epoch in a one-epoch fit
    (its ``dtype``, else the parameters'); float64 for the message-passing
    forms.
    """
    from sklearn_meanfield.bethe import rbm as rbm_module

    seen = []
    epoch = rbm_module.relaxed_training_epoch

    def spy(*args, **kwargs):
        seen.append(np.dtype(kwargs.get("dtype") or args[2].dtype))
        return epoch(*args, **kwargs)

    rbm_module.relaxed_training_epoch = spy
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            BetheRBM(**{**options, "n_components": 2, "n_iter": 1}).fit(X[:20])
    finally:
        rbm_module.relaxed_training_epoch = epoch
    return seen[0].name if seen else "float64"


def ais_options(n_visible, quick):
    """AIS cost grows with n_visible: fewer temperatures and chains there."""
    return dict(
        n_chains=100 if n_visible <= 64 else 50,
        n_temperatures=(300 if quick else 3000)
        if n_visible <= 64
        else (200 if quick else 2000),
        random_state=0,
    )


def run(quick, options):
    seeds = [0] if quick else [0, 1, 2]
    n_iter = 2 if quick else 10
    rows = []
    for name, (X_train, X_test) in problems().items():
        n_visible = X_train.shape[1]
        sizes = [16, 64, 256] if n_visible <= 64 else [64, 256]
        if quick:
            sizes = sizes[:2]
        ais = ais_options(n_visible, quick)
        for n_hidden in sizes:
            row = dict(
                problem=name,
                hidden=n_hidden,
                ratio=[],
                ll_rbm=[],
                ll_bethe=[],
                se=0.0,
                s_rbm=[],
                s_bethe=[],
                s_log_z=[],
                fit_ratio=[],
            )
            for seed in seeds:
                settings = dict(n_components=n_hidden, n_iter=n_iter, random_state=seed)
                rbm = BernoulliRBM(**settings)
                bethe = BetheRBM(**settings, **options)
                t_rbm, _ = timed_fit(rbm, X_train)
                t_bethe, t_log_z = timed_fit(bethe, X_train)
                row["s_rbm"].append(t_rbm)
                row["s_bethe"].append(t_bethe)
                row["s_log_z"].append(t_log_z)
                row["ratio"].append(t_bethe / t_rbm)
                row["fit_ratio"].append((t_bethe * n_iter + t_log_z) / (t_rbm * n_iter))
                for key, model in (("ll_rbm", rbm), ("ll_bethe", bethe)):
                    value, se = held_out(
                        model, X_train, X_test, ais, mode_ais=n_visible > 64
                    )
                    row[key].append(value)
                    row["se"] = max(row["se"], se)
            rows.append(row)
            print_row(row, header=len(rows) == 1)
    print(
        f"\nBernoulliRBM's defaults for both ({n_iter} epochs, learning rate 0.1, "
        f"batch 10), {N_TRAIN} training digits, 397 held out; BetheRBM method="
        f"{BetheRBM(**options).get_params()['method']!r}, sweeps_per_update="
        f"{BetheRBM(**options).sweeps_per_update} "
        f"({BetheRBM(**options)._sweeps_per_update()} sweeps). s/epoch: median "
        "CPU seconds per epoch (one BLAS thread); ratio: median over seeds of "
        "BetheRBM / BernoulliRBM; logZ s: BetheRBM's one-off end-of-fit log Z "
        "(log_partition='auto'); fit ratio: whole fits, log Z included. LL: "
        "held-out log-likelihood, nats per digit, mean +- "
        f"sd over {len(seeds)} seed(s); exact at 16 hidden units, AIS above, "
        "at 784 visible units the largest log Z of AIS from the data's and from "
        "the 3 highest fixed points' base rates "
        "(se: largest AIS standard error of the row). dLL = BetheRBM - "
        "BernoulliRBM, per seed, mean (min)."
    )
    return rows


def run_float32(quick, options):
    """The float32 table: epoch ratios on float32 and float64 data, and the
    held-out log-likelihood of BetheRBM trained on float32 vs float64 data."""
    seeds = [0] if quick else [0, 1, 2]
    n_iter = 2 if quick else 10
    # The end-of-fit log Z of log_partition="auto" is a one-off float64 cost,
    # not an epoch's: time the training with the single-solve estimate.
    if "log_partition" in BetheRBM().get_params():
        options = {"log_partition": "single", **options}
    for number, (name, (X_train, X_test)) in enumerate(problems().items()):
        n_visible = X_train.shape[1]
        sizes = [16, 64, 256] if n_visible <= 64 else [64, 256]
        if quick:
            sizes = sizes[:2]
        ais = ais_options(n_visible, quick)
        data = {"float32": X_train.astype(np.float32), "float64": X_train}
        dtype = training_dtype(data["float32"], options)
        for n_hidden in sizes:
            ratio = {"float32": [], "float64": []}
            seconds = {"float32": [], "float64": []}
            log_lik = {"float32": [], "float64": []}
            for seed in seeds:
                settings = dict(n_components=n_hidden, n_iter=n_iter, random_state=seed)
                for kind, X in data.items():
                    t_rbm, _ = timed_fit(BernoulliRBM(**settings), X)
                    bethe = BetheRBM(**settings, **options)
                    t_bethe, _ = timed_fit(bethe, X)
                    ratio[kind].append(t_bethe / t_rbm)
                    seconds[kind].append((t_rbm, t_bethe))
                    log_lik[kind].append(held_out(bethe, X_train, X_test, ais)[0])
            delta = np.subtract(log_lik["float32"], log_lik["float64"])
            columns = [
                ("problem", "{:<13}", name),
                ("hidden", "{:>6}", n_hidden),
                ("trains in", "{:>9}", dtype),
                (
                    "s/ep RBM32",
                    "{:>10}",
                    f"{np.median([s[0] for s in seconds['float32']]):.3f}",
                ),
                (
                    "s/ep Bethe32",
                    "{:>12}",
                    f"{np.median([s[1] for s in seconds['float32']]):.3f}",
                ),
                ("ratio32", "{:>7}", f"{np.median(ratio['float32']):.2f}"),
                ("ratio64", "{:>7}", f"{np.median(ratio['float64']):.2f}"),
                ("LL Bethe64", "{:>16}", _mean_sd(log_lik["float64"])),
                ("LL Bethe32", "{:>16}", _mean_sd(log_lik["float32"])),
                (
                    "dLL 32-64 per seed",
                    "{:>20}",
                    " ".join(f"{d:+.2f}" for d in delta),
                ),
            ]
            if number == 0 and n_hidden == sizes[0]:
                print("  ".join(fmt.format(col) for col, fmt, _ in columns))
            print("  ".join(fmt.format(v) for _, fmt, v in columns), flush=True)
    print(
        f"\nBoth models given float32 data (ratio32) or float64 data (ratio64), "
        f"BernoulliRBM's defaults ({n_iter} epochs), fits alternating, one BLAS "
        "thread; ratio: median over seeds of BetheRBM / BernoulliRBM CPU seconds "
        "per epoch (BetheRBM with log_partition='single' where it exists: the "
        "end-of-fit log Z of 'auto' is a one-off cost). 'trains in': dtype "
        "of BetheRBM's training arithmetic on "
        "float32 data. LL: BetheRBM's held-out log-likelihood trained on float64 "
        f"/ float32 data, mean +- sd over {len(seeds)} seed(s) (exact at 16 "
        "hidden units, AIS above with the same draws for both); dLL: float32 - "
        "float64, per seed, to be read against the spread over seeds (the "
        "training amplifies any rounding difference)."
    )


def _mean_sd(values):
    values = np.asarray(values)
    sd = values.std(ddof=1) if len(values) > 1 else 0.0
    return f"{values.mean():8.2f} +- {sd:4.2f}"


def print_row(row, header):
    delta = np.asarray(row["ll_bethe"]) - np.asarray(row["ll_rbm"])
    columns = [
        ("problem", "{:<13}", row["problem"]),
        ("hidden", "{:>6}", row["hidden"]),
        ("s/ep RBM", "{:>8}", f"{np.median(row['s_rbm']):.3f}"),
        ("s/ep Bethe", "{:>10}", f"{np.median(row['s_bethe']):.3f}"),
        ("ratio", "{:>5}", f"{np.median(row['ratio']):.2f}"),
        ("logZ s", "{:>6}", f"{np.median(row['s_log_z']):.2f}"),
        ("fit ratio", "{:>9}", f"{np.median(row['fit_ratio']):.2f}"),
        ("LL RBM", "{:>16}", _mean_sd(row["ll_rbm"])),
        ("LL Bethe", "{:>16}", _mean_sd(row["ll_bethe"])),
        ("se", "{:>5}", f"{row['se']:.2f}"),
        ("dLL mean (min)", "{:>14}", f"{delta.mean():6.2f} ({delta.min():5.2f})"),
    ]
    if header:
        print("  ".join(fmt.format(name) for name, fmt, _ in columns))
    print("  ".join(fmt.format(value) for _, fmt, value in columns), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="1 seed, 2 epochs, two sizes, cheap AIS"
    )
    parser.add_argument("--method", help="BetheRBM's method (default: its default)")
    parser.add_argument(
        "--sweeps-per-update", type=int, help="BetheRBM's sweeps_per_update"
    )
    parser.add_argument(
        "--float32",
        action="store_true",
        help="the float32 table instead: epoch ratios and log-likelihoods on "
        "float32 data",
    )
    args = parser.parse_args()
    options = {
        key: value
        for key, value in (
            ("method", args.method),
            ("sweeps_per_update", args.sweeps_per_update),
        )
        if value is not None
    }
    with threadpool_limits(1):
        (run_float32 if args.float32 else run)(args.quick, options)
