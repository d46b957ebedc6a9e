"""
===============================================================
Bethe approximation of the restricted Boltzmann machine
===============================================================

Huang and Toyoizumi (2015) estimate the free energy of a restricted Boltzmann
machine, and the averages its likelihood gradient needs, by message passing
instead of sampling.  This example reproduces their two checks -- the Bethe
free energy against exact enumeration for small random RBMs (the inset of
their Figure 2) and the Bethe statistics against a long Gibbs chain (their
Figure 4) -- and then trains :class:`~sklearn_meanfield.BetheRBM` on binarised
digits, following the held-out log-likelihood during training, Bethe estimate
against the exact value (enumeration of the 16 hidden units).
"""

# %%
# Random RBMs of the paper's ensemble
# -----------------------------------
# In the paper's +-1 spin units, weights are N(0, g/N) and fields N(0, v);
# :func:`paper_ensemble` converts them to scikit-learn's {0, 1} units.

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_digits

from sklearn_meanfield import BetheRBM
from sklearn_meanfield.diagnostics import (
    rbm_bethe_solve,
    rbm_gibbs_moments,
    rbm_log_likelihood,
    rbm_log_partition,
)


def paper_ensemble(n_visible, n_hidden, g, v, rng):
    w = rng.normal(0, np.sqrt(g / n_visible), (n_hidden, n_visible))
    phi = rng.normal(0, np.sqrt(v), n_visible)
    h = rng.normal(0, np.sqrt(v), n_hidden)
    return 4 * w, 2 * phi - 2 * w.sum(axis=0), 2 * h - 2 * w.sum(axis=1)


# %%
# Free energy: Bethe against exact enumeration (Figure 2, inset)
# --------------------------------------------------------------
# N = 20 visible units, g = 1, v = 0.05.  Left: the free energy density
# f = -log Z / N of ten instances at alpha = M/N = 0.6; right: the mean
# absolute error as a function of alpha, for both forms of message passing.

n_visible = 20
alphas = [0.2, 0.4, 0.6, 0.8, 1.0]
errors = {"bipartite": [], "gaussian": []}
scatter = []
for alpha in alphas:
    per_method = {method: [] for method in errors}
    for seed in range(10):
        W, b, c = paper_ensemble(
            n_visible, int(alpha * n_visible), 1.0, 0.05, np.random.RandomState(seed)
        )
        exact = rbm_log_partition((W, b, c))
        for method in errors:
            bethe = rbm_log_partition((W, b, c), method="bethe", bethe_form=method)
            per_method[method].append(abs(bethe - exact) / n_visible)
            if alpha == 0.6 and method == "bipartite":
                scatter.append((-exact / n_visible, -bethe / n_visible))
    for method in errors:
        errors[method].append(np.mean(per_method[method]))

fig, axes = plt.subplots(1, 2, figsize=(9, 3.8))
scatter = np.array(scatter)
axes[0].plot(scatter[:, 0], scatter[:, 1], "o")
lims = [scatter.min() - 0.01, scatter.max() + 0.01]
axes[0].plot(lims, lims, "k-", lw=0.8)
axes[0].set(xlabel="exact f", ylabel="Bethe f", title="alpha = 0.6, ten instances")
for method, values in errors.items():
    axes[1].semilogy(alphas, values, "o-", label=method)
axes[1].set(xlabel="alpha = M / N", ylabel="|delta f|", title="mean |Bethe - exact|")
axes[1].legend()
fig.tight_layout()

# %%
# Statistics: Bethe against a long Gibbs chain (Figure 4b)
# --------------------------------------------------------
# N = 100, alpha = 0.5, g = 0.55, v = 0.02: magnetisations m_i, hidden
# magnetisations m_hat_a and correlations C_ai = <s_a sigma_i> (spin units).

W, b, c = paper_ensemble(100, 50, 0.55, 0.02, np.random.RandomState(0))
solution = rbm_bethe_solve((W, b, c))
sampled = rbm_gibbs_moments(
    (W, b, c), n_chains=200, n_burn_in=300, n_samples=1500, random_state=0
)


def spins(mean_v, mean_h, joint):
    return (
        2 * mean_v - 1,
        2 * mean_h - 1,
        4 * joint - 2 * mean_h[:, None] - 2 * mean_v[None, :] + 1,
    )


bethe_stats = spins(
    solution.mean_visible, solution.mean_hidden, solution.mean_hidden_visible
)
fig, axes = plt.subplots(1, 3, figsize=(10, 3.4))
for ax, name, gs, ba in zip(axes, ["m", "m_hat", "C"], spins(*sampled), bethe_stats):
    ax.plot(gs.ravel(), ba.ravel(), ".", ms=3)
    lim = [min(gs.min(), ba.min()), max(gs.max(), ba.max())]
    ax.plot(lim, lim, "k-", lw=0.8)
    rms = np.sqrt(np.mean((gs - ba) ** 2))
    ax.set(xlabel="Gibbs sampling", ylabel="Bethe", title=f"{name}: RMS {rms:.4f}")
fig.tight_layout()

# %%
# Training on binarised digits
# ----------------------------
# 16 hidden units, so that the exact log-likelihood is computable by
# enumerating the 2**16 hidden states.  Training is deterministic (the
# negative phase is message passing, not sampling), so fitting with
# ``n_iter = k`` gives the model after epoch ``k`` of one long run.

X, _ = load_digits(return_X_y=True)
X = (X > 7).astype(float)
order = np.random.RandomState(0).permutation(len(X))
X_train, X_test = X[order[:1400]], X[order[1400:]]

epochs, exact_curve, bethe_curve = [1, 2, 4, 8, 12], [], []
for n_iter in epochs:
    # log_partition="single": one TAP fixed point's log Z.  The default
    # ("auto") enumerates the 2**16 hidden states at this size, and would
    # coincide with the exact curve.
    model = BetheRBM(
        n_components=16,
        learning_rate=0.05,
        n_iter=n_iter,
        random_state=0,
        log_partition="single",
    ).fit(X_train)
    exact_curve.append(rbm_log_likelihood(model, X_test).mean())
    bethe_curve.append(model.score_samples(X_test).mean())

fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
axes[0].plot(epochs, exact_curve, "o-", label="exact (enumeration)")
# The default method="relaxed" scores with the TAP free energy, the large-N
# form of the Bethe one.
axes[0].plot(epochs, bethe_curve, "s--", label="one TAP fixed point")
axes[0].set(
    xlabel="epoch",
    ylabel="held-out log-likelihood (nats)",
    title=f"stability factor {model.stability_:.2f}",
)
axes[0].legend()
filters = model.components_.reshape(16, 8, 8)
tiles = np.block([[filters[4 * r + k] for k in range(4)] for r in range(4)])
axes[1].imshow(tiles, cmap="RdBu_r")
axes[1].set(title="learned filters", xticks=[], yticks=[])
fig.tight_layout()
plt.show()
