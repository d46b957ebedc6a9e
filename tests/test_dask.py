"""Every parallel part of the library under a Dask cluster gives local results.

The restarts, chains and one-vs-rest problems go through joblib; with
``joblib.parallel_config(backend="dask")`` they run on a ``dask.distributed``
cluster, here a small ``LocalCluster`` on the loopback interface (one worker,
two threads, messages over TCP).  Seeds are drawn before dispatch, so each fit
must equal the local sequential fit bit for bit.  (Dask hands a task its
arrays at arbitrary byte offsets, and NumPy's loops for misaligned arrays sum
in another order than BLAS: before ``_parallel`` realigned them, about half
the runs gave a one-vs-rest perceptron that differed in the last bits, 7.8e-15.)
Skipped only when the ``distributed`` extra is not installed.
"""

import numpy as np
import pytest
from joblib import parallel_config
from sklearn.datasets import make_classification, make_friedman1
from sklearn.model_selection import GridSearchCV, StratifiedKFold
from test_common import FAST_PARAMS

from sklearn_meanfield import (
    EnsembleLearningRegressor,
    HMCNetworkRegressor,
    TAPGaussianProcessClassifier,
    TAPPerceptronClassifier,
)
from sklearn_meanfield._parallel import blas_threads_per_worker, run_restarts

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def client():
    with (
        distributed.LocalCluster(
            n_workers=1,
            threads_per_worker=2,
            processes=False,
            protocol="tcp",
            host="127.0.0.1",
            dashboard_address=":0",
        ) as cluster,
        distributed.Client(cluster) as dask_client,
    ):
        yield dask_client


def _same(actual, desired):
    np.testing.assert_array_equal(actual, desired)


def _on_dask(make_estimator, X, y):
    with parallel_config(backend="dask"):
        return make_estimator().fit(X, y)


def _noisy(scale, seed):
    return scale * np.random.default_rng(seed).standard_normal(4)


def _blas_threads(seed):
    from threadpoolctl import threadpool_info

    return [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]


def test_restarts_on_dask_equal_local_and_limit_blas(client):
    local = run_restarts(_noisy, 5, 3, args=(2.0,), n_jobs=1)
    with parallel_config(backend="dask"):
        remote = run_restarts(_noisy, 5, 3, args=(2.0,))
        threads = run_restarts(_blas_threads, 4, 0)
    for a, b in zip(local, remote):
        np.testing.assert_array_equal(a, b)
    # Two tasks at a time on the cluster: each gets its share of the cores.
    expected = blas_threads_per_worker(2)
    assert all(t and set(t) == {expected} for t in threads), threads
    # The work did run on the cluster.
    assert sum(client.run(lambda: 1).values()) == 1


def _three_classes(n_samples=90):
    return make_classification(
        n_samples=n_samples,
        n_features=4,
        n_informative=3,
        n_redundant=0,
        n_classes=3,
        n_clusters_per_class=1,
        class_sep=1.5,
        random_state=0,
    )


def test_perceptron_one_vs_rest_on_dask(client):
    X, y = _three_classes()

    def make(n_jobs=None):
        return TAPPerceptronClassifier(random_state=0, n_jobs=n_jobs)

    local = make(n_jobs=1).fit(X, y)
    remote = _on_dask(make, X, y)
    _same(local.coef_, remote.coef_)
    _same(local.predict_proba(X), remote.predict_proba(X))
    _same(local.loo_proba_, remote.loo_proba_)


def test_gpc_optimizer_restarts_and_one_vs_rest_on_dask(client):
    X, y = _three_classes(45)

    def make(n_jobs=None):
        return TAPGaussianProcessClassifier(
            n_restarts_optimizer=1, random_state=0, n_jobs=n_jobs
        )

    # Three one-vs-rest problems, each with two optimiser starts.
    local = make(n_jobs=1).fit(X, y)
    remote = _on_dask(make, X, y)
    _same(local.log_marginal_likelihood_value_, remote.log_marginal_likelihood_value_)
    _same(local.predict_proba(X), remote.predict_proba(X))
    _same(local.loo_proba_, remote.loo_proba_)


def test_hmc_chains_on_dask(client):
    X, y = make_friedman1(n_samples=50, n_features=5, noise=0.3, random_state=0)
    params = FAST_PARAMS["HMCNetworkRegressor"]

    def make(n_jobs=None):
        return HMCNetworkRegressor(**{**params, "n_jobs": n_jobs})

    local = make(n_jobs=1).fit(X, y)
    remote = _on_dask(make, X, y)
    _same(local.predict(X), remote.predict(X))
    _same(local.acceptance_rate_, remote.acceptance_rate_)
    _same(local.loo_prediction_, remote.loo_prediction_)


def test_ensemble_restarts_on_dask(client):
    X, y = make_friedman1(n_samples=50, n_features=5, noise=0.3, random_state=0)
    params = {**FAST_PARAMS["EnsembleLearningRegressor"], "n_restarts": 2}

    def make(n_jobs=None):
        return EnsembleLearningRegressor(**{**params, "n_jobs": n_jobs})

    local = make(n_jobs=1).fit(X, y)
    remote = _on_dask(make, X, y)
    _same(local.mean_, remote.mean_)
    _same(local.predict(X), remote.predict(X))
    _same(local.scores_, remote.scores_)


def test_outer_grid_search_on_dask(client):
    X, y = make_classification(
        n_samples=60, n_features=4, n_informative=3, n_redundant=0, random_state=0
    )
    grid = {"likelihood": ["probit", "step"], "label_noise": [0.0, 0.1]}
    cv = StratifiedKFold(3, shuffle=True, random_state=0)

    def search(n_jobs):
        estimator = TAPGaussianProcessClassifier(optimizer=None, n_jobs=1)
        return GridSearchCV(estimator, grid, cv=cv, n_jobs=n_jobs)

    local = search(n_jobs=1).fit(X, y)
    with parallel_config(backend="dask"):
        remote = search(n_jobs=-1).fit(X, y)
    _same(local.cv_results_["mean_test_score"], remote.cv_results_["mean_test_score"])
    assert local.best_params_ == remote.best_params_
    _same(local.predict_proba(X), remote.best_estimator_.predict_proba(X))
