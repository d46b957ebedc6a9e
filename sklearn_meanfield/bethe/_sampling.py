"""Gibbs sampling of the {0, 1} RBM.

:func:`gibbs_moments` runs long alternating chains, the sampling reference of
the paper's Fig. 4: many independent chains side by side (vectorised over
chains), with Rao-Blackwellised averages (conditional probabilities instead of
samples), which lowers their variance at no cost.  :func:`sample_bernoulli`
and :func:`gibbs_hidden_step` are the single steps the estimator uses for
:meth:`BetheRBM.gibbs` and its persistent chain ``h_samples_``;
:func:`augmented_gibbs_step` is that step for the relaxed training loop, on
its bias-augmented arrays with uniforms drawn ahead (:func:`uniform_rows`).

References
----------
.. [1] H. Huang and T. Toyoizumi, "Advanced mean field theory of the
   restricted Boltzmann machine", Phys. Rev. E 91, 050101(R) (2015).
"""

import numpy as np
from scipy.special import expit
from sklearn.utils import check_random_state

__all__ = [
    "augmented_gibbs_step",
    "gibbs_hidden_step",
    "gibbs_moments",
    "sample_bernoulli",
    "uniform_rows",
]


def gibbs_moments(
    weights,
    visible_bias,
    hidden_bias,
    *,
    n_chains=200,
    n_burn_in=1000,
    n_samples=2000,
    random_state=None,
):
    """``<v>``, ``<h>`` and ``<h v^T>`` of a {0, 1} RBM from Gibbs chains.

    Parameters
    ----------
    weights : ndarray of shape (n_hidden, n_visible)
    visible_bias : ndarray of shape (n_visible,)
    hidden_bias : ndarray of shape (n_hidden,)
    n_chains : int, default=200
        Independent chains run in parallel.
    n_burn_in : int, default=1000
        Discarded full sweeps ``v -> h -> v`` per chain.
    n_samples : int, default=2000
        Sweeps averaged per chain after burn-in.
    random_state : None, int or RandomState, default=None

    Returns
    -------
    mean_visible, mean_hidden, mean_hidden_visible : ndarray
    """
    rng = check_random_state(random_state)
    n_hidden, n_visible = weights.shape
    v = (rng.uniform(size=(n_chains, n_visible)) < 0.5).astype(float)
    sum_v = np.zeros(n_visible)
    sum_h = np.zeros(n_hidden)
    sum_hv = np.zeros((n_hidden, n_visible))
    for step in range(n_burn_in + n_samples):
        p_h = expit(v @ weights.T + hidden_bias)
        if step >= n_burn_in:
            # Rao-Blackwellised: E[h | v] instead of the sampled h.
            sum_h += p_h.sum(axis=0)
            sum_hv += p_h.T @ v
            sum_v += v.sum(axis=0)
        h = (rng.uniform(size=p_h.shape) < p_h).astype(float)
        p_v = expit(h @ weights + visible_bias)
        v = (rng.uniform(size=p_v.shape) < p_v).astype(float)
    count = n_chains * n_samples
    return sum_v / count, sum_h / count, sum_hv / count


def sample_bernoulli(probabilities, rng):
    """Independent {0, 1} draws with the given probabilities, as booleans.

    One uniform per entry, compared with ``probabilities`` (as BernoulliRBM
    samples), so a given random state gives the same draws as the peer.

    Parameters
    ----------
    probabilities : ndarray
        Probabilities of drawing 1.
    rng : RandomState
        Random number generator.

    Returns
    -------
    ndarray of bool, of the shape of ``probabilities``

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.bethe._sampling import sample_bernoulli
    >>> sample_bernoulli(np.array([0.0, 1.0]), np.random.RandomState(0)).tolist()
    [False, True]
    """
    return rng.uniform(size=np.shape(probabilities)) < probabilities


def gibbs_hidden_step(hidden, weights, visible_bias, hidden_bias, rng):
    """One sweep ``h -> v -> h`` of the chains whose hidden states are ``hidden``.

    Draws ``v ~ p(v | h)`` then ``h' ~ p(h | v)``, both layers conditionally
    independent; the visible draws come first from ``rng``.

    Parameters
    ----------
    hidden : ndarray of shape (n_chains, n_hidden)
        Current hidden states, in {0, 1}.
    weights : ndarray of shape (n_hidden, n_visible)
    visible_bias : ndarray of shape (n_visible,)
    hidden_bias : ndarray of shape (n_hidden,)
    rng : RandomState

    Returns
    -------
    ndarray of shape (n_chains, n_hidden), float
        The new hidden states, in {0, 1}.
    """
    visible = sample_bernoulli(expit(hidden @ weights + visible_bias), rng)
    new_hidden = sample_bernoulli(expit(visible @ weights.T + hidden_bias), rng)
    return new_hidden.astype(float)


def uniform_rows(rng, n_rows, size, max_bytes=1 << 18):
    """Rows of ``size`` uniforms on [0, 1), drawn from ``rng`` in blocks.

    The rows are the stream that ``n_rows`` calls ``rng.uniform(size=size)``
    would give (a legacy ``RandomState`` draws its doubles in sequence, and
    ``uniform`` on [0, 1) is ``random_sample``), with one generator call per
    block of at most ``max_bytes`` instead of one per row: per-step draws
    dominate a small model's chain step.  Blocks are drawn when first
    reached, so the generator ends where ``n_rows`` single draws would leave it.

    Parameters
    ----------
    rng : RandomState
    n_rows : int
    size : int
        Uniforms per row.
    max_bytes : int, default=256 KiB
        Largest block.

    Yields
    ------
    ndarray of shape (size,)

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.bethe._sampling import uniform_rows
    >>> rows = list(uniform_rows(np.random.RandomState(0), 3, 2, max_bytes=16))
    >>> single = np.random.RandomState(0)
    >>> all(np.array_equal(r, single.uniform(size=2)) for r in rows)
    True
    """
    per_block = max(1, max_bytes // (8 * max(size, 1)))
    for start in range(0, n_rows, per_block):
        yield from rng.random_sample((min(per_block, n_rows - start), size))


def augmented_gibbs_step(visible, hidden, augmented, uniforms):
    """:func:`gibbs_hidden_step` in place, on bias-augmented arrays.

    With ``augmented = [[W, c], [b^T, 0]]`` and states carrying a trailing
    column of ones, ``h W + b`` and ``v W^T + c`` are one product each, and
    the draws compare with uniforms drawn ahead: four numpy calls and two
    products per step, for the training loop's chains.  The states and
    products are in the dtype of ``augmented`` (float32 in a float32
    training); the uniforms stay the generator's doubles, and comparing them
    with float32 probabilities is exact.

    Parameters
    ----------
    visible : ndarray of shape (n_chains, n_visible + 1)
        Work array whose last column is 1; its first ``n_visible`` columns
        receive the visible draws (0.0 or 1.0).
    hidden : ndarray of shape (n_chains, n_hidden + 1)
        ``[h, 1]``, the chains' hidden states, overwritten with the new ones.
    augmented : ndarray of shape (n_hidden + 1, n_visible + 1)
    uniforms : ndarray of shape (n_chains * (n_visible + n_hidden),)
        The visible draws' uniforms (row-major) then the hidden ones', the
        order in which :func:`gibbs_hidden_step` takes them from its
        generator, so both give the same chains.
    """
    n_chains = visible.shape[0]
    n_visible, n_hidden = visible.shape[1] - 1, hidden.shape[1] - 1
    split = n_chains * n_visible
    probabilities = hidden @ augmented[:, :n_visible]
    expit(probabilities, probabilities)
    np.less(
        uniforms[:split].reshape(n_chains, n_visible),
        probabilities,
        visible[:, :n_visible],
    )
    probabilities = visible @ augmented[:n_hidden].T
    expit(probabilities, probabilities)
    np.less(
        uniforms[split:].reshape(n_chains, n_hidden),
        probabilities,
        hidden[:, :n_hidden],
    )
