"""Replica exchange (parallel tempering) between tempered network posteriors.

Each chain runs ``K`` replicas.  Replica ``k`` samples the posterior with the
likelihood raised to the power ``beta_k`` (:func:`temperature_ladder`:
``1 = beta_0 > beta_1 > ... > beta_{K-1}``), through the same transition as an
ordinary chain (:meth:`~sklearn_meanfield.hmc._transition.NetworkPosterior.tempered`
weights every row's likelihood by ``beta_k``).  After every iteration,
neighbouring replicas propose to exchange their states (weights and
precisions), accepted with probability
``min(1, exp((beta_a - beta_b) (l_b - l_a)))``, ``l`` the log likelihood of
each state (:func:`~sklearn_meanfield.hmc._network.log_likelihood`): this
leaves the product of the tempered posteriors invariant, so replica 0 still
samples the posterior itself.  The hot replicas, whose likelihood is flatter,
move between configurations of the network that a chain at ``beta = 1``
would not leave, and exchanges carry those configurations down the ladder.

Pairs alternate deterministically, the even pairs ``(0, 1), (2, 3), ...``
after even iterations and the odd ones after odd iterations (the
deterministic even-odd scheme), so that a state travels along the ladder in
one direction for many steps instead of diffusing back and forth.

References
----------
Swendsen, R. H. and Wang, J.-S. (1986). Replica Monte Carlo simulation of
spin-glasses. Physical Review Letters, 57, 2607-2609.

Geyer, C. J. (1991). Markov chain Monte Carlo maximum likelihood. Computing
Science and Statistics: Proceedings of the 23rd Symposium on the Interface,
156-163.

Hukushima, K. and Nemoto, K. (1996). Exchange Monte Carlo method and
application to spin glass simulations. Journal of the Physical Society of
Japan, 65, 1604-1608.

Syed, S., Bouchard-Cote, A., Deligiannidis, G. and Doucet, A. (2022).
Non-reversible parallel tempering: a scalable highly parallel MCMC scheme.
Journal of the Royal Statistical Society B, 84, 321-350.
"""

import numpy as np

from ._network import log_likelihood

__all__ = [
    "ReplicaExchange",
    "exchange_accepted",
    "exchange_states",
    "temperature_ladder",
]

# Rows of a state that travel with an exchange; the log posterior, its
# gradient and the step scales are recomputed for the new temperature, and
# the momentum, standard normal at every temperature, stays with the replica.
EXCHANGED_FIELDS = ("theta", "noise_precision", "group_precision")


def temperature_ladder(n_temperatures, min_inverse_temperature):
    """Inverse temperatures, geometric from 1 down to ``min_inverse_temperature``.

    Geometric spacing keeps the exchange rates of neighbours about equal when
    the heat capacity of the tempered posteriors varies little along the
    ladder, as for a posterior that is roughly Gaussian in many dimensions.

    Parameters
    ----------
    n_temperatures : int
    min_inverse_temperature : float in (0, 1]

    Returns
    -------
    inverse_temperatures : ndarray of shape (n_temperatures,)
        Decreasing, the first 1.

    Examples
    --------
    >>> from sklearn_meanfield.hmc._tempering import temperature_ladder
    >>> temperature_ladder(3, 0.25).tolist()
    [1.0, 0.5, 0.25]
    >>> temperature_ladder(1, 0.25).tolist()
    [1.0]
    """
    if n_temperatures == 1:
        return np.ones(1)
    steps = np.arange(n_temperatures) / (n_temperatures - 1)
    return float(min_inverse_temperature) ** steps


def exchange_accepted(log_likelihoods, inverse_temperatures, log_uniform, parity):
    """Which neighbouring replicas exchange their states.

    Parameters
    ----------
    log_likelihoods : ndarray of shape (n_temperatures, n_chains)
        Log likelihood of the state every replica holds.
    inverse_temperatures : ndarray of shape (n_temperatures,)
    log_uniform : ndarray of shape (n_temperatures - 1, n_chains)
        Logs of uniform draws, one per pair and chain.
    parity : {0, 1}
        The pairs ``(k, k + 1)`` with ``k % 2 == parity`` propose; the
        others do not (they share a replica with a proposing pair).

    Returns
    -------
    accepted : ndarray of bool of shape (n_temperatures - 1, n_chains)
        Row ``k``: replicas ``k`` and ``k + 1`` exchange.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.hmc._tempering import exchange_accepted
    >>> # The hotter replica holds the likelier state: always exchanged.
    >>> exchange_accepted(np.array([[0.0], [5.0]]), np.array([1.0, 0.5]),
    ...                   np.log([[0.999]]), parity=0).tolist()
    [[True]]
    >>> exchange_accepted(np.array([[0.0], [5.0]]), np.array([1.0, 0.5]),
    ...                   np.log([[0.999]]), parity=1).tolist()
    [[False]]
    """
    betas = np.asarray(inverse_temperatures)[:, None]
    log_ratio = (betas[:-1] - betas[1:]) * (log_likelihoods[1:] - log_likelihoods[:-1])
    proposing = (np.arange(len(betas) - 1) % 2 == parity)[:, None]
    return proposing & (log_uniform < log_ratio)


def exchange_states(states, accepted):
    """Exchange the rows of neighbouring replicas where ``accepted`` says so.

    Parameters
    ----------
    states : list of ChainState
        One per temperature, each of a batch of chains.
    accepted : ndarray of bool of shape (n_temperatures - 1, n_chains)
        From :func:`exchange_accepted` (no replica in two exchanges).

    Returns
    -------
    states : list of ChainState
        The weights and precisions (:data:`EXCHANGED_FIELDS`) exchanged; the
        other fields as they were, to be recomputed for the exchanged rows.
    changed : ndarray of bool of shape (n_temperatures, n_chains)
        Which replicas received another state.
    """
    n_temperatures = len(states)
    changed = np.zeros((n_temperatures, accepted.shape[1]), dtype=bool)
    changed[:-1] |= accepted
    changed[1:] |= accepted
    # Where replica k took part in an exchange, its partner is k - 1 or k + 1.
    partner = np.repeat(np.arange(n_temperatures)[:, None], accepted.shape[1], axis=1)
    partner[:-1][accepted] += 1
    partner[1:][accepted] -= 1
    chains = np.arange(accepted.shape[1])
    stacked = {
        name: np.stack([getattr(s, name) for s in states]) for name in EXCHANGED_FIELDS
    }
    new_states = [
        state._replace(
            **{name: values[partner[k], chains] for name, values in stacked.items()}
        )
        for k, state in enumerate(states)
    ]
    return new_states, changed


class ReplicaExchange:
    """The exchange step of a batch of chains, and its acceptance counts.

    Parameters
    ----------
    posterior : NetworkPosterior
        The posterior itself (untempered), whose likelihood the exchanges
        compare.
    inverse_temperatures : ndarray of shape (n_temperatures,)
        Decreasing from 1 (:func:`temperature_ladder`).
    random_state : ChainRandom
        The chains' exchange generators (one per chain, apart from those of
        the replicas' transitions).
    n_warmup : int
        Exchanges from this iteration on are counted in :attr:`rates`.
    """

    def __init__(self, posterior, inverse_temperatures, random_state, n_warmup):
        self.posterior = posterior
        self.inverse_temperatures = np.asarray(inverse_temperatures, dtype=float)
        self.random_state = random_state
        self.n_warmup = n_warmup
        n_pairs = len(self.inverse_temperatures) - 1
        n_chains = len(random_state.generators)
        self.n_proposed = np.zeros((n_chains, n_pairs))
        self.n_accepted = np.zeros((n_chains, n_pairs))

    def __call__(self, iteration, states, posteriors, power=1.0):
        """Propose the exchanges after ``iteration``; return the new states.

        ``posteriors`` are the replicas' (tempered) posteriors, ``power`` a
        factor on every inverse temperature (the warm-up's annealing).  The
        exchanged replicas get the log posterior, gradient and step scales of
        their new state under their own posterior.
        """
        n_pairs = len(self.inverse_temperatures) - 1
        n_chains = states[0].theta.shape[0]
        # One uniform per pair and chain every time: a chain's stream does not
        # depend on which pairs propose.
        log_uniform = np.log(self.random_state.uniform(size=(n_chains, n_pairs))).T
        data = self.posterior
        log_likelihoods = np.stack(
            [
                log_likelihood(
                    s.theta,
                    s.noise_precision,
                    data.X_augmented_T,
                    data.Y,
                    data.layout,
                    data.sample_weight,
                )
                for s in states
            ]
        )
        parity = iteration % 2
        accepted = exchange_accepted(
            log_likelihoods, power * self.inverse_temperatures, log_uniform, parity
        )
        if iteration >= self.n_warmup:
            proposing = np.arange(n_pairs) % 2 == parity
            self.n_proposed[:, proposing] += 1
            self.n_accepted += accepted.T
        if not accepted.any():
            return states
        states, changed = exchange_states(states, accepted)
        return [
            _refresh(state, posterior, rows) if rows.any() else state
            for state, posterior, rows in zip(states, posteriors, changed)
        ]

    @property
    def rates(self):
        """Exchange acceptance after warm-up, (n_chains, n_temperatures - 1):
        NaN for a pair never proposed."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.n_accepted / self.n_proposed


def _refresh(state, posterior, rows):
    """The log posterior, gradient and step scales of ``rows`` of ``state``
    under ``posterior``, after they received exchanged weights and
    precisions."""
    log_prob, grad = posterior.target(state.noise_precision, state.group_precision)(
        state.theta
    )
    scales = posterior.step_scales(state.noise_precision, state.group_precision)
    column = rows[:, None]
    return state._replace(
        log_prob=np.where(rows, log_prob, state.log_prob),
        grad=np.where(column, grad, state.grad),
        scales=np.where(column, scales, state.scales),
    )
