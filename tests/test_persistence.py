"""Pickling and cloning: every exported estimator, fitted with small settings.

* ``pickle`` round trip: the unpickled model predicts exactly what the
  original predicts (every prediction method it has) and carries the same
  fitted attributes;
* ``clone`` + refit with the same ``random_state``: exactly the same model.

Estimators are found through ``sklearn_meanfield.__all__`` and use the small
settings of ``tests/test_common.py`` (``FAST_PARAMS``), so a new estimator is
covered as soon as it is exported.
"""

import pickle

import numpy as np
import pytest
from sklearn.base import clone
from test_common import FAST_PARAMS, public_estimator_classes
from test_common import small_data as _data

# Fits use test_common's FAST_PARAMS, too short to converge: their
# ConvergenceWarnings are expected.
pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")

PREDICTION_METHODS = (
    "predict",
    "predict_proba",
    "decision_function",
    "transform",
    "score_samples",
)


def _instance(cls):
    params = dict(FAST_PARAMS.get(cls.__name__, {}))
    if "random_state" in cls().get_params():
        params.setdefault("random_state", 0)
    return cls(**params)


def _outputs(estimator, X):
    return {
        name: getattr(estimator, name)(X)
        for name in PREDICTION_METHODS
        if hasattr(estimator, name)
    }


def _fitted_attributes(estimator):
    return {
        name: value
        for name, value in vars(estimator).items()
        if name.endswith("_") and not name.startswith("_")
    }


def _assert_same_attributes(a, b):
    attrs_a, attrs_b = _fitted_attributes(a), _fitted_attributes(b)
    assert attrs_a.keys() == attrs_b.keys()
    assert attrs_a, "no fitted attributes found"
    for name, value in attrs_a.items():
        other = attrs_b[name]
        if isinstance(value, np.random.RandomState):
            # Same generator state: later draws (e.g. gibbs) will agree too.
            for part_a, part_b in zip(value.get_state(), other.get_state()):
                np.testing.assert_array_equal(part_a, part_b, err_msg=name)
        elif isinstance(value, list | tuple):
            # Element by element: the parts may differ in shape (e.g. the
            # relaxed BetheRBM's messages_, visible and hidden means).
            assert len(value) == len(other), name
            for part_a, part_b in zip(value, other):
                np.testing.assert_array_equal(part_a, part_b, err_msg=name)
        elif isinstance(value, np.ndarray | float | int):
            np.testing.assert_array_equal(value, other, err_msg=name)
        else:  # kernels and other objects with an equality
            assert value == other, name


ESTIMATORS = [_instance(cls) for cls in public_estimator_classes()]


def _ids(estimator):
    return type(estimator).__name__


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=_ids)
def test_pickle_round_trip_predicts_identically(estimator):
    X, y = _data(estimator)
    fitted = clone(estimator).fit(X, y)
    restored = pickle.loads(pickle.dumps(fitted))
    expected, got = _outputs(fitted, X), _outputs(restored, X)
    assert expected, "no prediction method found"
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name], err_msg=name)
    _assert_same_attributes(fitted, restored)
    assert restored.get_params() == fitted.get_params()


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=_ids)
def test_clone_and_refit_gives_the_same_model(estimator):
    X, y = _data(estimator)
    first = clone(estimator).fit(X, y)
    cloned = clone(first)
    # A clone carries the parameters only, never the fit.
    assert not _fitted_attributes(cloned)
    assert cloned.get_params() == first.get_params()
    second = cloned.fit(X, y)
    expected, got = _outputs(first, X), _outputs(second, X)
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name], err_msg=name)
    _assert_same_attributes(first, second)
