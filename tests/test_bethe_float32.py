"""The relaxed (TAP) training kernel in float32, against its float64 form.

References: the float64 arithmetic of the same functions, the plain float64
sweep (``references.relaxed_sweep``), and :func:`gibbs_hidden_step` at the
float32 parameters.  The tolerances are a few float32 spacings (6e-8 near 1/2)
times the number of operations a value has been through, with a factor of
several to spare.  Over many updates the float32 and float64 trainings drift
apart, as two float64 ones do from initial weights 1e-8 apart (the training
dynamics amplify any rounding): compare fitted models by their held-out
likelihood over seeds (``benchmarks/bench_bethe_rbm.py --float32``), not
entry by entry.
"""

import numpy as np
import pytest
import scipy.sparse as sp
from rbm_inputs import digits_epoch_inputs
from references import relaxed_sweep
from sklearn.utils import gen_even_slices

from sklearn_meanfield import BetheRBM
from sklearn_meanfield.bethe import _learning, _relaxed, _sampling
from sklearn_meanfield.bethe._learning import relaxed_training_epoch
from sklearn_meanfield.bethe._relaxed import (
    augmented_sweeps,
    cold_state,
    sweep_workspace,
)

SETTINGS = dict(learning_rate=0.1, damping=0.0, tol=1e-7, sweeps_per_update=6)


def dense_rbm(n_visible, n_hidden, gain, seed):
    """Random RBM with couplings of order 1 / sqrt(n), as after training."""
    rng = np.random.RandomState(seed)
    W = rng.normal(0, gain / np.sqrt(n_visible + n_hidden), (n_hidden, n_visible))
    return W, rng.normal(0, 0.5, n_visible), rng.normal(0, 0.5, n_hidden)


def augment(W, b, c, dtype):
    """``[[W, c], [b^T, 0]]`` in ``dtype``."""
    return np.block([[W, c[:, None]], [b[None, :], np.zeros((1, 1))]]).astype(dtype)


@pytest.mark.parametrize("damping", [0.0, 0.3])
def test_float32_sweeps_follow_the_float64_sweep(damping):
    W, b, c = dense_rbm(64, 32, 1.5, 0)
    augmented = augment(W, b, c, np.float32)
    weights_sq = augmented[:32, :64] ** 2
    visible = np.append(np.full(64, 0.5), 1).astype(np.float32)
    hidden = np.append(np.full(32, 0.5), 1).astype(np.float32)
    var_v, var_h = np.full(64, 0.25, np.float32), np.empty(32, np.float32)
    workspace = sweep_workspace(32, 64, np.float32)
    assert all(a.dtype == np.float32 for a in workspace)
    state = cold_state(32, 64)
    for n_sweeps in (1, 5, 14):  # 1, 6 and 20 sweeps in all
        for _ in range(n_sweeps):
            state, delta = relaxed_sweep(W, W**2, b, c, state, damping)
        delta32 = augmented_sweeps(
            augmented,
            weights_sq,
            visible,
            hidden,
            n_sweeps,
            damping,
            variances=(var_v, var_h),
            workspace=workspace,
        )
        # A few float32 spacings (6e-8 near 1/2) per sweep's rounding.
        np.testing.assert_allclose(visible[:64], state[0], rtol=0, atol=5e-7)
        np.testing.assert_allclose(hidden[:32], state[1], rtol=0, atol=5e-7)
        np.testing.assert_allclose(var_v, state[0] * (1 - state[0]), atol=5e-7)
        np.testing.assert_allclose(var_h, state[1] * (1 - state[1]), atol=5e-7)
        assert delta32 == pytest.approx(delta, rel=1e-3, abs=1e-6)
        assert visible[64] == hidden[32] == 1.0
    for array in (visible, hidden, var_v, var_h, augmented, weights_sq):
        assert array.dtype == np.float32
    # Not float64 arithmetic rounded at the end: the float32 means differ
    # from the float64 ones by a float32 rounding error or more.
    assert np.abs(visible[:64] - state[0]).max() > 1e-9


@pytest.mark.parametrize("sparse", [False, True])
def test_float32_epoch_follows_the_float64_epoch(sparse):
    X, slices, params = digits_epoch_inputs(dtype=np.float32)
    data = sp.csr_matrix(X) if sparse else X
    results = {}
    for dtype in (np.float64, np.float32):
        fitted = [a.astype(dtype) for a in params]
        state, chain, _ = relaxed_training_epoch(
            data,
            slices,
            *fitted,
            cold_state(9, 64),
            **SETTINGS,
            hidden_chain=np.zeros((10, 9)),
            random_state=np.random.RandomState(0),
        )
        results[dtype] = fitted, state
        assert all(a.dtype == dtype for a in (*fitted, *state, chain))
    for a, b_ in zip(*(results[d][0] for d in (np.float32, np.float64))):
        # float32 rounding (6e-8 relative) over the epoch's steps.
        assert 0 < np.abs(a - b_).max() < 2e-6 * np.abs(b_).max()
    for a, b_ in zip(*(results[d][1] for d in (np.float32, np.float64))):
        np.testing.assert_allclose(a, b_, rtol=0, atol=1e-6)


def test_float32_gradient_step_follows_the_float64_step():
    # One batch, the sweeps converged first: the step itself (data term minus
    # the TAP negative phase, learning rate 0.1) to float32 accuracy.
    X, _, params = digits_epoch_inputs(n_hidden=16, dtype=np.float32)
    W, b, c = params
    steps = {}
    for dtype in (np.float64, np.float32):
        start = [a.astype(np.float32).astype(dtype) for a in (W, b, c)]
        fitted = [a.copy() for a in start]
        relaxed_training_epoch(
            X,
            [slice(0, 40)],
            *fitted,
            cold_state(16, 64),
            **{**SETTINGS, "sweeps_per_update": 300},
        )
        steps[dtype] = [
            np.asarray(a, np.float64) - np.asarray(s, np.float64)
            for a, s in zip(fitted, start)
        ]
    for step32, step64 in zip(steps[np.float32], steps[np.float64]):
        scale = np.abs(step64).max()
        assert scale > 1e-3
        # The float32 step is rounded against parameters of order 1, so its
        # error is ~1e-7 absolute: a few 1e-6 of the step.
        np.testing.assert_allclose(step32, step64, rtol=0, atol=3e-5 * scale)


def test_dtype_keyword_trains_float64_parameters_in_float32():
    # The estimator keeps float64 parameter arrays between epochs: dtype=
    # float32 gives exactly the float32 epoch, the arrays holding float32
    # values.
    X, slices, params = digits_epoch_inputs(dtype=np.float32)
    outputs = []
    for arrays, dtype in (
        ([a.astype(np.float32) for a in params], None),
        ([a.astype(np.float32).astype(np.float64) for a in params], np.float32),
    ):
        state, chain, _ = relaxed_training_epoch(
            X,
            slices,
            *arrays,
            cold_state(9, 64),
            **SETTINGS,
            hidden_chain=np.zeros((10, 9)),
            random_state=np.random.RandomState(1),
            dtype=dtype,
        )
        outputs.append([*arrays, *state, chain])
        assert all(a.dtype == np.float32 for a in (*state, chain))
    for a, b_ in zip(*outputs):
        np.testing.assert_array_equal(a, b_)
    for a in outputs[1][:3]:
        assert a.dtype == np.float64
        np.testing.assert_array_equal(a, a.astype(np.float32))


class _Recorder:
    """Stands in for a module (numpy, a ufunc): records the dtype of every
    array passed to or returned by its callables."""

    def __init__(self, target, seen, name=""):
        self._target, self._seen, self._name = target, seen, name

    def _note(self, value, name):
        if isinstance(value, np.ndarray):
            self._seen.add((name, value.dtype))
        elif isinstance(value, tuple):
            for item in value:
                self._note(item, name)

    def __call__(self, *args, **kwargs):
        for value in (*args, *kwargs.values()):
            self._note(value, self._name)
        result = self._target(*args, **kwargs)
        self._note(result, self._name)
        return result

    def __getattr__(self, attribute):
        value = getattr(self._target, attribute)
        if isinstance(value, type) or not callable(value):
            return value
        return _Recorder(value, self._seen, f"{self._name}.{attribute}".lstrip("."))


def test_float32_epoch_makes_no_float64_array(monkeypatch):
    # Every numpy call, expit and BLAS product of the epoch, its sweeps and
    # its chain steps sees float32 arrays only (and booleans), apart from
    # the generator's uniforms compared with the probabilities.
    X, slices, params = digits_epoch_inputs(dtype=np.float32)
    state = tuple(m.astype(np.float32) for m in cold_state(9, 64))
    seen = set()
    for module in (_learning, _relaxed, _sampling):
        monkeypatch.setattr(module, "np", _Recorder(np, seen))
        monkeypatch.setattr(module, "expit", _Recorder(module.expit, seen, "expit"))
    for name in ("dgemm", "sgemm"):
        monkeypatch.setattr(
            _learning, name, _Recorder(getattr(_learning, name), seen, name)
        )
    for sparse in (False, True):
        relaxed_training_epoch(
            sp.csr_matrix(X) if sparse else X,
            slices,
            *[a.astype(np.float32) for a in params],
            state,
            **SETTINGS,
            hidden_chain=np.zeros((10, 9), np.float32),
            random_state=np.random.RandomState(0),
        )
    names = {name for name, _ in seen}
    assert {"sgemm", "expit", "dot", "matmul", "multiply.outer"} <= names
    assert "dgemm" not in names
    odd = {(n, d) for n, d in seen if d not in (np.float32, np.bool_)}
    assert odd == {("less", np.dtype(np.float64))}


def test_bethe_rbm_trains_in_float32_on_float32_data():
    # fit on float32 data is the float32 epoch from the estimator's start
    # (weights N(0, 0.01) from the seed, chains at zero), bit for bit.
    X, _, _ = digits_epoch_inputs(n_samples=60, dtype=np.float32)
    model = BetheRBM(n_components=9, n_iter=1, random_state=0).fit(X)
    rng = np.random.RandomState(0)
    params = [rng.normal(0, 0.01, (9, 64)), np.zeros(64), np.zeros(9)]
    relaxed_training_epoch(
        X,
        list(gen_even_slices(60, 6, n_samples=60)),
        *params,
        cold_state(9, 64),
        **SETTINGS,
        hidden_chain=np.zeros((10, 9)),
        random_state=rng,
        dtype=np.float32,
    )
    assert model.components_.dtype == np.float32
    np.testing.assert_array_equal(model.components_, params[0].astype(np.float32))
    np.testing.assert_array_equal(model.intercept_visible_, params[1])
    np.testing.assert_array_equal(model.intercept_hidden_, params[2])
