"""Training inputs shared by the relaxed-training test modules."""

import numpy as np
from sklearn.datasets import load_digits


def digits_epoch_inputs(n_hidden=9, n_samples=95, dtype=np.float64):
    """Binarised digits in ``dtype``, float64 starting parameters (weights of
    sd 0.3, visible biases of sd 0.1, zero hidden biases) and minibatch slices
    of 10 rows: the arguments of one relaxed training epoch."""
    X, _ = load_digits(return_X_y=True)
    X = (X[:n_samples] > 7).astype(dtype)
    rng = np.random.RandomState(0)
    params = (
        rng.normal(0, 0.3, (n_hidden, 64)),
        rng.normal(0, 0.1, 64),
        np.zeros(n_hidden),
    )
    slices = [slice(i, min(i + 10, n_samples)) for i in range(0, n_samples, 10)]
    return X, slices, params
