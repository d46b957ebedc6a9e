"""scikit-learn's BernoulliRBM test suite, rewritten against BetheRBM.

Each test of ``sklearn/neural_network/tests/test_rbm.py`` (scikit-learn 1.9)
appears here under its own name with the peer's settings.  Where the peer
asserts a number that belongs to its learning rule (persistent contrastive
divergence) or to its score (the pseudo-likelihood), the assertion sits in a
strict xfail whose reason names that model difference, and a passing test
checks what BetheRBM gives instead against an independent reference (exact
enumeration, the peer's own pseudo-likelihood on BetheRBM's weights).
"""

import re

import numpy as np
import pytest
from scipy.special import expit
from sklearn.datasets import load_digits
from sklearn.neural_network import BernoulliRBM
from sklearn.utils._testing import (
    assert_allclose,
    assert_almost_equal,
    assert_array_equal,
)
from sklearn.utils.fixes import CSC_CONTAINERS, CSR_CONTAINERS, LIL_CONTAINERS
from sklearn.utils.validation import assert_all_finite

from sklearn_meanfield import BetheRBM
from sklearn_meanfield.bethe._exact import exact_log_likelihood, exact_moments

Xdigits, _ = load_digits(return_X_y=True)
Xdigits -= Xdigits.min()
Xdigits /= Xdigits.max()


def _with_parameters_of(model, peer):
    """``peer`` (a BernoulliRBM) given ``model``'s fitted parameters."""
    peer.components_ = model.components_
    peer.intercept_visible_ = model.intercept_visible_
    peer.intercept_hidden_ = model.intercept_hidden_
    peer.n_features_in_ = model.n_features_in_
    return peer


def _pseudo_likelihood(model, X, random_state):
    """BernoulliRBM's score_samples (its pseudo-likelihood) at model's weights."""
    peer = _with_parameters_of(model, BernoulliRBM(random_state=random_state))
    return peer.score_samples(X)


# --- test_fit -------------------------------------------------------------------


@pytest.fixture(scope="module")
def digits_fit():
    X = Xdigits.copy()
    rbm = BetheRBM(
        n_components=64, learning_rate=0.1, batch_size=10, n_iter=7, random_state=9
    )
    rbm.fit(X)
    return rbm, X


def test_fit(digits_fit):
    rbm, X = digits_fit
    # The peer's -21 is a pseudo-likelihood, computed here with the peer's
    # own score on BetheRBM's weights; decimal=0 accepts 1.5 nats either
    # side, the peer's tolerance.  Bethe training follows the same gradient
    # with deterministic negative statistics, so its model is as good by
    # this measure.
    assert_almost_equal(_pseudo_likelihood(rbm, X, 9).mean(), -21.0, decimal=0)
    # in-place tricks shouldn't have modified X
    assert_array_equal(X, Xdigits)


@pytest.mark.xfail(
    strict=True,
    reason="pseudo-likelihood number: BetheRBM.score_samples is the Bethe "
    "log-likelihood -F(v) - log Z, not the pseudo-likelihood the peer's "
    "number measures",
)
def test_fit_score_samples_number(digits_fit):
    rbm, X = digits_fit
    assert_almost_equal(rbm.score_samples(X).mean(), -21.0, decimal=0)


# --- test_partial_fit -------------------------------------------------------------


@pytest.fixture(scope="module")
def digits_partial_fit():
    X = Xdigits.copy()
    rbm = BetheRBM(n_components=64, learning_rate=0.1, batch_size=20, random_state=9)
    n_samples = X.shape[0]
    n_batches = int(np.ceil(float(n_samples) / rbm.batch_size))
    batch_slices = np.array_split(X, n_batches)
    for _ in range(7):
        for batch in batch_slices:
            rbm.partial_fit(batch)
    return rbm, X


@pytest.mark.slow
def test_partial_fit(digits_partial_fit):
    rbm, X = digits_partial_fit
    # The peer's pseudo-likelihood on BetheRBM's weights, within the peer's
    # 1.5 nats: partial_fit follows the same gradient as fit.
    assert_almost_equal(_pseudo_likelihood(rbm, X, 9).mean(), -21.0, decimal=0)
    assert_array_equal(X, Xdigits)


@pytest.mark.slow
@pytest.mark.xfail(
    strict=True,
    reason="pseudo-likelihood number: BetheRBM.score_samples is the Bethe "
    "log-likelihood -F(v) - log Z (-25.57 here), not the pseudo-likelihood "
    "(-21.04 for the same weights)",
)
def test_partial_fit_score_samples_number(digits_partial_fit):
    rbm, X = digits_partial_fit
    assert_almost_equal(rbm.score_samples(X).mean(), -21.0, decimal=0)


# --- test_transform ---------------------------------------------------------------


def test_transform():
    X = Xdigits[:100]
    rbm1 = BetheRBM(n_components=16, batch_size=5, n_iter=5, random_state=42)
    rbm1.fit(X)

    Xt1 = rbm1.transform(X)
    Xt2 = rbm1._mean_hiddens(X)

    assert_array_equal(Xt1, Xt2)
    # And both are P(h = 1 | v), written out.
    assert_allclose(Xt1, expit(X @ rbm1.components_.T + rbm1.intercept_hidden_))


# --- sparse input -------------------------------------------------------------------


@pytest.mark.parametrize("csr_container", CSR_CONTAINERS)
def test_small_sparse(csr_container):
    # BetheRBM should work on small sparse matrices, and give the dense fit.
    X = csr_container(Xdigits[:4])
    sparse = BetheRBM(random_state=0).fit(X)
    dense = BetheRBM(random_state=0).fit(Xdigits[:4])
    assert_allclose(sparse.components_, dense.components_, rtol=1e-9, atol=1e-15)


@pytest.mark.parametrize("sparse_container", CSC_CONTAINERS + CSR_CONTAINERS)
def test_small_sparse_partial_fit(sparse_container):
    X_sparse = sparse_container(Xdigits[:100])
    X = Xdigits[:100].copy()

    rbm1 = BetheRBM(n_components=64, learning_rate=0.1, batch_size=10, random_state=9)
    rbm2 = BetheRBM(n_components=64, learning_rate=0.1, batch_size=10, random_state=9)

    rbm1.partial_fit(X_sparse)
    rbm2.partial_fit(X)

    assert_almost_equal(
        rbm1.score_samples(X).mean(), rbm2.score_samples(X).mean(), decimal=0
    )
    # BetheRBM's score is deterministic: sparse and dense agree to rounding.
    assert_allclose(rbm1.score_samples(X), rbm2.score_samples(X), rtol=1e-10)


# --- sampling ---------------------------------------------------------------------


def test_sample_hiddens():
    rng = np.random.RandomState(0)
    X = Xdigits[:100]
    rbm1 = BetheRBM(n_components=2, batch_size=5, n_iter=5, random_state=42)
    rbm1.fit(X)

    h = rbm1._mean_hiddens(X[0])
    hs = np.mean([rbm1._sample_hiddens(X[0], rng) for i in range(100)], 0)

    assert_almost_equal(h, hs, decimal=1)


def _exact_gradient_ascent(X, weights, n_iter, learning_rate):
    """Full-batch likelihood ascent with every average computed by enumeration."""
    W = weights.copy()
    b = np.zeros(X.shape[1])
    c = np.zeros(W.shape[0])
    for _ in range(n_iter):
        _, mean_v, mean_h, joint = exact_moments(W, b, c)
        h_data = expit(X @ W.T + c)
        W = W + learning_rate * (h_data.T @ X / len(X) - joint)
        b = b + learning_rate * (X.mean(axis=0) - mean_v)
        c = c + learning_rate * (h_data.mean(axis=0) - mean_h)
    return W, b, c


@pytest.mark.parametrize("csc_container", CSC_CONTAINERS)
def test_fit_gibbs(csc_container):
    # One visible unit makes the factor graph a tree, where the Bethe
    # gradient is the exact likelihood gradient: the weights follow exact
    # gradient ascent from the same initial draw.
    X = np.array([[0.0], [1.0]])
    rbm1 = BetheRBM(
        n_components=2, batch_size=2, n_iter=42, random_state=np.random.RandomState(42)
    )
    rbm1.fit(X)
    start = np.random.RandomState(42).normal(0, 0.01, (2, 1))
    W, b, c = _exact_gradient_ascent(X, start, 42, 0.1)
    assert_allclose(rbm1.components_, W, atol=1e-9)
    assert_allclose(rbm1.intercept_visible_, b, atol=1e-9)
    assert_allclose(rbm1.intercept_hidden_, c, atol=1e-9)
    # The peer's reconstruction check, kept with its seed (with weights this
    # small each reconstruction is a coin flip per unit: seed-dependent, as the
    # peer says of its own test).
    assert_almost_equal(rbm1.gibbs(X), X)

    # The same from sparse input, against the dense fit.
    X_sparse = csc_container([[0.0], [1.0]])
    rbm2 = BetheRBM(
        n_components=2, batch_size=2, n_iter=42, random_state=np.random.RandomState(42)
    )
    rbm2.fit(X_sparse)
    assert_almost_equal(rbm2.gibbs(X_sparse), X_sparse.toarray())
    assert_almost_equal(rbm1.components_, rbm2.components_)


@pytest.mark.xfail(
    strict=True,
    reason="PCD-specific weights: these values come from persistent "
    "contrastive divergence's sampled negative phase; BetheRBM's weights "
    "follow the exact likelihood gradient on this tree (4.5e-3, -1.9e-3)",
)
def test_fit_gibbs_weights_number():
    X = np.array([[0.0], [1.0]])
    rbm1 = BetheRBM(
        n_components=2, batch_size=2, n_iter=42, random_state=np.random.RandomState(42)
    )
    rbm1.fit(X)
    assert_almost_equal(
        rbm1.components_, np.array([[0.02649814], [0.02009084]]), decimal=4
    )


def test_gibbs_smoke():
    # Check if we don't get NaNs sampling the full digits dataset.
    # Also check that sampling again will yield different results.
    X = Xdigits
    rbm1 = BetheRBM(n_components=42, batch_size=40, n_iter=20, random_state=42)
    rbm1.fit(X)
    X_sampled = rbm1.gibbs(X)
    assert_all_finite(X_sampled)
    X_sampled2 = rbm1.gibbs(X)
    assert np.all((X_sampled != X_sampled2).max(axis=1))


# --- test_score_samples -----------------------------------------------------------


@pytest.fixture(scope="module")
def two_state_fit():
    X = np.vstack([np.zeros(1000), np.ones(1000)])
    rbm1 = BetheRBM(
        n_components=10, batch_size=2, n_iter=10, random_state=np.random.RandomState(42)
    )
    rbm1.fit(X)
    return rbm1, X


@pytest.mark.parametrize("lil_containers", LIL_CONTAINERS)
def test_score_samples(lil_containers, two_state_fit):
    # No clipping: the scores go far below -300 (here the Bethe
    # log-likelihood, -702.5 and -676.3 after 10 epochs).
    rbm1, X = two_state_fit
    assert (rbm1.score_samples(X) < -300).all()

    # Sparse vs. dense should not affect the output. Also test sparse input
    # validation.
    rbm1.random_state = 42
    d_score = rbm1.score_samples(X)
    rbm1.random_state = 42
    s_score = rbm1.score_samples(lil_containers(X))
    assert_almost_equal(d_score, s_score)

    # Test numerical stability (#2785): the free energy of the peer's huge
    # input stays finite and equals the peer's; scores of binary data stay
    # finite under weights large enough to overflow a naive softplus.
    v = np.array([np.arange(1000) * 100.0])
    free = rbm1._free_energy(v)
    assert_all_finite(free)
    peer = _with_parameters_of(rbm1, BernoulliRBM())
    assert_allclose(free, peer._free_energy(v), rtol=1e-12)
    big = _with_parameters_of(rbm1, BetheRBM(n_components=10).fit(X[:1]))
    big.messages_ = rbm1.messages_
    big.components_ = 1e4 * rbm1.components_
    assert_all_finite(big.score_samples(X))


@pytest.mark.xfail(
    strict=True,
    raises=ValueError,
    reason="the Bethe log-likelihood is defined for visible values in [0, 1] "
    "(binary units or their probabilities) and score_samples refuses others; "
    "the pseudo-likelihood is a free-energy difference defined for any input",
)
def test_score_samples_of_values_far_above_one(two_state_fit):
    rbm1, _ = two_state_fit
    with np.errstate(under="ignore"):
        rbm1.score_samples([np.arange(1000) * 100])


def test_score_samples_is_the_exact_log_likelihood_on_a_tree():
    # What BetheRBM's score_samples is instead of a pseudo-likelihood: with one
    # hidden unit the graph is a tree and the Bethe log Z is exact, so the
    # score is the exact log p(v) from enumeration.
    # Message passing on the graph ("bipartite"); the default relaxed form
    # (second-order TAP) is its large-N limit, exact only without couplings.
    X = (Xdigits[:200, ::8] > 0.5).astype(float)
    rbm = BetheRBM(n_components=1, n_iter=3, random_state=0, method="bipartite")
    rbm.fit(X)
    exact = exact_log_likelihood(
        X, rbm.components_, rbm.intercept_visible_, rbm.intercept_hidden_
    )
    assert_allclose(rbm.score_samples(X), exact, atol=1e-8)


# --- verbose ------------------------------------------------------------------------


def test_rbm_verbose(capsys):
    rbm = BetheRBM(n_iter=2, verbose=10)
    rbm.fit(Xdigits)
    assert capsys.readouterr().out.count("[BetheRBM] epoch") == 2


@pytest.mark.parametrize("csc_container", CSC_CONTAINERS)
def test_sparse_and_verbose(csc_container, capsys):
    # Make sure BetheRBM works with sparse input when verbose=True
    X = csc_container([[0.0], [1.0]])
    rbm = BetheRBM(
        n_components=2, batch_size=2, n_iter=1, random_state=42, verbose=True
    )
    rbm.fit(X)
    # The line carries the Bethe log-likelihood, here exact (a tree: one
    # visible unit), and the stability factor.
    out = capsys.readouterr().out
    match = re.match(
        r"\[BetheRBM\] epoch 1, Bethe log-likelihood (-?\d+\.\d+),"
        r" stability (\d+\.\d+) \((\d|\.)+s\)",
        out,
    )
    assert match, out
    exact = exact_log_likelihood(
        X.toarray(), rbm.components_, rbm.intercept_visible_, rbm.intercept_hidden_
    ).mean()
    assert float(match.group(1)) == pytest.approx(exact, abs=5e-4)


@pytest.mark.xfail(
    strict=True,
    reason="pseudo-likelihood number: each epoch reports the Bethe "
    "log-likelihood and the stability factor, not a pseudo-likelihood",
)
@pytest.mark.parametrize("csc_container", CSC_CONTAINERS)
def test_sparse_and_verbose_pseudo_likelihood_line(csc_container, capsys):
    X = csc_container([[0.0], [1.0]])
    rbm = BetheRBM(
        n_components=2, batch_size=2, n_iter=1, random_state=42, verbose=True
    )
    rbm.fit(X)
    assert re.search(r"pseudo-likelihood = -?(\d)+(\.\d+)?", capsys.readouterr().out)


# --- dtypes -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dtype_in, dtype_out",
    [(np.float32, np.float32), (np.float64, np.float64), (int, np.float64)],
)
def test_transformer_dtypes_casting(dtype_in, dtype_out):
    X = Xdigits[:100].astype(dtype_in)
    rbm = BetheRBM(n_components=16, batch_size=5, n_iter=5, random_state=42)
    Xt = rbm.fit_transform(X)

    # dtype_in and dtype_out should be consistent
    assert Xt.dtype == dtype_out, f"transform dtype: {Xt.dtype} - original: {X.dtype}"


def test_convergence_dtype_consistency():
    # float 64 transformer
    X_64 = Xdigits[:100].astype(np.float64)
    rbm_64 = BetheRBM(n_components=16, batch_size=5, n_iter=5, random_state=42)
    Xt_64 = rbm_64.fit_transform(X_64)

    # float 32 transformer
    X_32 = Xdigits[:100].astype(np.float32)
    rbm_32 = BetheRBM(n_components=16, batch_size=5, n_iter=5, random_state=42)
    Xt_32 = rbm_32.fit_transform(X_32)

    # results and attributes should be close enough in 32 bit and 64 bit:
    # float32 rounds at 6e-8, and 100 updates of the Bethe gradient carry
    # that to a few 1e-6 on some kernels (scikit-learn's own test of
    # BernoulliRBM, with exact Gibbs-free gradients, asks 1e-6)
    assert_allclose(Xt_64, Xt_32, rtol=1e-05, atol=0)
    assert_allclose(
        rbm_64.intercept_hidden_, rbm_32.intercept_hidden_, rtol=1e-05, atol=0
    )
    assert_allclose(
        rbm_64.intercept_visible_, rbm_32.intercept_visible_, rtol=1e-05, atol=0
    )
    assert_allclose(rbm_64.components_, rbm_32.components_, rtol=1e-03, atol=0)
    assert_allclose(rbm_64.h_samples_, rbm_32.h_samples_)


# --- feature names ------------------------------------------------------------------


@pytest.mark.parametrize("method", ["fit", "partial_fit"])
def test_feature_names_out(method):
    """Check `get_feature_names_out` for `BetheRBM`."""
    n_components = 10
    rbm = BetheRBM(n_components=n_components)
    getattr(rbm, method)(Xdigits)

    names = rbm.get_feature_names_out()
    expected_names = [f"betherbm{i}" for i in range(n_components)]
    assert_array_equal(expected_names, names)
