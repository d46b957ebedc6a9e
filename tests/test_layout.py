"""ParameterLayout: offsets, views and packing against hand-computed slices."""

import pickle

import numpy as np
import pytest

from sklearn_meanfield._layout import ParameterLayout


def _network(d=3, h=4, m=2):
    return ParameterLayout.of(W1=(d, h), b1=(h,), W2=(h, m), b2=(m,))


def test_offsets_sizes_and_slices_match_hand_computation():
    layout = _network(3, 4, 2)
    # W1: 3 * 4 = 12, b1: 4, W2: 4 * 2 = 8, b2: 2.
    assert layout.names == ("W1", "b1", "W2", "b2")
    assert layout.shapes == ((3, 4), (4,), (4, 2), (2,))
    assert layout.sizes == (12, 4, 8, 2)
    assert layout.offsets == (0, 12, 16, 24, 26)
    assert layout.n_params == 26
    assert layout.slice("W1") == slice(0, 12)
    assert layout.slice("b1") == slice(12, 16)
    assert layout.slice("W2") == slice(16, 24)
    assert layout.slice("b2") == slice(24, 26)


def test_unpack_gives_views_in_c_order_with_batch_axes():
    layout = _network(3, 4, 2)
    theta = np.arange(5 * 26, dtype=float).reshape(5, 26)  # five chains
    W1, b1, W2, b2 = layout.unpack(theta)
    for c in range(5):
        row = theta[c]
        np.testing.assert_array_equal(W1[c], row[:12].reshape(3, 4))
        np.testing.assert_array_equal(b1[c], row[12:16])
        np.testing.assert_array_equal(W2[c], row[16:24].reshape(4, 2))
        np.testing.assert_array_equal(b2[c], row[24:26])
    # Element (j, k) of W1 is parameter j * h + k.
    assert W1[2, 1, 3] == theta[2, 1 * 4 + 3]
    # Views: writing through them writes theta.
    views = layout.unpack(theta)
    views.W2[1, 3, 0] = -1.0
    assert theta[1, 16 + 3 * 2 + 0] == -1.0
    for view in views:
        assert np.shares_memory(view, theta)
    # Several batch axes, and none.
    many = np.arange(2 * 3 * 26).reshape(2, 3, 26)
    assert layout.unpack(many).W1.shape == (2, 3, 3, 4)
    np.testing.assert_array_equal(layout.unpack(many[1, 2]).b2, many[1, 2, 24:])


def test_unpack_along_the_first_axis_keeps_trailing_axes():
    # The variational factor F: (n_weights, rank), blocks U (H, P) and V (H, M).
    layout = ParameterLayout.of(U=(4, 3), V=(4, 1))
    F = np.random.default_rng(0).normal(size=(16, 2))
    U, V = layout.unpack(F, axis=0)
    np.testing.assert_array_equal(U, F[:12].reshape(4, 3, 2))
    np.testing.assert_array_equal(V, F[12:].reshape(4, 1, 2))
    assert np.shares_memory(U, F) and np.shares_memory(V, F)


def test_pack_inverts_unpack_and_broadcasts():
    layout = _network(2, 3, 1)
    theta = np.random.default_rng(1).normal(size=(4, layout.n_params))
    np.testing.assert_array_equal(layout.pack(layout.unpack(theta)), theta)
    np.testing.assert_array_equal(layout.pack(**layout.unpack(theta)._asdict()), theta)
    # Batch axes broadcast: a per-chain value per input row of W1.
    rows = np.array([[1.0, 2.0]] * 4) * np.arange(1, 5)[:, None]  # (4, 2)
    packed = layout.pack(W1=rows[:, :, None], b1=5.0, W2=np.zeros((4, 3, 1)), b2=7)
    assert packed.shape == (4, layout.n_params)
    expected = np.concatenate(
        [
            np.repeat(rows, 3, axis=1),
            np.full((4, 3), 5.0),
            np.zeros((4, 3)),
            np.full((4, 1), 7.0),
        ],
        axis=1,
    )
    np.testing.assert_array_equal(packed, expected)
    # Integer blocks pack to integers.
    packed = layout.pack(W1=0, b1=1, W2=2, b2=3)
    assert packed.tolist() == [0] * 6 + [1] * 3 + [2] * 3 + [3]


def test_invalid_layouts_and_vectors_are_refused():
    with pytest.raises(ValueError, match="distinct"):
        ParameterLayout((("a", (2,)), ("a", (3,))))
    with pytest.raises(ValueError, match="identifier"):
        ParameterLayout.of(_hidden=(2,))
    with pytest.raises(ValueError, match="negative"):
        ParameterLayout.of(a=(2, -1))
    layout = ParameterLayout.of(a=(2,), b=(3,))
    with pytest.raises(ValueError, match="length 4"):
        layout.unpack(np.zeros((2, 4)))
    with pytest.raises(ValueError, match="expected blocks"):
        layout.pack(a=np.zeros(2))


def test_layout_is_hashable_comparable_and_pickles():
    a, b = _network(3, 4, 2), _network(3, 4, 2)
    assert a == b and hash(a) == hash(b) and a != _network(3, 5, 2)
    # Shapes given as lists or numpy integers are normalised to tuples of int.
    assert ParameterLayout((("W", [np.int64(3), 4]),)) == ParameterLayout.of(W=(3, 4))
    clone = pickle.loads(pickle.dumps(a))
    assert clone == a
    assert clone.unpack(np.zeros(26)).W2.shape == (4, 2)
