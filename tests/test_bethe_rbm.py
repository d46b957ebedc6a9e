"""BetheRBM, the estimator: BernoulliRBM's contract, exact references, training."""

import itertools
import pickle
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from callback_helpers import TickDeadline
from scipy.special import expit
from sklearn.base import clone
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.neural_network import BernoulliRBM
from sklearn.utils.estimator_checks import parametrize_with_checks
from sklearn.utils.validation import validate_data

from sklearn_meanfield import BetheRBM
from sklearn_meanfield.bethe._exact import exact_log_likelihood, exact_moments
from sklearn_meanfield.bethe._learning import positive_phase
from sklearn_meanfield.bethe._multistate import estimate_log_partition
from sklearn_meanfield.bethe._relaxed import relaxed_solve
from sklearn_meanfield.bethe.rbm import _FITTED, _check_unit_interval


class _SquashedBetheRBM(BetheRBM):
    """BetheRBM that maps x >= 0 to x / (1 + x) in [0, 1) before validating.

    scikit-learn's checks fit on values above 1, which BetheRBM's fit rejects
    by design; on squashed data every check must pass (negative values still
    raise, as the positive_only tag requires).
    """

    def _validate(self, X, reset, unit_interval=None):
        X = validate_data(
            self, X, accept_sparse="csr", dtype=(np.float64, np.float32), reset=reset
        )
        if sp.issparse(X):
            X = X.copy()
            X.data = np.where(X.data >= 0, X.data / (1 + np.abs(X.data)), X.data)
        else:
            X = np.where(X >= 0, X / (1 + np.abs(X)), X)
        _check_unit_interval(X, unit_interval or "transform")
        return X


@parametrize_with_checks([_SquashedBetheRBM(n_components=4, n_iter=3, random_state=0)])
def test_sklearn_checks_on_unit_interval_data(estimator, check):
    check(estimator)


def all_states(n):
    return np.array(list(itertools.product([0.0, 1.0], repeat=n)))


def binary_digits():
    X, y = load_digits(return_X_y=True)
    return (X > 7).astype(float), y


def set_parameters(model, W, b, c):
    model.components_, model.intercept_visible_, model.intercept_hidden_ = W, b, c
    return model


@pytest.mark.parametrize(
    "X, message",
    [
        (np.array([[0.0, 1.5], [1.0, 0.0]]), "Values above 1"),
        (np.array([[0.0, -0.5], [1.0, 0.0]]), "Negative values"),
        (sp.csr_matrix(np.array([[0.0, 2.0], [1.0, 0.0]])), r"\[0, 1\]"),
    ],
)
def test_only_the_likelihood_methods_need_the_unit_interval(X, message):
    with pytest.raises(ValueError, match=message):
        BetheRBM(n_components=2).fit(X)
    with pytest.raises(ValueError, match=message):
        BetheRBM(n_components=2).partial_fit(X)
    fitted = BetheRBM(n_components=2, n_iter=1, random_state=0).fit(
        np.array([[0.0, 1.0], [1.0, 0.5]])
    )
    with pytest.raises(ValueError, match="score_samples") as error:
        fitted.score_samples(X)
    # The advice must not lead back into the trap: a plain MinMaxScaler maps
    # held-out data outside [0, 1], MinMaxScaler(clip=True) does not.
    assert "MinMaxScaler(clip=True)" in str(error.value)
    assert "transform and gibbs accept any values" in str(error.value)
    # p(h | v) is defined for any v: transform and gibbs accept what
    # BernoulliRBM accepts and give its numbers.
    peer = BernoulliRBM(n_components=2, n_iter=1, random_state=0).fit(
        np.array([[0.0, 1.0], [1.0, 0.5]])
    )
    set_parameters(
        peer, fitted.components_, fitted.intercept_visible_, fitted.intercept_hidden_
    )
    np.testing.assert_allclose(fitted.transform(X), peer.transform(X), rtol=1e-12)
    dense = X.toarray() if sp.issparse(X) else X
    fitted.random_state_ = np.random.RandomState(5)
    peer.random_state_ = np.random.RandomState(5)
    np.testing.assert_array_equal(fitted.gibbs(X), peer.gibbs(dense))


def test_error_message_names_the_method_and_the_range():
    X = np.array([[0.0, 1.0], [1.0, 0.5]])
    fitted = BetheRBM(n_components=2, n_iter=1, random_state=0).fit(X)
    with pytest.raises(ValueError, match=r"BetheRBM.score_samples.*\[-0.25, 0.75\]"):
        fitted.score_samples(X - 0.25)
    with pytest.raises(ValueError, match=r"BetheRBM.partial_fit.*\[0, 3\]"):
        fitted.partial_fit(3 * X)


def test_free_energy_transform_and_features_match_bernoulli_rbm():
    rng = np.random.RandomState(0)
    W, b, c = rng.normal(size=(5, 7)), rng.normal(size=7), rng.normal(size=5)
    X = (rng.uniform(size=(20, 7)) < 0.4).astype(float)
    ours = BetheRBM(n_components=5, n_iter=1, random_state=0).fit(X)
    peer = BernoulliRBM(n_components=5, n_iter=1, random_state=0).fit(X)
    set_parameters(ours, W, b, c)
    set_parameters(peer, W, b, c)
    np.testing.assert_allclose(ours._free_energy(X), peer._free_energy(X))
    np.testing.assert_allclose(ours.transform(X), peer.transform(X))
    np.testing.assert_array_equal(
        ours.get_feature_names_out(), [f"betherbm{i}" for i in range(5)]
    )
    np.testing.assert_allclose(
        ours.transform(sp.csr_matrix(X)), peer.transform(X), rtol=1e-12
    )


def test_score_samples_is_exact_on_a_tree_and_normalised():
    # One hidden unit: a tree, where the Bethe log Z is exact, so
    # score_samples equals the exact log-likelihood.
    rng = np.random.RandomState(1)
    W, b, c = rng.normal(0, 2, (1, 6)), rng.normal(size=6), rng.normal(size=1)
    model = BetheRBM(n_components=1, n_iter=1, random_state=0, method="bipartite")
    model.fit(all_states(6))
    set_parameters(model, W, b, c)
    V = all_states(6)
    np.testing.assert_allclose(
        model.score_samples(V), exact_log_likelihood(V, W, b, c), atol=1e-8
    )
    assert model.log_partition_function() == pytest.approx(
        exact_moments(W, b, c)[0], abs=1e-8
    )


def test_partial_fit_is_one_exact_gradient_step_on_a_tree():
    # A single hidden unit makes the Bethe negative phase exact, so one
    # partial_fit moves the parameters by learning_rate * (data - model)
    # averages, both computed here by enumeration.
    rng = np.random.RandomState(2)
    X = (rng.uniform(size=(30, 5)) < 0.3).astype(float)
    model = BetheRBM(
        n_components=1,
        learning_rate=0.2,
        random_state=0,
        tol=1e-12,
        method="bipartite",
    )
    model.partial_fit(X[:1])  # initialise
    W, b, c = (
        model.components_.copy(),
        model.intercept_visible_.copy(),
        model.intercept_hidden_.copy(),
    )
    model.max_sweeps = model.sweeps_per_update = 200  # converge before the step
    model.partial_fit(X)
    _, mean_v, mean_h, joint = exact_moments(W, b, c)
    pos_v, pos_h, pos_joint = positive_phase(X, W, c)
    np.testing.assert_allclose(
        model.components_, W + 0.2 * (pos_joint - joint), atol=1e-9
    )
    np.testing.assert_allclose(
        model.intercept_visible_, b + 0.2 * (pos_v - mean_v), atol=1e-9
    )
    np.testing.assert_allclose(
        model.intercept_hidden_, c + 0.2 * (pos_h - mean_h), atol=1e-9
    )


@pytest.mark.parametrize("method", ["relaxed", "bipartite"])
def test_fit_equals_repeated_partial_fit_on_the_same_batches(method):
    X, _ = binary_digits()
    X = X[:60]
    params = dict(n_components=6, batch_size=20, random_state=0, method=method)
    fitted = BetheRBM(n_iter=2, **params).fit(X)
    stream = BetheRBM(**params)
    for _ in range(2):
        for start in range(0, 60, 20):
            stream.partial_fit(X[start : start + 20])
    # partial_fit ends each call with a full solve (warm start only), so the
    # messages differ slightly; the parameters follow the same path.
    np.testing.assert_allclose(stream.components_, fitted.components_, atol=1e-3)
    np.testing.assert_allclose(
        stream.intercept_visible_, fitted.intercept_visible_, atol=1e-3
    )


def test_gibbs_is_reproducible_and_binary():
    X, _ = binary_digits()
    model = BetheRBM(n_components=8, n_iter=1, random_state=0).fit(X[:100])
    first = clone(model).fit(X[:100]).gibbs(X[:10])
    second = clone(model).fit(X[:100]).gibbs(X[:10])
    np.testing.assert_array_equal(first, second)
    assert first.shape == (10, 64) and first.dtype == bool


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_unstable_model_warns_and_training_stays_finite():
    # Strong random weights (the paper's ensemble far above g = 1) make the
    # Bethe fixed point unstable; training with a huge step must still give
    # finite parameters and say what went wrong.
    rng = np.random.RandomState(3)
    X = (rng.uniform(size=(40, 30)) < 0.5).astype(float)
    model = BetheRBM(n_components=20, learning_rate=50.0, batch_size=5, n_iter=3)
    model.fit(X)  # its warnings are filtered: the partial_fit's is the point
    for value in (model.components_, model.intercept_visible_, model.score_samples(X)):
        assert np.all(np.isfinite(value))
    # The paper's ensemble at g = 6 with zero spin fields, in {0, 1} units.
    w = rng.normal(0, np.sqrt(6 / 30), (20, 30))
    set_parameters(model, 4 * w, -2 * w.sum(axis=0), -2 * w.sum(axis=1))
    model.learning_rate = 1e-3
    with pytest.warns(ConvergenceWarning, match="unstable|did not converge"):
        model.partial_fit(X[:5])
    assert np.isfinite(model.stability_)


def test_verbose_prints_log_likelihood_and_stability(capsys):
    X, _ = binary_digits()
    BetheRBM(n_components=4, n_iter=2, verbose=1, random_state=0).fit(X[:50])
    out = capsys.readouterr().out
    assert out.count("[BetheRBM] epoch") == 2
    assert "Bethe log-likelihood" in out and "stability" in out


def _train_test():
    X, y = binary_digits()
    order = np.random.RandomState(0).permutation(len(y))
    return X[order[:1400]], X[order[1400:]], y[order[:1400]], y[order[1400:]]


@pytest.mark.parametrize("method", ["relaxed", "bipartite"])
def test_digits_held_out_log_likelihood_against_bernoulli_rbm(method):
    # 64 visible, 16 hidden, the same epochs and learning rate for both; the
    # exact held-out log-likelihood enumerates the 2**16 hidden states.
    X_train, X_test, _, _ = _train_test()
    params = dict(n_components=16, learning_rate=0.02, n_iter=20, random_state=0)
    ours = BetheRBM(method=method, **params).fit(X_train)
    peer = BernoulliRBM(**params).fit(X_train)

    def exact(model):
        return exact_log_likelihood(
            X_test, model.components_, model.intercept_visible_, model.intercept_hidden_
        ).mean()

    ours_ll, peer_ll = exact(ours), exact(peer)
    # Both estimators follow the same likelihood gradient, the Bethe one with
    # deterministic rather than sampled negative statistics: their held-out
    # log-likelihoods (about -22 nats per digit) must agree to within 0.5
    # nat, a few percent of it.  At the small learning rate 0.02 the
    # training path does not amplify rounding; at larger rates it does, and
    # the model trained becomes a different one on each machine.
    assert ours_ll >= peer_ll - 0.5
    # The Bethe estimate of the log-likelihood is within 2 nats of the exact
    # value: the Bethe log Z misses part of the mass of a multi-modal model
    # (a mode the fixed point does not see costs up to log 2 per pair of
    # equal modes, loop corrections a fraction of a nat each).
    gap = ours.score_samples(X_test).mean() - ours_ll
    assert abs(gap) < 2.0
    assert ours.stability_ < 1.0


@pytest.mark.slow
def test_pipeline_features_are_as_useful_as_bernoulli_rbm():
    # The learned features feed a classifier as well as BernoulliRBM's with the
    # same settings, within the spread over seeds.  A 3-fold accuracy on 1797
    # digits near 0.89 varies with the features' seed by a few thousandths,
    # so one seed cannot rank the two; the mean over three seeds must be
    # within 0.01, over three times the sd of such a mean.
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_score
    from sklearn.pipeline import make_pipeline

    X, y = binary_digits()
    cv = StratifiedKFold(3, shuffle=True, random_state=0)
    scores = {
        cls.__name__: np.mean(
            [
                cross_val_score(
                    make_pipeline(
                        cls(n_components=32, n_iter=15, random_state=seed),
                        LogisticRegression(max_iter=2000),
                    ),
                    X,
                    y,
                    cv=cv,
                ).mean()
                for seed in range(3)
            ]
        )
        for cls in (BetheRBM, BernoulliRBM)
    }
    assert scores["BernoulliRBM"] > 0.88
    assert scores["BetheRBM"] >= scores["BernoulliRBM"] - 0.01


def test_gaussian_form_trains_close_to_bipartite_form():
    # Both forms give the same gradients up to the Gaussian step; on a small
    # model trained briefly their exact held-out log-likelihoods agree.
    X_train, X_test, _, _ = _train_test()
    scores = []
    for method in ("bipartite", "gaussian", "relaxed"):
        model = BetheRBM(
            n_components=6, learning_rate=0.05, n_iter=2, method=method, random_state=0
        ).fit(X_train[:500])
        exact = exact_log_likelihood(
            X_test, model.components_, model.intercept_visible_, model.intercept_hidden_
        ).mean()
        assert np.all(np.isfinite(model.score_samples(X_test)))
        scores.append(exact)
    assert abs(scores[0] - scores[1]) < 0.3
    assert abs(scores[0] - scores[2]) < 0.3


# --- a drop-in in pipelines: held-out data outside [0, 1] ---------------------


def _digits_search(cls):
    """GridSearchCV of MinMaxScaler -> cls -> LogisticRegression on digits."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV, KFold
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import MinMaxScaler

    X, y = load_digits(return_X_y=True)
    X, y = X[:600], y[:600]
    cv = KFold(3, shuffle=True, random_state=0)
    pipe = Pipeline(
        [
            ("scale", MinMaxScaler()),
            ("rbm", cls(n_iter=3, random_state=0)),
            ("clf", LogisticRegression(max_iter=5000)),
        ]
    )
    grid = {"rbm__learning_rate": [0.2, 0.5], "rbm__n_components": [16, 32]}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning of any kind
        search = GridSearchCV(pipe, grid, cv=cv, error_score="raise").fit(X, y)
    # The trap: every held-out fold, scaled on its training folds, leaves
    # [0, 1] (pixels brighter or darker than any seen in training).
    for train, test in cv.split(X):
        held_out = MinMaxScaler().fit(X[train]).transform(X[test])
        assert held_out.min() < 0 or held_out.max() > 1
    return search.cv_results_["mean_test_score"]


def test_grid_search_pipeline_with_min_max_scaler_on_digits():
    # MinMaxScaler without clip maps held-out folds a little outside [0, 1]:
    # transform must accept them, so that every candidate gets a finite
    # score.  Chance is 0.1; the bounds sit well below BernoulliRBM's scores
    # in the same search, so only a broken transform fails them.
    scores = _digits_search(BetheRBM)
    assert scores.shape == (4,) and np.all(np.isfinite(scores))
    assert np.all(scores > 0.3) and scores.max() > 0.65


@pytest.mark.slow
def test_grid_search_pipeline_scores_like_bernoulli_rbm():
    np.testing.assert_allclose(
        _digits_search(BetheRBM), _digits_search(BernoulliRBM), atol=0.1
    )


# --- all-or-nothing fits --------------------------------------------------------


def _deep_state(model):
    """Copies of everything the estimator holds, and its generator's state."""
    state = {}
    for name, value in vars(model).items():
        if isinstance(value, np.ndarray):
            state[name] = value.copy()
        elif isinstance(value, tuple):
            state[name] = tuple(np.array(a, copy=True) for a in value)
        elif isinstance(value, np.random.RandomState):
            state[name] = value.get_state()
        else:
            state[name] = value
    return state


def _assert_same_state(model, expected):
    assert set(vars(model)) == set(expected)
    for name, want in expected.items():
        have = getattr(model, name)
        if isinstance(have, np.random.RandomState):
            have = have.get_state()
            assert have[0] == want[0] and have[2:] == want[2:], name
            np.testing.assert_array_equal(have[1], want[1], err_msg=name)
        elif isinstance(want, np.ndarray):
            assert have.dtype == want.dtype, name
            np.testing.assert_array_equal(have, want, err_msg=name)
        elif isinstance(want, tuple):
            for a, b in zip(have, want, strict=True):
                np.testing.assert_array_equal(a, b, err_msg=name)
        else:
            assert have == want, name


def _fitted_small(dtype=np.float64, method="relaxed"):
    X = (np.random.RandomState(0).uniform(size=(40, 6)) < 0.5).astype(dtype)
    model = BetheRBM(
        n_components=3, n_iter=2, batch_size=10, random_state=0, method=method
    )
    return model.fit(X), X


# Functions the update calls after the gradient step, where an interrupt or a
# MemoryError can strike, with the method that calls them: the chains' step
# (right after each parameter update), the final full solve and the
# stability factor.
INTERRUPT_POINTS = [
    ("sklearn_meanfield.bethe._learning.augmented_gibbs_step", "relaxed"),
    ("sklearn_meanfield.bethe._learning.gibbs_hidden_step", "bipartite"),
    ("sklearn_meanfield.bethe.rbm.relaxed_solve", "relaxed"),
    ("sklearn_meanfield.bethe.rbm.relaxed_stability", "relaxed"),
    ("sklearn_meanfield.bethe.rbm.bethe_solve", "bipartite"),
    ("sklearn_meanfield.bethe.rbm.stability", "bipartite"),
]


@pytest.mark.parametrize("error", [KeyboardInterrupt, MemoryError])
@pytest.mark.parametrize("where, method", INTERRUPT_POINTS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_interrupted_partial_fit_leaves_everything_as_it_was(
    monkeypatch, where, method, error, dtype
):
    model, X = _fitted_small(dtype, method)
    before = _deep_state(model)
    reference = BetheRBM(**model.get_params())
    reference.__dict__.update(_copy_fitted(model))

    def fail(*args, **kwargs):
        raise error

    with monkeypatch.context() as patch:
        patch.setattr(where, fail)
        with pytest.raises(error):
            model.partial_fit(X[:10])
    # Bit-identical arrays, the same generator state: as if never called.
    _assert_same_state(model, before)
    # So retrying gives exactly the uninterrupted update.
    model.partial_fit(X[:10])
    reference.partial_fit(X[:10])
    _assert_same_state(model, _deep_state(reference))


def _copy_fitted(model):
    """The fitted attributes of ``model`` as independent copies."""
    copied = {}
    for name, value in vars(model).items():
        if name in model.get_params():
            continue
        if isinstance(value, np.random.RandomState):
            rng = np.random.RandomState()
            rng.set_state(value.get_state())
            copied[name] = rng
        elif isinstance(value, np.ndarray):
            copied[name] = value.copy()
        elif isinstance(value, tuple):
            copied[name] = tuple(a.copy() for a in value)
        else:
            copied[name] = value
    return copied


@pytest.mark.parametrize("error", [KeyboardInterrupt, MemoryError])
@pytest.mark.parametrize("where, method", INTERRUPT_POINTS)
def test_interrupted_refit_keeps_the_previous_fit(monkeypatch, where, method, error):
    model, X = _fitted_small(method=method)
    before = _deep_state(model)
    module, name = where.rsplit(".", 1)
    original = getattr(__import__(module, fromlist=[name]), name)
    # The chains step once per batch: fail in the middle of the second epoch.
    fail_at = 6 if name in ("gibbs_hidden_step", "augmented_gibbs_step") else 1
    calls = []

    def fail_late(*args, **kwargs):
        calls.append(1)
        if len(calls) == fail_at:
            raise error
        return original(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(where, fail_late)
        with pytest.raises(error):
            model.set_params(n_iter=3).fit(1.0 - X)
    assert len(calls) == fail_at
    model.set_params(n_iter=2)
    _assert_same_state(model, before)


@pytest.mark.parametrize(
    "where, method",
    [("relaxed_stability", "relaxed"), ("stability", "bipartite")],
)
def test_interrupted_first_partial_fit_leaves_an_unfitted_estimator(
    monkeypatch, where, method
):
    rng = np.random.RandomState(7)
    model = BetheRBM(n_components=3, random_state=rng, method=method)
    rng_state = rng.get_state()
    monkeypatch.setattr(f"sklearn_meanfield.bethe.rbm.{where}", _raise_interrupt)
    with pytest.raises(KeyboardInterrupt):
        model.partial_fit(np.eye(4))
    assert set(vars(model)) == set(model.get_params())
    # The user's generator is given back the state it had.
    np.testing.assert_array_equal(rng.get_state()[1], rng_state[1])


def _raise_interrupt(*args, **kwargs):
    raise KeyboardInterrupt


def test_partial_fit_turned_warning_into_error_leaves_the_state():
    # A real failure after the gradient step: the final solve's
    # ConvergenceWarning raised as an error (unstable model, the paper's
    # ensemble at g = 6 in {0, 1} units).  Full message passing: the relaxed
    # form, warm-started, settles there in one magnetised TAP state that
    # meets Plefka's condition (stability_ 0.63), so it does not warn.
    rng = np.random.RandomState(3)
    X = (rng.uniform(size=(40, 30)) < 0.5).astype(float)
    model = BetheRBM(n_components=20, n_iter=1, random_state=0, method="bipartite")
    model.fit(X)
    w = rng.normal(0, np.sqrt(6 / 30), (20, 30))
    set_parameters(model, 4 * w, -2 * w.sum(axis=0), -2 * w.sum(axis=1))
    before = _deep_state(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        with pytest.raises(ConvergenceWarning):
            model.partial_fit(X[:5])
    _assert_same_state(model, before)


# --- callbacks: a stop request and verbose --------------------------------------


def _fitted_attributes(model):
    return {name: getattr(model, name) for name in _FITTED}


@pytest.mark.parametrize("deadline, n_epochs", [(2, 2), (4, 4), (0, 1), (99, 5)])
def test_deadline_callback_keeps_the_last_complete_epoch(deadline, n_epochs):
    pytest.importorskip("sklearn.callback")
    X, _ = binary_digits()
    X = X[:120]
    params = dict(n_components=6, batch_size=20, random_state=0)
    callback = TickDeadline(deadline, task_name="epoch")
    with warnings.catch_warnings():
        # A stop asked by the user is no convergence failure.
        warnings.simplefilter("error", ConvergenceWarning)
        stopped = BetheRBM(n_iter=5, **params).set_callbacks(callback).fit(X)
    expected = BetheRBM(n_iter=n_epochs, **params).fit(X)
    # Exactly the model of the epochs completed before the stop, chains and
    # messages included.
    ours, theirs = _fitted_attributes(stopped), _fitted_attributes(expected)
    for name in _FITTED:
        if name == "messages_":
            for a, b in zip(ours[name], theirs[name]):
                np.testing.assert_array_equal(a, b)
        else:
            np.testing.assert_array_equal(ours[name], theirs[name], err_msg=name)
    assert stopped.stability_ < 1
    assert (callback.ticks >= deadline) == (n_epochs < 5)  # a stop was asked


def test_verbose_does_not_change_the_fit(capsys):
    # The per-epoch report runs a full solve; it must not feed its messages
    # back into the training (it did: weights moved by 1e-9).
    X, _ = binary_digits()
    quiet = BetheRBM(n_components=8, n_iter=3, random_state=0).fit(X[:200])
    loud = BetheRBM(n_components=8, n_iter=3, random_state=0, verbose=1).fit(X[:200])
    assert capsys.readouterr().out.count("epoch") == 3
    for name in ("components_", "intercept_visible_", "h_samples_"):
        np.testing.assert_array_equal(getattr(loud, name), getattr(quiet, name))
    for a, b in zip(loud.messages_, quiet.messages_):
        np.testing.assert_array_equal(a, b)


# --- float32 in, float32 out ---------------------------------------------------


def test_float32_data_train_in_float32_near_the_float64_fit():
    X, _ = binary_digits()
    X64 = X[:200]
    X32 = X64.astype(np.float32)
    params = dict(n_components=8, n_iter=2, random_state=0)
    m64 = BetheRBM(**params).fit(X64)
    m32 = BetheRBM(**params).fit(X32)
    for name in ("components_", "intercept_visible_", "intercept_hidden_"):
        # The relaxed training runs in float32 on float32 data, as
        # BernoulliRBM's: not the float64 fit rounded, but within float32
        # rounding of it after 40 updates.  Each update adds a rounding error
        # of about 6e-8 (float32's unit roundoff) of the largest entry; 40 of
        # them add up to 2.4e-6 at worst if the short training does not
        # amplify them, and 5e-6 is twice that.
        value, reference = getattr(m32, name), getattr(m64, name)
        assert value.dtype == np.float32, name
        assert not np.array_equal(value, reference.astype(np.float32)), name
        assert np.abs(value - reference).max() < 5e-6 * np.abs(reference).max()
    assert m32.h_samples_.dtype == np.float32
    np.testing.assert_array_equal(m32.h_samples_, m64.h_samples_)
    # Messages and stability belong to the stored (float32) parameters.
    assert m32.messages_[0].dtype == np.float64
    assert m32.stability_ == pytest.approx(m64.stability_, rel=1e-5)
    Xt32, Xt64 = m32.transform(X32), m64.transform(X64)
    assert Xt32.dtype == np.float32 and m32.transform(X64).dtype == np.float64
    np.testing.assert_allclose(Xt32, Xt64, rtol=2e-6, atol=1e-6)
    np.testing.assert_array_equal(m32.fit_transform(X32), Xt32)
    scores32 = m32.score_samples(X32)
    assert scores32.dtype == np.float32
    np.testing.assert_allclose(scores32, m64.score_samples(X64), rtol=1e-5)
    assert m32.gibbs(X32).dtype == bool


def test_partial_fit_keeps_the_dtype_of_the_parameters():
    X = (np.random.RandomState(0).uniform(size=(20, 5)) < 0.5).astype(np.float32)
    model = BetheRBM(n_components=3, random_state=0).partial_fit(X)
    assert model.components_.dtype == np.float32
    assert model.h_samples_.dtype == np.float32
    # A float64 batch on float32 parameters: they stay float32 (as
    # BernoulliRBM's in-place updates keep them).
    model.partial_fit(X.astype(np.float64))
    assert model.components_.dtype == np.float32
    assert model.intercept_hidden_.dtype == np.float32
    int_model = BetheRBM(n_components=3, random_state=0).fit(X.astype(int))
    assert int_model.components_.dtype == np.float64


# --- h_samples_: persistent Gibbs chains ---------------------------------------


def test_h_samples_are_binary_chains_of_batch_size():
    X, _ = binary_digits()
    model = BetheRBM(n_components=7, batch_size=13, n_iter=2, random_state=0)
    model.fit(X[:100])
    h = model.h_samples_
    assert h.shape == (13, 7) and h.dtype == np.float64
    assert set(np.unique(h)) <= {0.0, 1.0}
    assert 0 < h.mean() < 1  # the chains moved away from their zero start


def test_each_partial_fit_moves_the_chains_one_gibbs_sweep():
    # Reference: the sweep h -> v -> h written out here, with the random
    # numbers the estimator's generator gives next.
    X, _ = binary_digits()
    model = BetheRBM(n_components=5, batch_size=4, n_iter=1, random_state=0)
    model.fit(X[:40])
    for _ in range(3):
        h_old = model.h_samples_.copy()
        rng = np.random.RandomState()
        rng.set_state(model.random_state_.get_state())
        model.partial_fit(X[40:60])
        W, b, c = model.components_, model.intercept_visible_, model.intercept_hidden_
        p_v = 1 / (1 + np.exp(-(h_old @ W + b)))
        v = rng.uniform(size=p_v.shape) < p_v
        p_h = 1 / (1 + np.exp(-(v @ W.T + c)))
        h_new = (rng.uniform(size=p_h.shape) < p_h).astype(float)
        np.testing.assert_array_equal(model.h_samples_, h_new)


def test_h_samples_sample_the_hidden_units_under_the_model():
    # Parameters held still (a negligible learning rate) on a model small
    # enough to enumerate: averaged over steps, the chains' hidden states
    # match the exact <h>, within Monte Carlo error estimated from the spread
    # of the independent chains' own averages.
    rng = np.random.RandomState(4)
    W, b, c = rng.normal(0, 1.5, (3, 6)), rng.normal(0, 0.5, 6), rng.normal(0, 0.5, 3)
    X = all_states(6)
    model = BetheRBM(n_components=3, batch_size=40, learning_rate=1e-12)
    model.set_params(random_state=0).fit(X[:2])
    set_parameters(model, W, b, c)
    draws = []
    for step in range(250):
        model.partial_fit(X[:1])
        if step >= 25:  # burn-in
            draws.append(model.h_samples_)
    per_chain = np.mean(draws, axis=0)  # (n_chains, n_hidden)
    estimate = per_chain.mean(axis=0)
    standard_error = per_chain.std(axis=0, ddof=1) / np.sqrt(per_chain.shape[0])
    exact = exact_moments(W, b, c)[2]
    assert np.all(np.abs(estimate - exact) < 4 * standard_error + 1e-3)
    assert np.all(standard_error < 0.02)


# --- the log Z of score_samples -------------------------------------------------


def test_small_models_are_scored_with_the_exact_log_partition():
    # 12 hidden x 64 visible: enumeration is cheap, so log_partition_ is
    # exact and score_samples is the exact log-likelihood; one Bethe fixed
    # point of a trained model is off by most of a nat.
    X, _ = binary_digits()
    model = BetheRBM(n_components=12, random_state=0).fit(X[:1400])
    params = (model.components_, model.intercept_visible_, model.intercept_hidden_)
    exact = exact_moments(*params)[0]
    assert model.log_partition_ == pytest.approx(exact, rel=1e-12)
    assert model.log_partition_function() == model.log_partition_
    np.testing.assert_allclose(
        model.score_samples(X[1400:]),
        exact_log_likelihood(X[1400:], *params),
        atol=1e-9,
    )
    single = clone(model).set_params(log_partition="single").fit(X[:1400])
    np.testing.assert_array_equal(single.components_, model.components_)
    assert abs(single.log_partition_function() - exact) > 0.1


@pytest.fixture(scope="module")
def approximate_model():
    """An 18-hidden-unit model (2**18 * 64 terms: past enumeration)."""
    X, _ = binary_digits()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = BetheRBM(n_components=18, random_state=0).fit(X[:1400])
    return model, X


def test_log_partition_is_a_deterministic_function_of_the_fit(approximate_model):
    model, X = approximate_model
    assert np.isfinite(model.log_partition_)
    # Refitting, cloning, pickling: the same number.
    again = clone(model).fit(X[:1400])
    assert again.log_partition_ == model.log_partition_
    restored = pickle.loads(pickle.dumps(model))
    assert restored.log_partition_ == model.log_partition_
    np.testing.assert_array_equal(
        restored.score_samples(X[1400:]), model.score_samples(X[1400:])
    )
    # Whatever runs before: sampling with the estimator's generator,
    # transform, repeated scoring.  score_samples changes nothing.
    other = pickle.loads(pickle.dumps(model))
    before = _deep_state(other)
    first = other.score_samples(X[1400:])
    _assert_same_state(other, before)
    other.gibbs(X[:5])
    other.transform(X[:5])
    np.testing.assert_array_equal(other.score_samples(X[1400:]), first)
    # The stored value is the one score_samples subtracts from -F(v).
    np.testing.assert_allclose(
        first, -other._free_energy(X[1400:]) - model.log_partition_, rtol=1e-13
    )
    # Computed on demand from the fitted state (as after parameters set by
    # hand), it is the stored value.
    other._log_partition_digest = None
    assert other.log_partition_function() == pytest.approx(
        model.log_partition_, abs=1e-9
    )


def test_log_partition_of_an_18_unit_model_against_enumeration(approximate_model):
    # The multi-state estimate is within a few tenths of a nat, where the
    # persistent TAP fixed point is about two nats off; the bounds leave
    # room for the weights' dependence on the BLAS kernel through training.
    model, _ = approximate_model
    params = (model.components_, model.intercept_visible_, model.intercept_hidden_)
    exact = exact_moments(*params)[0]
    single = clone(model).set_params(log_partition="single")
    single.__dict__.update(_copy_fitted(model))
    single_error = abs(single.log_partition_function() - exact)
    assert abs(model.log_partition_ - exact) < 0.6
    assert single_error > abs(model.log_partition_ - exact) + 0.5


def test_after_partial_fit_the_log_partition_is_computed_on_demand():
    X, _ = binary_digits()
    model = BetheRBM(n_components=20, random_state=0)
    for start in range(0, 300, 50):
        model.partial_fit(X[start : start + 50])
    assert model.log_partition_ is None
    before = _deep_state(model)
    log_z = model.log_partition_function()
    _assert_same_state(model, before)
    assert model.log_partition_function() == log_z
    # The pure function from the fitted state: the persistent means, the
    # chains' visible means and 20 evenly spaced rows of the last batch.
    W, b, c = model.components_, model.intercept_visible_, model.intercept_hidden_
    rows = X[250:300][np.unique(np.linspace(0, 49, 20).astype(int))]
    seeds = np.vstack([model.messages_[0], expit(model.h_samples_ @ W + b), rows])
    assert log_z == pytest.approx(estimate_log_partition(W, b, c, seeds), abs=1e-9)
    np.testing.assert_allclose(
        model.score_samples(X[:10]), -model._free_energy(X[:10]) - log_z, rtol=1e-13
    )


def test_parameters_set_by_hand_are_not_scored_with_a_stale_log_z():
    X, _ = binary_digits()
    model = BetheRBM(n_components=6, n_iter=2, random_state=0).fit(X[:200])
    rng = np.random.RandomState(0)
    W, b, c = rng.normal(size=(6, 64)), rng.normal(size=64), rng.normal(size=6)
    set_parameters(model, W, b, c)
    assert model.log_partition_function() == pytest.approx(
        exact_moments(W, b, c)[0], rel=1e-12
    )
    np.testing.assert_allclose(
        model.score_samples(X[:10]), exact_log_likelihood(X[:10], W, b, c), atol=1e-9
    )


def test_log_partition_single_is_the_persistent_estimate():
    X, _ = binary_digits()
    model = BetheRBM(
        n_components=6, n_iter=2, random_state=0, log_partition="single"
    ).fit(X[:200])
    params = (model.components_, model.intercept_visible_, model.intercept_hidden_)
    warm = relaxed_solve(*params, state=model.messages_, damping=0.0, tol=1e-7)
    assert model.log_partition_ == pytest.approx(warm.log_z, abs=1e-6)
    assert model.log_partition_function() == pytest.approx(warm.log_z, abs=1e-9)


@pytest.mark.parametrize("error", [KeyboardInterrupt, MemoryError])
def test_interrupted_log_partition_keeps_the_previous_fit(monkeypatch, error):
    model, X = _fitted_small()
    before = _deep_state(model)

    def fail(*args, **kwargs):
        raise error

    monkeypatch.setattr("sklearn_meanfield.bethe.rbm.estimate_log_partition", fail)
    with pytest.raises(error):
        model.fit(1.0 - X)
    _assert_same_state(model, before)


def test_log_partition_falls_back_to_the_single_fixed_point(monkeypatch):
    # When no TAP start converges, fit warns and stores the persistent
    # estimate (what log_partition="single" gives).
    X, _ = binary_digits()

    def no_start_converges(*args, **kwargs):
        raise RuntimeError("None of the TAP starts converged")

    monkeypatch.setattr(
        "sklearn_meanfield.bethe.rbm.estimate_log_partition", no_start_converges
    )
    with pytest.warns(ConvergenceWarning, match="single fixed point"):
        model = BetheRBM(n_components=6, n_iter=2, random_state=0).fit(X[:200])
    single = BetheRBM(
        n_components=6, n_iter=2, random_state=0, log_partition="single"
    ).fit(X[:200])
    assert model.log_partition_ == single.log_partition_
    np.testing.assert_allclose(
        model.score_samples(X), single.score_samples(X), rtol=1e-12
    )


def test_sparse_training_data_give_the_same_log_partition(approximate_model):
    # The seed rows of a CSR matrix are densified: the same estimate.
    model, X = approximate_model
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        sparse = clone(model).fit(sp.csr_matrix(X[:1400]))
    np.testing.assert_array_equal(sparse.components_, model.components_)
    assert sparse.log_partition_ == model.log_partition_
