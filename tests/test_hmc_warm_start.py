"""Continuing the chains of a fit: ``warm_start`` and the checkpoints behind it.

The reference is always a brute-force refit: chains continued in pieces
must make exactly the draws, and so the fitted attributes, of one fit with
all the draws at once.
"""

import pickle
import warnings

import numpy as np
import pytest
from hmc_targets import FITTED, script_rhat, small_network_posterior
from sklearn.datasets import make_friedman1
from sklearn.exceptions import ConvergenceWarning

from sklearn_meanfield import HMCNetworkRegressor
from sklearn_meanfield.hmc import _chains
from sklearn_meanfield.hmc._chains import ChainCheckpoint, ChainSettings, sample_chains

# Short fits, far from converged: their warnings are expected.
pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")

SEEDS = np.array([11, 12, 13])

# Every sampler option whose state a continuation must carry: the chees
# trajectory lengths and their jitter, the annealing's restarted step size.
SAMPLER_OPTIONS = [
    {},
    {"sampler": "chees"},
    {"sampler": "chees", "anneal": True},
]


def _settings(n_samples, **options):
    return ChainSettings(n_samples, 30, 8, 0.2, **options)


@pytest.mark.parametrize("options", SAMPLER_OPTIONS)
def test_a_continued_run_draws_what_one_run_draws(options):
    posterior = small_network_posterior(40)
    whole = sample_chains(posterior, SEEDS, _settings(45, **options), n_jobs=1)
    # The first piece in two batches, the rest in one: the batching changes
    # nothing.
    first = sample_chains(posterior, SEEDS, _settings(15, **options), n_jobs=2)
    rest = sample_chains(
        posterior, SEEDS, _settings(45, **options), resume=first.checkpoint
    )
    assert first.checkpoint.n_iterations == 30 + 15
    fields = ("theta", "noise_precision", "group_precision", "train_outputs")
    fields += ("accept_prob", "n_leapfrog", "energy_error", "divergent")
    for name in fields:
        joined = np.concatenate([getattr(first, name), getattr(rest, name)])
        np.testing.assert_array_equal(joined, getattr(whole, name), err_msg=name)
    for name in ("step_size", "trajectory_length"):
        np.testing.assert_array_equal(getattr(rest, name), getattr(whole, name), name)
    # The checkpoints agree too: a third piece would continue alike.
    for a, b in zip(rest.checkpoint.state, whole.checkpoint.state):
        np.testing.assert_array_equal(a, b)


def test_continuing_leaves_the_checkpoint_as_it_was():
    posterior = small_network_posterior(40)
    options = {"sampler": "chees"}
    first = sample_chains(posterior, SEEDS, _settings(10, **options), n_jobs=1)
    again = [
        sample_chains(
            posterior, SEEDS, _settings(20, **options), resume=first.checkpoint
        )
        for _ in range(2)
    ]
    np.testing.assert_array_equal(again[0].theta, again[1].theta)
    np.testing.assert_array_equal(again[0].n_leapfrog, again[1].n_leapfrog)


def test_checkpoints_split_and_join_by_chain():
    posterior = small_network_posterior(30)
    run = sample_chains(posterior, SEEDS, _settings(6, sampler="chees"), n_jobs=1)
    checkpoint = run.checkpoint
    parts = [checkpoint.take([2]), checkpoint.take([0, 1])]
    rejoined = ChainCheckpoint.join(parts[::-1])
    assert rejoined.n_chains == 3 and parts[0].n_chains == 1
    for part in ("state", "tuning"):
        for x, y in zip(getattr(rejoined, part), getattr(checkpoint, part)):
            np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(parts[0].state.theta[0], checkpoint.state.theta[2])
    np.testing.assert_array_equal(
        parts[0].tuning.log_trajectory_length[0],
        checkpoint.tuning.log_trajectory_length[2],
    )
    # The generators are copies in the same state.
    taken = parts[0].generators[0]
    original = checkpoint.generators[2]
    assert taken is not original
    assert taken.bit_generator.state == original.bit_generator.state
    with pytest.raises(ValueError, match="numbers of iterations"):
        ChainCheckpoint.join([checkpoint, checkpoint._replace(n_iterations=1)])


# ---------------------------------------------------------------- estimator


def _data(n=70, seed=0):
    return make_friedman1(n_samples=n, n_features=5, noise=0.3, random_state=seed)


def _model(**params):
    # max_samples=None: every fit keeps n_samples draws (continuation until
    # the chains agree has tests of its own, test_hmc_continuation.py).
    base = dict(
        hidden_layer_size=3,
        n_warmup=30,
        n_leapfrog=8,
        n_chains=3,
        random_state=0,
        max_samples=None,
    )
    base.update(params)
    return HMCNetworkRegressor(**base)


def _assert_same_fit(a, b):
    for name in FITTED:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), name)
    for name, values in a.chain_draws().items():
        np.testing.assert_array_equal(values, b.chain_draws()[name], name)


@pytest.mark.parametrize("params", [{}, {"sampler": "hmc"}, {"anneal_warmup": True}])
def test_warm_started_fits_equal_one_fit_with_all_the_draws(params):
    X, y = _data()
    whole = _model(n_samples=40, **params).fit(X, y)
    model = _model(n_samples=12, warm_start=True, n_jobs=2, **params).fit(X, y)
    first_draws = model.parameter_draws_
    model.set_params(n_samples=25, n_jobs=1).fit(X, y)
    model.set_params(n_samples=40).fit(X, y)
    _assert_same_fit(model, whole)
    # The first fit's draws lead every chain's draws.
    per_chain = model.chain_draws()["parameters"]
    np.testing.assert_array_equal(
        per_chain[:, :12].reshape(first_draws.shape), first_draws
    )
    np.testing.assert_array_equal(model.predict(X), whole.predict(X))


def test_warm_start_without_a_previous_fit_samples_anew():
    X, y = _data()
    np.testing.assert_array_equal(
        _model(n_samples=10, warm_start=True).fit(X, y).parameter_draws_,
        _model(n_samples=10).fit(X, y).parameter_draws_,
    )


def test_warm_start_ignores_a_new_random_state_and_survives_pickling():
    X, y = _data()
    whole = _model(n_samples=30).fit(X, y)
    model = _model(n_samples=15, warm_start=True).fit(X, y)
    restored = pickle.loads(pickle.dumps(model))
    restored.set_params(n_samples=30, random_state=5).fit(X, y)
    _assert_same_fit(restored, whole)


def test_without_warm_start_a_refit_samples_anew():
    X, y = _data()
    model = _model(n_samples=10).fit(X, y)
    model.set_params(n_samples=20).fit(X, y)
    _assert_same_fit(model, _model(n_samples=20).fit(X, y))


@pytest.mark.parametrize(
    "change, match",
    [
        ({"n_leapfrog": 9}, "other values of n_leapfrog"),
        ({"hidden_layer_size": 4, "n_chains": 2}, "hidden_layer_size, n_chains"),
        ({"n_samples": 10}, "n_samples=10 must be at least the 12 draws"),
    ],
)
def test_warm_start_refuses_chains_it_cannot_continue(change, match):
    X, y = _data()
    model = _model(n_samples=12, warm_start=True).fit(X, y)
    before = model.parameter_draws_
    with pytest.raises(ValueError, match=match):
        model.set_params(**change).fit(X, y)
    assert model.parameter_draws_ is before  # the previous fit stays


@pytest.mark.parametrize("which", ["X", "y", "sample_weight"])
def test_warm_start_refuses_other_data(which):
    X, y = _data()
    data = {"X": X, "y": y, "sample_weight": np.ones(len(y))}
    model = _model(n_samples=8, warm_start=True).fit(**data)
    other = dict(data)
    other[which] = data[which].copy()
    other[which][3] += 0.5
    with pytest.raises(ValueError, match="given other data"):
        model.set_params(n_samples=16).fit(**other)
    # The same data (as other arrays) continues.
    model.fit(**{name: value.copy() for name, value in data.items()})
    assert model.parameter_draws_.shape[0] == 3 * 16


def test_warm_start_with_as_many_draws_warns_and_keeps_the_fit():
    X, y = _data()
    model = _model(n_samples=8, warm_start=True).fit(X, y)
    before, predicted = dict(vars(model)), model.predict(X)
    with pytest.warns(UserWarning, match="nothing was sampled"):
        model.fit(X, y)
    # Only the scalers are refitted (to the same data).
    changed = [name for name, value in before.items() if vars(model)[name] is not value]
    assert sorted(changed) == ["_x_scaler", "_y_scaler"]
    np.testing.assert_array_equal(model.predict(X), predicted)


def test_an_interrupted_continuation_keeps_the_fit_it_continued(monkeypatch):
    X, y = _data()
    whole = _model(n_samples=30).fit(X, y)
    model = _model(n_samples=15, warm_start=True, n_jobs=1).fit(X, y)
    before = model.parameter_draws_
    calls = {"n": 0}
    transition = _chains.transition

    def interrupted(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 7:
            raise KeyboardInterrupt
        return transition(*args, **kwargs)

    monkeypatch.setattr(_chains, "transition", interrupted)
    with pytest.raises(KeyboardInterrupt):
        model.set_params(n_samples=30).fit(X, y)
    assert model.parameter_draws_ is before
    monkeypatch.setattr(_chains, "transition", transition)
    # The chains' generators were not advanced by the interrupted attempt.
    _assert_same_fit(model.fit(X, y), whole)


def test_the_convergence_warning_suggests_continuing_the_chains(monkeypatch):
    # Chains a little apart (scripted R-hat, so that the remedy does not hang
    # on rounding), continued as far as max_samples allows: more draws of
    # the same chains is the remedy, after how far they went.
    script_rhat(monkeypatch, lambda n_draws: 1.08)
    X, y = _data()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = _model(n_samples=8, max_samples=16).fit(X, y)
    assert model.n_draws_ == 16
    messages = [str(w.message) for w in caught if w.category is ConvergenceWarning]
    rhat = [m for m in messages if "R-hat" in m]
    assert rhat == [
        "The 3 chains disagree: R-hat 1.080 > 1.05, for the prediction at "
        "training sample 0. The chains were continued to 16 draws each "
        "(max_samples allows 16). Refit with warm_start=True and a larger "
        "n_samples to continue these chains."
    ]


def test_a_fit_without_warm_start_can_be_continued_after_the_warning():
    # What the ConvergenceWarning suggests: switch warm_start on and refit.
    X, y = _data()
    whole = _model(n_samples=24).fit(X, y)
    model = _model(n_samples=12).fit(X, y)
    model.set_params(warm_start=True, n_samples=24).fit(X, y)
    _assert_same_fit(model, whole)
