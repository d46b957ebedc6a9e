"""Chains that have not converged are continued: ``max_samples``.

Two properties, each tested apart from the other:

* **The rule.** While the largest split R-hat is above ``CONVERGED_RHAT`` and
  at most ``CONTINUE_MAX_RHAT`` (``SMALL_DATA_CONTINUE_MAX_RHAT`` on small
  data), the chains go on by ``n_samples`` draws, up to ``max_samples``.  The
  R-hat of a short chain is a chaotic function of its draws, which change
  with the last bit of any BLAS or libm kernel; so the rule is tested on a
  scripted R-hat (the number of draws so far -> R-hat), the same on every
  machine.
* **Continuing is exact.** Continued chains make the draws one longer run
  makes: the continued fit equals, attribute for attribute, the brute-force
  refit with as many draws from the start.  Both are computed in this process,
  so they agree bit for bit on any kernel.

The fits use Neal's fixed-length ``sampler="hmc"`` on 40 rows: a few hundred
milliseconds each.
"""

import warnings

import numpy as np
import pytest
from hmc_targets import FITTED as FITTED_ATTRIBUTES
from hmc_targets import script_rhat as _script_rhat
from sklearn.exceptions import ConvergenceWarning

from sklearn_meanfield import HMCNetworkRegressor, _memory
from sklearn_meanfield.hmc import regressor as hmc_regressor

# Short fits: the convergence warnings are expected (the tests that read the
# warnings record them).
pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")

N_SAMPLES = 40

CONVERGED, CONTINUE_MAX = hmc_regressor.CONVERGED_RHAT, hmc_regressor.CONTINUE_MAX_RHAT
SMALL_MAX_RHAT = hmc_regressor.SMALL_DATA_CONTINUE_MAX_RHAT
SMALL_FACTOR = hmc_regressor.SMALL_DATA_MAX_SAMPLES_FACTOR
AUTO_FACTOR = hmc_regressor.AUTO_MAX_SAMPLES_FACTOR

FITTED = (*FITTED_ATTRIBUTES, "n_draws_")

# R-hat values on either side of the rule's bounds.
MIXED = CONVERGED - 0.02  # converged: not continued
CLOSE = (CONVERGED + CONTINUE_MAX) / 2  # continued by either rule
APART = (CONTINUE_MAX + SMALL_MAX_RHAT) / 2  # continued on small data only
FAR = SMALL_MAX_RHAT + 0.1  # never continued


def _data():
    rng = np.random.RandomState(0)
    X = rng.uniform(-2, 2, size=(40, 1))
    return X, np.sin(X[:, 0]) + 0.1 * rng.standard_normal(40)


def _model(hidden=1, **params):
    base = dict(
        hidden_layer_size=hidden,
        n_samples=N_SAMPLES,
        n_warmup=60,
        n_leapfrog=15,
        n_chains=3,
        sampler="hmc",
        max_samples="auto",
        random_state=0,
    )
    base.update(params)
    return HMCNetworkRegressor(**base)


def _fit(model, X, y, **fit_params):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        model.fit(X, y, **fit_params)
    messages = [str(w.message) for w in caught if w.category is ConvergenceWarning]
    return model, messages


def _assert_same_fit(a, b):
    for name in FITTED:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), name)


@pytest.fixture(autouse=True)
def _rows_above_small_data(monkeypatch):
    """These 40 rows count as more than ``SMALL_DATA_ROWS``: the tests take
    the general rule unless they set the threshold, as the small-data tests
    below do."""
    monkeypatch.setattr(hmc_regressor, "SMALL_DATA_ROWS", 0)


@pytest.fixture
def script_rhat(monkeypatch):
    """Make the largest split R-hat a function of the draws per chain.

    ``script_rhat(rhat_after)`` replaces the R-hat that the rule and the
    convergence check read by ``rhat_after(n_draws)`` for every monitored
    quantity; the effective sample sizes stay computed from the draws.
    """
    return lambda rhat_after: _script_rhat(monkeypatch, rhat_after)


def _path(*values):
    """R-hat after N_SAMPLES, 2 N_SAMPLES, ... draws; the last one stays."""
    return lambda n_draws: values[min(n_draws // N_SAMPLES, len(values)) - 1]


def _expected_draws(rhat_after, max_draws, max_rhat):
    """The rule written out: draws per chain it keeps."""
    n_draws = N_SAMPLES
    while n_draws < max_draws and CONVERGED < rhat_after(n_draws) <= max_rhat:
        n_draws = min(n_draws + N_SAMPLES, max_draws)
    return n_draws


@pytest.mark.parametrize(
    "path, max_samples, expected",
    [
        # Converges after two continuations.
        ((CLOSE, CLOSE, MIXED), "auto", 3 * N_SAMPLES),
        # Never converges: stops at max_samples ("auto": four times n_samples).
        ((CLOSE,), "auto", AUTO_FACTOR * N_SAMPLES),
        # An integer max_samples that is no multiple of n_samples: the last
        # continuation is shorter.
        ((CLOSE,), 100, 100),
        # Converged from the start, or too far apart to continue.
        ((MIXED,), "auto", N_SAMPLES),
        ((APART,), "auto", N_SAMPLES),
        # Further apart after a continuation: stops there.
        ((CLOSE, FAR, CLOSE), "auto", 2 * N_SAMPLES),
        # No continuation asked for.
        ((CLOSE,), None, N_SAMPLES),
    ],
)
def test_chains_are_continued_while_rhat_is_between_the_bounds(
    script_rhat, path, max_samples, expected
):
    rhat_after = _path(*path)
    script_rhat(rhat_after)
    max_draws = {"auto": AUTO_FACTOR * N_SAMPLES, None: N_SAMPLES}.get(
        max_samples, max_samples
    )
    assert _expected_draws(rhat_after, max_draws, CONTINUE_MAX) == expected
    X, y = _data()
    model, messages = _fit(_model(max_samples=max_samples), X, y)
    assert model.n_draws_ == expected
    assert model.rhat_ == rhat_after(expected)
    assert model.chain_draws()["parameters"].shape[:2] == (3, expected)
    continued = [m for m in messages if "were continued" in m]
    if expected > N_SAMPLES and model.rhat_ > CONVERGED:
        # Stopped unconverged: the warning says how far the chains went.
        assert any(f"continued to {expected} draws each" in m for m in continued)
        assert any(f"max_samples allows {max_draws}" in m for m in continued)
    else:
        assert not continued


@pytest.mark.parametrize(
    "hidden, seed, options",
    [
        (1, 2, {}),
        (2, 1, {}),
        # Adapted, jittered trajectory lengths continue too.
        (1, 2, {"sampler": "chees"}),
        (2, 4, {"sampler": "chees", "anneal_warmup": True}),
    ],
)
def test_continued_chains_equal_one_fit_with_as_many_draws(
    script_rhat, hidden, seed, options
):
    # Two continuations, then converged: the fit with 3 * n_samples draws.
    script_rhat(_path(CLOSE, CLOSE, MIXED))
    X, y = _data()
    model = _model(hidden, random_state=seed, n_jobs=2, **options).fit(X, y)
    assert model.n_draws_ == 3 * N_SAMPLES
    refit = _model(
        hidden,
        n_samples=3 * N_SAMPLES,
        max_samples=None,
        random_state=seed,
        **options,
    ).fit(X, y)
    _assert_same_fit(model, refit)


def test_the_rule_reads_the_draws_own_rhat():
    # Unscripted: whatever R-hat the chains reach on this machine, the fit
    # keeps the number of draws the rule gives on the refits' own R-hat.
    X, y = _data()
    refits = {
        n: _model(2, n_samples=n, max_samples=None, random_state=1).fit(X, y)
        for n in range(N_SAMPLES, AUTO_FACTOR * N_SAMPLES + 1, N_SAMPLES)
    }
    expected = _expected_draws(
        lambda n: refits[n].rhat_, AUTO_FACTOR * N_SAMPLES, CONTINUE_MAX
    )
    model = _model(2, random_state=1).fit(X, y)
    assert model.n_draws_ == expected
    _assert_same_fit(model, refits[expected])


def test_continuation_stops_where_the_draws_would_not_fit(script_rhat, monkeypatch):
    script_rhat(_path(CLOSE))
    X, y = _data()
    reference = _model(max_samples=None).fit(X, y)
    layout = reference._layout
    needed = hmc_regressor.sampling_memory_bytes(
        2 * N_SAMPLES, 3, len(y), layout.n_params, layout.n_outputs, layout.n_groups
    )
    # Room for n_samples draws (the fit itself), not for twice as many.
    monkeypatch.setattr(_memory, "available_memory_bytes", lambda: 0.9 * needed / 0.8)
    model, messages = _fit(_model(), X, y)
    assert model.n_draws_ == N_SAMPLES
    _assert_same_fit(model, reference)
    assert any(f"{2 * N_SAMPLES} draws per chain would not fit" in m for m in messages)


def test_a_continued_fit_continues_with_warm_start(script_rhat):
    script_rhat(_path(CLOSE, MIXED))
    X, y = _data()
    model = _model(warm_start=True).fit(X, y)
    assert model.n_draws_ == 2 * N_SAMPLES
    model.set_params(n_samples=3 * N_SAMPLES, max_samples=None).fit(X, y)
    whole = _model(n_samples=3 * N_SAMPLES, max_samples=None)
    _assert_same_fit(model, whole.fit(X, y))
    with pytest.raises(ValueError, match=f"at least the {3 * N_SAMPLES} draws"):
        model.set_params(n_samples=N_SAMPLES).fit(X, y)


def test_max_samples_is_validated():
    X, y = _data()
    for bad in (0, 3, "all", 2.5):
        with pytest.raises(ValueError, match="max_samples"):
            _model(max_samples=bad).fit(X, y)


def test_continued_chains_are_callback_subtasks_and_a_stop_keeps_the_draws(
    script_rhat,
):
    pytest.importorskip("sklearn.callback")
    from callback_helpers import TickDeadline

    script_rhat(_path(CLOSE, CLOSE, MIXED))
    X, y = _data()
    continued = _model(2).fit(X, y)
    assert continued.n_draws_ == 3 * N_SAMPLES
    # Each run of the chains (the first, then every continuation) has its
    # own chain subtasks; the callbacks change no draw.
    recorder = TickDeadline(10**9, task_name="chain")
    model = _model(2).set_callbacks(recorder).fit(X, y)
    assert len(recorder.ended) == 3 * 3
    _assert_same_fit(model, continued)
    # A stop asked once the first run's chains have ended ends the
    # continuation early: the chains keep the draws made so far, which lead
    # the uninterrupted ones.
    stopped = _model(2).set_callbacks(TickDeadline(3, "chain"))
    stopped, _ = _fit(stopped, X, y)
    assert N_SAMPLES < stopped.n_draws_ < 3 * N_SAMPLES
    kept = continued.chain_draws()["parameters"][:, : stopped.n_draws_]
    np.testing.assert_array_equal(stopped.chain_draws()["parameters"], kept)


@pytest.mark.parametrize(
    "path, expected",
    [
        # Further apart than the general rule continues from.
        ((APART, CLOSE, MIXED), 3 * N_SAMPLES),
        # Longer than the general rule continues: to SMALL_DATA_MAX_SAMPLES_FACTOR.
        ((CLOSE,), SMALL_FACTOR * N_SAMPLES),
        # Still held apart beyond the small-data bound.
        ((FAR,), N_SAMPLES),
    ],
)
def test_small_data_continue_from_further_apart_and_for_longer(
    script_rhat, monkeypatch, path, expected
):
    monkeypatch.setattr(hmc_regressor, "SMALL_DATA_ROWS", 500)
    rhat_after = _path(*path)
    script_rhat(rhat_after)
    assert _expected_draws(rhat_after, SMALL_FACTOR * N_SAMPLES, SMALL_MAX_RHAT) == (
        expected
    )
    X, y = _data()
    model = _model().fit(X, y)
    assert model.n_draws_ == expected


@pytest.mark.parametrize(
    "threshold, weights, small",
    # 40 rows are small data up to SMALL_DATA_ROWS = 40; with weights 2 (80
    # rows' worth, the posterior of every row twice) up to 80.
    [(40, 1.0, True), (39, 1.0, False), (80, 2.0, True), (79, 2.0, False)],
)
def test_small_data_rows_are_counted_with_their_weights(
    script_rhat, monkeypatch, threshold, weights, small
):
    monkeypatch.setattr(hmc_regressor, "SMALL_DATA_ROWS", threshold)
    # Continued by the small-data rule alone.
    script_rhat(_path(APART, MIXED))
    X, y = _data()
    model = _model().fit(X, y, sample_weight=np.full(len(y), weights))
    assert model.n_draws_ == (2 * N_SAMPLES if small else N_SAMPLES)
