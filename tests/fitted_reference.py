"""Fitted results of every estimator on a few small cases, for refactors.

A refactor must not change what an estimator learns.  On your own machine,
before the refactor::

    python tests/fitted_reference.py /tmp/before.npz

then, after it::

    SKLEARN_MEANFIELD_FITTED_REFERENCE=/tmp/before.npz \\
        pytest tests/test_fitted_identity.py

The script fits each case below with one BLAS thread and writes every public
fitted attribute and every prediction method's output; the test refits the
same cases the same way and compares.  Both files come from the same machine,
so a refactor that keeps the arithmetic agrees to the last bits.  No
reference is kept in the repository: another CPU's BLAS and libm kernels
round differently, and short HMC chains, kernel optimisers and restarts
carry a last-bit difference far (see ``doc/developers.rst``).

The cases cover the code paths a refactor can reach: exact and weight-space
perceptron, binary and multi-class GP classification with optimised kernels,
learned label noise, the step likelihood, one-vs-one, short HMC chains with
and without ARD, annealed and with adapted lengths, the ensemble's full
and low-rank covariances, and the Bethe RBM's two message-passing methods.
"""

from pathlib import Path

import numpy as np
from sklearn.datasets import load_breast_cancer, load_digits, load_iris, make_moons
from sklearn.gaussian_process.kernels import RBF, ConstantKernel
from sklearn.preprocessing import StandardScaler

import sklearn_meanfield as smf

PREDICTION_METHODS = (
    "predict",
    "predict_proba",
    "decision_function",
    "transform",
    "score_samples",
)


def _breast_cancer(n=160):
    data = load_breast_cancer()
    X = StandardScaler().fit_transform(data.data)[:, :8]
    rows = np.random.RandomState(0).permutation(len(X))[:n]
    return X[rows], data.target[rows]


def _iris():
    X, y = load_iris(return_X_y=True)
    rows = np.random.RandomState(1).permutation(len(X))[:90]
    return StandardScaler().fit_transform(X)[rows], y[rows]


def _moons(n=70):
    return make_moons(n_samples=n, noise=0.25, random_state=2)


def _friedman(n=50):
    rng = np.random.RandomState(3)
    X = rng.uniform(size=(n, 5))
    y = (
        10 * np.sin(np.pi * X[:, 0] * X[:, 1])
        + 20 * (X[:, 2] - 0.5) ** 2
        + 10 * X[:, 3]
        + 5 * X[:, 4]
        + rng.normal(size=n)
    )
    return X, y


def _two_outputs(n=40):
    rng = np.random.RandomState(4)
    X = rng.uniform(-2, 2, size=(n, 2))
    Y = np.column_stack([np.sin(X[:, 0]) * X[:, 1], np.cos(X.sum(1))])
    return X, Y + 0.05 * rng.normal(size=Y.shape)


def _sine(n=40):
    rng = np.random.RandomState(5)
    X = rng.uniform(-3, 3, size=(n, 1))
    return X, np.sin(X[:, 0]) + 0.1 * rng.normal(size=n)


def _digits(n=120):
    X, _ = load_digits(return_X_y=True)
    return (X[:n] > 7).astype(float), None


def _cases():
    """Name -> (estimator, X, y): small enough for a few seconds each."""
    kernel = ConstantKernel(1.0) * RBF(1.0)
    return {
        "perceptron_exact": (
            smf.TAPPerceptronClassifier(n_restarts=2, random_state=0),
            *_breast_cancer(),
        ),
        "perceptron_weight_space_naive": (
            smf.TAPPerceptronClassifier(
                label_noise=0.1,
                variance="naive",
                space="weight",
                n_restarts=2,
                random_state=0,
            ),
            *_breast_cancer(),
        ),
        "perceptron_iris": (
            smf.TAPPerceptronClassifier(n_restarts=1, random_state=0),
            *_iris(),
        ),
        "gpc_probit_optimised": (
            smf.TAPGaussianProcessClassifier(
                kernel=kernel, n_restarts_optimizer=1, random_state=0
            ),
            *_moons(),
        ),
        "gpc_logistic_noise_auto": (
            smf.TAPGaussianProcessClassifier(
                kernel=kernel, likelihood="logistic", label_noise="auto", random_state=0
            ),
            *_moons(),
        ),
        "gpc_step_fixed": (
            smf.TAPGaussianProcessClassifier(
                kernel=ConstantKernel(1.0) * RBF(1.0),
                likelihood="step",
                label_noise=0.1,
                optimizer=None,
                random_state=0,
            ),
            *_moons(),
        ),
        "gpc_iris_ovr": (
            smf.TAPGaussianProcessClassifier(kernel=kernel, random_state=0),
            *_iris(),
        ),
        "gpc_iris_ovo": (
            smf.TAPGaussianProcessClassifier(
                kernel=kernel, multi_class="one_vs_one", random_state=0
            ),
            *_iris(),
        ),
        "hmc_friedman": (
            smf.HMCNetworkRegressor(
                hidden_layer_size=4,
                n_samples=30,
                max_samples=None,
                n_warmup=30,
                sampler="hmc",
                gradient_dtype="float64",
                n_leapfrog=15,
                n_chains=2,
                random_state=0,
            ),
            *_friedman(),
        ),
        "hmc_two_outputs": (
            smf.HMCNetworkRegressor(
                hidden_layer_size=3,
                n_samples=20,
                max_samples=None,
                n_warmup=20,
                sampler="hmc",
                gradient_dtype="float64",
                n_leapfrog=10,
                ard=False,
                n_chains=2,
                random_state=1,
            ),
            *_two_outputs(),
        ),
        "hmc_annealed": (
            smf.HMCNetworkRegressor(
                hidden_layer_size=3,
                n_samples=20,
                max_samples=None,
                n_warmup=30,
                sampler="hmc",
                n_leapfrog=10,
                anneal_warmup=True,
                n_chains=2,
                random_state=2,
            ),
            *_friedman(),
        ),
        "hmc_annealed_chees": (
            smf.HMCNetworkRegressor(
                hidden_layer_size=3,
                n_samples=20,
                max_samples=None,
                n_warmup=30,
                sampler="chees",
                n_leapfrog=10,
                anneal_warmup=True,
                n_chains=2,
                random_state=3,
            ),
            *_friedman(),
        ),
        "ensemble_full": (
            smf.EnsembleLearningRegressor(
                hidden_layer_size=3, n_restarts=2, max_iter=25, random_state=0
            ),
            *_sine(),
        ),
        "ensemble_low_rank": (
            smf.EnsembleLearningRegressor(
                hidden_layer_size=3,
                covariance="lowrank",
                n_restarts=1,
                max_iter=25,
                random_state=0,
            ),
            *_friedman(),
        ),
        "rbm_bipartite": (
            smf.BetheRBM(
                n_components=8,
                n_iter=3,
                random_state=0,
                method="bipartite",
                sweeps_per_update=10,
                log_partition="single",
            ),
            *_digits(),
        ),
        "rbm_gaussian": (
            smf.BetheRBM(
                n_components=6,
                n_iter=2,
                method="gaussian",
                random_state=0,
                sweeps_per_update=10,
                log_partition="single",
            ),
            *_digits(60),
        ),
    }


CASE_NAMES = tuple(_cases())


def _as_arrays(name, value):
    """Numeric leaves of a fitted attribute, flattened to named arrays."""
    if isinstance(value, np.random.RandomState):
        return {name: value.get_state()[1]}
    if hasattr(value, "theta") and hasattr(value, "get_params"):  # a kernel
        return {name: np.asarray(value.theta)}
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            out.update(_as_arrays(f"{name}.{key}", item))
        return out
    if isinstance(value, list | tuple) and value and not np.isscalar(value[0]):
        out = {}
        for i, item in enumerate(value):
            out.update(_as_arrays(f"{name}[{i}]", item))
        return out
    try:
        array = np.asarray(value)
    except (ValueError, TypeError):
        return {}
    if array.dtype == object:
        return {}
    return {name: array}


def fitted_results(case):
    """Fit one case; return its fitted attributes and outputs as arrays."""
    estimator, X, y = _cases()[case]
    estimator.fit(X, y) if y is not None else estimator.fit(X)
    results = {}
    for name, value in vars(estimator).items():
        if name.endswith("_") and not name.startswith("_"):
            results.update(_as_arrays(name, value))
    for method in PREDICTION_METHODS:
        if hasattr(estimator, method):
            results[f"{method}()"] = np.asarray(getattr(estimator, method)(X))
    return results


def write_reference(path):
    """Fit every case with one BLAS thread and save the results to ``path``."""
    from threadpoolctl import threadpool_limits

    arrays = {}
    with threadpool_limits(1):
        for case in CASE_NAMES:
            for key, value in fitted_results(case).items():
                arrays[f"{case}/{key}"] = value
    np.savez_compressed(path, **arrays)
    return arrays


if __name__ == "__main__":
    import sys
    import warnings

    if len(sys.argv) != 2:
        sys.exit("usage: python tests/fitted_reference.py OUTPUT.npz")
    warnings.simplefilter("ignore")
    path = Path(sys.argv[1])
    written = write_reference(path)
    print(f"{len(written)} arrays from {len(CASE_NAMES)} cases -> {path}")
