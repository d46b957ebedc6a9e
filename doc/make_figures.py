"""Compute the user guide's figures: one PNG per method in ``doc/_static``.

Run ``python doc/make_figures.py`` (16 s on an idle 2-core machine) to redraw
them all, or ``python doc/make_figures.py tap_gpc bethe_rbm`` for some.  Every
figure is computed with the public estimators on small data (the Bethe figure
also enumerates the small RBMs' states exactly); the PNGs are committed so
that the documentation builds without running this script.
"""

import sys
import time
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import load_digits, make_moons  # noqa: E402
from sklearn.exceptions import ConvergenceWarning  # noqa: E402

import sklearn_meanfield as smf  # noqa: E402

STATIC = Path(__file__).resolve().parent / "_static"
DPI = 100
SIZE_ONE = (6.4, 3.6)
SIZE_TWO = (9.6, 3.8)


def _save(fig, name):
    path = STATIC / f"{name}.png"
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    print(f"wrote {path.name} ({path.stat().st_size / 1024:.0f} KB)")


def _one_d_data(n=60, seed=0):
    """Noisy sine on two separated clusters: the gap shows the band widen."""
    rng = np.random.RandomState(seed)
    x = np.concatenate([rng.uniform(-3, -0.7, n // 2), rng.uniform(0.9, 3, n // 2)])
    y = np.sin(1.5 * x) + 0.15 * rng.randn(n)
    return x[:, np.newaxis], y


def tap_gpc():
    """Decision boundary with the predictive probability; built-in leave-one-out
    probabilities against refitting without each point (kernel held fixed)."""
    from sklearn.base import clone

    X, y = make_moons(n_samples=80, noise=0.25, random_state=0)
    model = smf.TAPGaussianProcessClassifier(random_state=0).fit(X, y)
    fixed = clone(model).set_params(kernel=model.kernel_, optimizer=None)
    refit = np.empty(len(y))
    for i in range(len(y)):
        keep = np.arange(len(y)) != i
        refit[i] = fixed.fit(X[keep], y[keep]).predict_proba(X[i : i + 1])[0, 1]
    loo = model.loo_proba_[:, 1]

    fig, (left, right) = plt.subplots(1, 2, figsize=SIZE_TWO)
    grid = np.linspace(-2, 3, 120), np.linspace(-1.5, 2, 100)
    xx, yy = np.meshgrid(*grid)
    proba = model.predict_proba(np.c_[xx.ravel(), yy.ravel()])[:, 1]
    filled = left.contourf(
        xx, yy, proba.reshape(xx.shape), levels=np.linspace(0, 1, 11), cmap="RdBu_r"
    )
    left.contour(xx, yy, proba.reshape(xx.shape), levels=[0.5], colors="k")
    left.scatter(X[:, 0], X[:, 1], c=y, cmap="RdBu_r", edgecolors="k", s=22)
    fig.colorbar(filled, ax=left, label="P(class 1)")
    left.set_title(f"predictive probability (n = {len(y)})")
    right.plot([0, 1], [0, 1], color="0.6", lw=1)
    right.scatter(refit, loo, s=14)
    gap = np.abs(loo - refit).max()
    right.set_xlabel("P(class 1) refitted without the point")
    right.set_ylabel("built-in leave-one-out P(class 1)")
    right.set_title(f"leave-one-out: one fit vs {len(y)} refits (max gap {gap:.3f})")
    _save(fig, "tap_gpc")


def tap_perceptron():
    """Teacher-student learning curve: test error and built-in LOO error."""
    n_features, n_draws = 20, 5
    sizes = np.array([20, 40, 80, 160, 320, 640])
    test, loo = np.zeros((2, len(sizes), n_draws))
    for d in range(n_draws):
        rng = np.random.RandomState(d)
        teacher = rng.randn(n_features)
        X_test = rng.randn(4000, n_features)
        y_test = np.sign(X_test @ teacher)
        for k, m in enumerate(sizes):
            X = rng.randn(m, n_features)
            y = np.sign(X @ teacher)
            model = smf.TAPPerceptronClassifier(random_state=0).fit(X, y)
            test[k, d] = 1 - model.score(X_test, y_test)
            loo[k, d] = model.loo_error_
    fig, ax = plt.subplots(figsize=SIZE_ONE)
    alpha = sizes / n_features
    for values, label in ((test, "test error"), (loo, "built-in LOO error")):
        mean = values.mean(axis=1)
        sem = values.std(axis=1, ddof=1) / np.sqrt(n_draws)
        ax.errorbar(alpha, mean, yerr=sem, marker="o", capsize=3, label=label)
    ax.set_xscale("log")
    ax.set_xticks(alpha, [f"{a:g}" for a in alpha])
    ax.minorticks_off()
    ax.set_xlabel("samples per weight m / N (N = 20)")
    ax.set_ylabel("error")
    ax.set_title(f"Bayes perceptron, teacher-student, mean of {n_draws} draws")
    ax.legend()
    _save(fig, "tap_perceptron")


def _band(ax, model, X, y, title):
    grid = np.linspace(-4, 4, 200)[:, np.newaxis]
    mean, std = model.predict(grid, return_std=True)
    ax.fill_between(
        grid[:, 0], mean - 2 * std, mean + 2 * std, alpha=0.3, label="mean ± 2 sd"
    )
    ax.plot(grid[:, 0], mean, label="predictive mean")
    ax.plot(grid[:, 0], np.sin(1.5 * grid[:, 0]), "k--", lw=1, label="truth")
    ax.scatter(X[:, 0], y, s=10, color="k", zorder=3, label=f"data (n = {len(y)})")
    ax.set_ylim(-3, 3)
    ax.set_xlabel("x")
    ax.set_title(title)
    ax.legend(loc="lower left", fontsize=8, ncol=2)


def hmc_network():
    """Posterior predictive band of a Bayesian network sampled by HMC."""
    X, y = _one_d_data()
    model = smf.HMCNetworkRegressor(
        hidden_layer_size=10,
        n_samples=200,
        n_warmup=200,
        n_chains=2,
        random_state=0,
    ).fit(X, y)
    fig, ax = plt.subplots(figsize=SIZE_ONE)
    _band(ax, model, X, y, "HMCNetworkRegressor: posterior predictive (2 chains)")
    _save(fig, "hmc_network")


def ensemble_learning():
    """Predictive band of the variational (ensemble-learning) network."""
    X, y = _one_d_data()
    model = smf.EnsembleLearningRegressor(hidden_layer_size=10, random_state=0)
    model.fit(X, y)
    fig, ax = plt.subplots(figsize=SIZE_ONE)
    _band(ax, model, X, y, "EnsembleLearningRegressor: predictive distribution")
    _save(fig, "ensemble_learning")


def bethe_rbm():
    """Bethe log Z against the exact one, by enumeration, for small RBMs trained
    on binarised digits."""
    from sklearn_meanfield.diagnostics import rbm_log_partition

    X, _ = load_digits(return_X_y=True)
    X = (X[:500] > 7).astype(float)
    sizes = [2, 4, 6, 8, 10, 12, 14, 16]
    fig, (left, right) = plt.subplots(1, 2, figsize=SIZE_TWO)
    for n_iter, marker in ((5, "o"), (20, "s")):
        exact, bethe = [], []
        for n_hidden in sizes:
            # The single fixed point's log Z: the default "auto" enumerates at
            # these sizes, which would show zero error.
            model = smf.BetheRBM(
                n_components=n_hidden,
                n_iter=n_iter,
                random_state=0,
                log_partition="single",
            )
            model.fit(X)
            exact.append(rbm_log_partition(model))
            bethe.append(model.log_partition_function())
        exact, bethe = np.array(exact), np.array(bethe)
        label = f"{n_iter} epochs"
        (line,) = left.plot(sizes, exact, marker + "-", label=f"exact, {label}")
        left.plot(
            sizes,
            bethe,
            marker + "--",
            color=line.get_color(),
            mfc="none",
            label=f"Bethe, {label}",
        )
        right.plot(sizes, bethe - exact, marker + "-", label=label)
    left.set_xlabel("hidden units")
    left.set_ylabel("log Z")
    left.set_title("RBMs trained on 500 binarised digits")
    left.legend(fontsize=8)
    right.axhline(0, color="k", lw=0.8)
    right.set_xlabel("hidden units")
    right.set_ylabel("Bethe - exact log Z (nats)")
    right.set_title("error of the Bethe estimate (exact: enumeration)")
    right.legend()
    _save(fig, "bethe_rbm")


FIGURES = {
    f.__name__: f
    for f in (tap_gpc, tap_perceptron, hmc_network, ensemble_learning, bethe_rbm)
}


def main(names):
    for name in names or FIGURES:
        start = time.perf_counter()
        with warnings.catch_warnings():
            # Short runs on toy data: a convergence warning does not change
            # what the figure shows, and one line each would bury the output.
            warnings.simplefilter("ignore", ConvergenceWarning)
            FIGURES[name]()
        print(f"  {name}: {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
