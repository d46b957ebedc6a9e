"""The driver of the network sampler: warm-up and sampling of a batch of chains.

:func:`run_chains` advances several chains together as one array (the Python
overhead of a leapfrog step is then shared) through the kernel
:func:`~sklearn_meanfield.hmc._transition.transition`: warm-up with the
adaptation (:class:`~sklearn_meanfield.hmc._transition.WarmupAdaptation`),
then sampling with its frozen settings, recording the draws, and an optional
``on_iteration`` callable that may ask to stop.  :func:`sample_chains` splits
the chains into batches, runs them in parallel and joins their draws.  Every
chain owns its random generator, seeded up front, so a chain's draws do not
depend on which other chains share its batch, hence not on ``n_jobs``.  A run
that was not stopped early returns a :class:`ChainCheckpoint`, from which a
later run continues the same chains as if they had never stopped.
:class:`ChainProgress` is the ``on_iteration`` of a fit: progress lines and
scikit-learn callback steps.
"""

import copy
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from joblib import effective_n_jobs

from .._parallel import run_parallel
from .._progress import ProgressReporter
from ._transition import FrozenTuning, WarmupAdaptation, transition

__all__ = [
    "ChainCheckpoint",
    "ChainDraws",
    "ChainProgress",
    "ChainRandom",
    "ChainSettings",
    "iteration_blocks",
    "join_draws",
    "max_batch_size",
    "run_chains",
    "sample_chains",
]

# Draws a chain keeps at least when a callback stops it early: split R-hat
# needs two halves of two draws.
MIN_DRAWS = 4

# Annealed warm-up starts with the likelihood of this many rows (all rows'
# log likelihoods times ANNEAL_START_ROWS / n): weak enough that the hidden
# units reorganise under the prior, whatever the data size.
ANNEAL_START_ROWS = 10.0

# A batch's hidden-unit activations (chains x rows x hidden units) take at
# most this many bytes: past about 400 kB a batch's arrays leave the core's
# cache, and two chains batched at 3000 rows cost 2.1 times one alone.
# Below it, batching shares the Python overhead of a leapfrog step.
BATCH_BYTES = 400_000

# HMCNetworkRegressor(anneal_warmup="auto") anneals from this many rows (sum
# of the sample weights) on, where annealing was found to lower R-hat; on
# fewer rows it helps some seeds and hurts others.
ANNEAL_AUTO_ROWS = 2000.0

# The step-size multiplier dual averaging starts from.
INITIAL_STEP_SIZE = 0.2


def iteration_blocks(n_warmup, n_samples):
    """How the iterations of a chain are grouped for progress reports.

    Parameters
    ----------
    n_warmup, n_samples : int

    Returns
    -------
    block_size : int
        Iterations per block (a tenth of the total, at least one); a progress
        line is printed after each full block.
    n_blocks : int
        Blocks, the last one possibly shorter: the callback steps of a chain.

    Examples
    --------
    >>> from sklearn_meanfield.hmc._chains import iteration_blocks
    >>> iteration_blocks(20, 25)
    (4, 12)
    """
    total = n_warmup + n_samples
    block_size = max(total // 10, 1)
    return block_size, -(-total // block_size)


class ChainRandom:
    """Per-chain random generators behind the interface the sampler uses.

    Row ``c`` of every array drawn comes from the generator of chain ``c``.

    Parameters
    ----------
    seeds : sequence of int

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.hmc._chains import ChainRandom
    >>> # Row c comes from chain c's generator, whatever the batch holds.
    >>> both = ChainRandom([1, 2]).standard_normal((2, 3))
    >>> alone = ChainRandom([2]).standard_normal((1, 3))
    >>> bool(np.array_equal(both[1], alone[0]))
    True
    """

    def __init__(self, seeds):
        self.generators = [
            np.random.default_rng(
                s if isinstance(s, np.random.SeedSequence) else int(s)
            )
            for s in seeds
        ]

    @classmethod
    def from_generators(cls, generators):
        """Chains driven by these generators (used, not copied)."""
        random = cls([])
        random.generators = list(generators)
        return random

    def standard_normal(self, size):
        return np.stack([g.standard_normal(size[1:]) for g in self.generators])

    def uniform(self, low=0.0, high=1.0, size=None):
        size = (len(self.generators),) if size is None else np.atleast_1d(size)
        size = tuple(int(n) for n in size)
        return np.stack([g.uniform(low, high, size[1:]) for g in self.generators])

    def gamma(self, shape, size):
        shape = np.broadcast_to(shape, size)
        return np.stack(
            [g.gamma(shape[c], size=size[1:]) for c, g in enumerate(self.generators)]
        )


@dataclass(frozen=True)
class ChainSettings:
    """How long and with which trajectories the chains run.

    Parameters
    ----------
    n_samples : int
        Draws kept per chain after warm-up.
    n_warmup : int
        Warm-up iterations: the precisions are held at their prior means for
        the first fifth of them; the step size and the rescaling moves adapt
        throughout.
    n_leapfrog : int
        Leapfrog steps per trajectory with ``"hmc"``; the initial mean length
        with ``"chees"``.
    step_size : float, default=INITIAL_STEP_SIZE
        Initial step-size multiplier.
    target_accept : float, default=0.8
        Acceptance the step size is adapted to.
    sampler : {"hmc", "chees"}, default="hmc"
        ``"hmc"``: every trajectory has ``n_leapfrog`` steps (Neal).
        ``"chees"``: the mean trajectory length of each chain adapts in
        warm-up (ChEES), starting from ``n_leapfrog`` steps, and every
        trajectory's length is jittered.
    max_leapfrog : int, default=1000
        Most leapfrog steps of one trajectory with ``"chees"``.
    anneal : bool, default=False
        Anneal the likelihood during warm-up (:meth:`inverse_temperature`).
    """

    n_samples: int
    n_warmup: int
    n_leapfrog: int
    step_size: float = INITIAL_STEP_SIZE
    target_accept: float = 0.8
    sampler: str = "hmc"
    max_leapfrog: int = 1000
    anneal: bool = False

    @property
    def n_fixed(self):
        """Early warm-up iterations with the precisions held fixed."""
        return self.n_warmup // 5

    @property
    def anneal_window(self):
        """``(start, end)`` warm-up iterations of the annealing (end exclusive).

        The two fifths of warm-up after the iterations with fixed precisions;
        ``(n_fixed, n_fixed)`` (empty) without annealing.

        Examples
        --------
        >>> from sklearn_meanfield.hmc._chains import ChainSettings
        >>> ChainSettings(1000, 500, 100, anneal=True).anneal_window
        (100, 300)
        """
        start = self.n_fixed
        return start, start + (2 * self.n_warmup // 5 if self.anneal else 0)

    def inverse_temperature(self, iteration, n_weighted):
        """The power of the likelihood at ``iteration`` (1 outside annealing).

        Through :attr:`anneal_window` it rises geometrically from
        ``min(1, ANNEAL_START_ROWS / n_weighted)`` (the likelihood of about
        ten rows, whatever the data size) towards 1, reached at the window's
        end; the last two fifths of warm-up and all sampling use the
        posterior itself.  A slow cooling lets every chain settle into the
        network configurations the data favour, where a chain started cold
        stays in the first configuration it fits (simulated annealing,
        Kirkpatrick, Gelatt and Vecchi 1983).  Warm-up draws are discarded,
        so the draws still follow the posterior.

        Examples
        --------
        >>> from sklearn_meanfield.hmc._chains import ChainSettings
        >>> settings = ChainSettings(1000, 500, 100, anneal=True)
        >>> [round(settings.inverse_temperature(i, 1000), 3)
        ...  for i in (99, 100, 200, 299, 300)]
        [1.0, 0.01, 0.1, 0.977, 1.0]
        """
        start, end = self.anneal_window
        if not start <= iteration < end:
            return 1.0
        if n_weighted <= ANNEAL_START_ROWS:
            return 1.0
        initial = ANNEAL_START_ROWS / n_weighted
        return float(initial ** ((end - iteration) / (end - start)))


def _rows(record, index):
    """The rows ``index`` of every array field of a NamedTuple, nested ones
    too (None stays None)."""

    def rows(value):
        if value is None:
            return None
        if isinstance(value, tuple):
            return _rows(value, index)
        return np.asarray(value)[index]

    return type(record)(*(rows(value) for value in record))


def _stacked(records):
    """NamedTuples of the same type, nested ones too, with their array fields
    concatenated along the first axis (None stays None)."""

    def stacked(values):
        if values[0] is None:
            return None
        if isinstance(values[0], tuple):
            return _stacked(values)
        return np.concatenate(values)

    return type(records[0])(*(stacked(values) for values in zip(*records)))


class ChainCheckpoint(NamedTuple):
    """Where a run of chains stopped: enough to continue them draw for draw.

    The chains are on the first axis of every array, and the generators hold
    one item per chain, so a checkpoint splits into batches of any size
    (:meth:`take`) and batches join again (:meth:`join`).
    """

    n_iterations: int
    """Iterations every chain has run, warm-up included."""
    state: object
    """The chains' :class:`~sklearn_meanfield.hmc._transition.ChainState`."""
    tuning: FrozenTuning
    """What warm-up adapted, frozen."""
    generators: list
    """The chains' generators."""

    @property
    def n_chains(self):
        return len(self.generators)

    def take(self, chains):
        """The checkpoint of the chains ``chains`` (an index array), with
        copies of their generators, so that continuing them leaves this one
        as it is."""
        chains = np.asarray(chains, dtype=int)
        return ChainCheckpoint(
            self.n_iterations,
            _rows(self.state, chains),
            _rows(self.tuning, chains),
            [copy.deepcopy(self.generators[c]) for c in chains],
        )

    @classmethod
    def join(cls, checkpoints):
        """The checkpoints of batches of chains as one, chains in order."""
        first = checkpoints[0]
        if any(c.n_iterations != first.n_iterations for c in checkpoints):
            raise ValueError("batches that ran different numbers of iterations")
        return cls(
            first.n_iterations,
            _stacked([c.state for c in checkpoints]),
            _stacked([c.tuning for c in checkpoints]),
            [g for c in checkpoints for g in c.generators],
        )


class ChainDraws(NamedTuple):
    """The draws of a batch of chains, draw axis first, chains second."""

    theta: np.ndarray
    """Weights, (n_kept, n_chains, n_params)."""
    noise_precision: np.ndarray
    """(n_kept, n_chains, n_outputs)."""
    group_precision: np.ndarray
    """(n_kept, n_chains, n_groups)."""
    train_outputs: np.ndarray
    """Network outputs at the training inputs, (n_kept, n_chains, n_train,
    n_outputs)."""
    accepted: np.ndarray
    """Whether each draw's trajectory was accepted, (n_kept, n_chains)."""
    divergent: np.ndarray
    """Whether it diverged, (n_kept, n_chains)."""
    accept_rate: np.ndarray
    """Fraction of the kept draws' trajectories accepted, (n_chains,)."""
    n_divergent: np.ndarray
    """Divergent trajectories among the kept draws, (n_chains,)."""
    step_size: np.ndarray
    """The (adapted) step-size multiplier, (n_chains,)."""
    stopped_in_warmup: bool
    """A stop request during warm-up made the last warm-up states the draws."""
    accept_prob: np.ndarray = None
    """Metropolis acceptance probability of each draw's trajectory,
    (n_kept, n_chains)."""
    n_leapfrog: np.ndarray = None
    """Its leapfrog steps, (n_kept, n_chains) int."""
    energy_error: np.ndarray = None
    """Its change of total energy, (n_kept, n_chains)."""
    trajectory_length: np.ndarray = None
    """The (adapted) mean trajectory duration, (n_chains,): ``n_leapfrog``
    times the step-size multiplier for ``"hmc"``."""
    checkpoint: ChainCheckpoint = None
    """Where the chains ended, to continue them; None when a stop request
    ended them early."""


def join_draws(earlier, later, train_outputs=None):
    """The draws of a run of chains followed by those of its continuation.

    Parameters
    ----------
    earlier : ChainDraws
        The draws of a run; ``accepted`` and ``train_outputs`` may be None
        (the acceptance counts then come from ``accept_rate``).
    later : ChainDraws
        The draws of the run resumed from ``earlier.checkpoint``: its frozen
        settings and checkpoint are those of the joined run.
    train_outputs : ndarray or None, default=None
        The network outputs of all the draws, when the caller has them in one
        array already (saves a copy of the largest array of a fit).

    Returns
    -------
    draws : ChainDraws
        All the draws, draw axis first, as one run with as many draws would
        have kept them.
    """
    n_earlier, n_kept = len(earlier.theta), len(earlier.theta) + len(later.theta)

    def joined(name):
        return np.concatenate([getattr(earlier, name), getattr(later, name)])

    if train_outputs is None:
        train_outputs = joined("train_outputs")
    n_accepted = np.round(earlier.accept_rate * n_earlier) + later.accepted.sum(axis=0)
    divergent = joined("divergent")
    return later._replace(
        theta=joined("theta"),
        noise_precision=joined("noise_precision"),
        group_precision=joined("group_precision"),
        train_outputs=train_outputs,
        accepted=None if earlier.accepted is None else joined("accepted"),
        divergent=divergent,
        accept_rate=n_accepted / n_kept,
        n_divergent=divergent.sum(axis=0),
        accept_prob=joined("accept_prob"),
        n_leapfrog=joined("n_leapfrog"),
        energy_error=joined("energy_error"),
    )


class _Trace(NamedTuple):
    """Preallocated per-draw arrays, draw axis first."""

    theta: np.ndarray
    noise_precision: np.ndarray
    group_precision: np.ndarray
    accepted: np.ndarray
    divergent: np.ndarray
    accept_prob: np.ndarray
    n_leapfrog: np.ndarray
    energy_error: np.ndarray

    @classmethod
    def empty(cls, n_draws, n_chains, layout):
        return cls(
            np.empty((n_draws, n_chains, layout.n_params)),
            np.empty((n_draws, n_chains, layout.n_outputs)),
            np.empty((n_draws, n_chains, layout.n_groups)),
            np.zeros((n_draws, n_chains), dtype=bool),
            np.zeros((n_draws, n_chains), dtype=bool),
            np.zeros((n_draws, n_chains)),
            np.zeros((n_draws, n_chains), dtype=int),
            np.zeros((n_draws, n_chains)),
        )

    def store(self, row, state, info):
        self.theta[row] = state.theta
        self.noise_precision[row] = state.noise_precision
        self.group_precision[row] = state.group_precision
        self.accepted[row] = info.accepted
        self.divergent[row] = info.divergent
        self.accept_prob[row] = info.accept_prob
        self.n_leapfrog[row] = info.n_leapfrog
        self.energy_error[row] = info.energy_error

    def rows(self, index):
        return _Trace(*(values[index] for values in self))


class _DrawRecorder:
    """Records the sampling draws, and the last ``MIN_DRAWS`` warm-up states
    (row ``iteration % MIN_DRAWS``): the draws of a batch stopped in warm-up."""

    def __init__(self, posterior, n_chains, settings, n_drawn=0):
        self.posterior = posterior
        # Draws of a continued run start after the n_drawn it had made.
        self.first = settings.n_warmup + n_drawn
        self.n_warmup = settings.n_warmup
        layout = posterior.layout
        n_new = settings.n_samples - n_drawn
        self.draws = _Trace.empty(n_new, n_chains, layout)
        self.recent = _Trace.empty(MIN_DRAWS, n_chains, layout)
        self.train_outputs = np.empty(
            (n_new, n_chains, posterior.X.shape[0], layout.n_outputs)
        )

    def record(self, iteration, state, info):
        if iteration < self.n_warmup:
            self.recent.store(iteration % MIN_DRAWS, state, info)
            return
        draw = iteration - self.first
        self.draws.store(draw, state, info)
        self.train_outputs[draw] = self.posterior.train_outputs(state.theta)

    def result(self, n_iterations, step_size, trajectory_length, checkpoint=None):
        """The draws after ``n_iterations`` iterations (those of this run)."""
        stopped_in_warmup = n_iterations <= self.n_warmup
        if stopped_in_warmup:
            # The last MIN_DRAWS warm-up states, oldest first.
            order = np.arange(n_iterations - MIN_DRAWS, n_iterations) % MIN_DRAWS
            trace = self.recent.rows(order)
            outputs = np.stack([self.posterior.train_outputs(t) for t in trace.theta])
        else:
            n_kept = n_iterations - self.first
            trace = self.draws.rows(slice(None, n_kept))
            outputs = self.train_outputs[:n_kept]
        n_kept = len(trace.theta)
        return ChainDraws(
            *trace[:3],
            train_outputs=outputs,
            accepted=trace.accepted,
            divergent=trace.divergent,
            accept_rate=trace.accepted.sum(axis=0) / max(n_kept, 1),
            n_divergent=trace.divergent.sum(axis=0),
            step_size=step_size,
            stopped_in_warmup=stopped_in_warmup,
            accept_prob=trace.accept_prob,
            n_leapfrog=trace.n_leapfrog,
            energy_error=trace.energy_error,
            trajectory_length=trajectory_length,
            checkpoint=checkpoint,
        )


def _stop_now(iteration, settings):
    """Whether a pending stop request ends the batch after ``iteration``.

    During warm-up as soon as ``MIN_DRAWS`` states exist; while sampling at
    the end of a block of iterations (:func:`iteration_blocks`) that leaves
    ``MIN_DRAWS`` draws or more, and fewer than asked for.
    """
    if iteration < settings.n_warmup:
        return iteration + 1 >= MIN_DRAWS
    block_size, _ = iteration_blocks(settings.n_warmup, settings.n_samples)
    n_done, n_drawn = iteration + 1, iteration + 1 - settings.n_warmup
    at_block_end = n_done % block_size == 0 or n_drawn == settings.n_samples
    return at_block_end and MIN_DRAWS <= n_drawn < settings.n_samples


class ChainProgress:
    """The ``on_iteration`` of a batch of chains in a fit: progress and callbacks.

    After every block of iterations (:func:`iteration_blocks`) it prints a
    line (``verbose >= 1``: mean acceptance over the block's iterations this
    run made, noise sd per chain) and runs one ``"iterations"`` step of every
    chain's callback task; it asks to stop when a callback does.  Used as a
    context manager it runs the tasks' begin hooks on entry and their end
    hooks on success.

    Parameters
    ----------
    settings : ChainSettings
    tasks : sequence of CallbackTask
        One per chain.
    verbose : int, default=0
    chain_ids : sequence of int, default=()
        Shown in the progress lines.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.hmc._chains import ChainProgress, ChainSettings
    >>> from sklearn_meanfield.hmc._transition import ChainInfo
    >>> progress = ChainProgress(ChainSettings(10, 10, 5, 0.1), [], verbose=1,
    ...                          chain_ids=[0])
    >>> class State:
    ...     noise_precision = np.full((1, 1), 4.0)
    >>> info = ChainInfo(None, np.full(1, 0.5), None, None, None, None)
    >>> progress(0, State, info)  # doctest: +ELLIPSIS
    False
    >>> progress(1, State, info)  # doctest: +ELLIPSIS
    [HMCNetworkRegressor chains [0]] iteration 2/20 (warm-up), mean acceptance \
[0.5], noise sd [0.5] (...s)
    False
    """

    def __init__(self, settings, tasks, verbose=0, chain_ids=()):
        self.tasks = list(tasks)
        self.n_warmup = settings.n_warmup
        self.total = settings.n_warmup + settings.n_samples
        self.block_size, _ = iteration_blocks(settings.n_warmup, settings.n_samples)
        chain_ids = [int(i) for i in chain_ids]
        self.reporter = ProgressReporter(
            verbose, f"HMCNetworkRegressor chains {chain_ids}"
        )
        # Summed acceptance probabilities of the block and their number: a
        # continued run starts within a block, so its first one is partial.
        self.recent, self.n_recent = 0.0, 0

    def __enter__(self):
        for task in self.tasks:
            task.__enter__()
        return self

    def __exit__(self, *exc_info):
        # The chains' tasks end in the order they began (not nested): they
        # are siblings.
        for task in self.tasks:
            task.__exit__(*exc_info)
        return False

    def __call__(self, iteration, state, info):
        self.recent = self.recent + info.accept_prob
        self.n_recent += 1
        done = iteration + 1
        if done % self.block_size == 0:
            self.reporter(
                1,
                "iteration %d/%d (%s), mean acceptance %s, noise sd %s",
                done,
                self.total,
                "warm-up" if iteration < self.n_warmup else "sampling",
                np.array2string(self.recent / self.n_recent, precision=2),
                np.array2string(
                    1.0 / np.sqrt(state.noise_precision.mean(axis=1)), precision=3
                ),
            )
            self.recent, self.n_recent = 0.0, 0
        if done % self.block_size == 0 or done == self.total:
            # Every chain's step runs (no short-circuit), whichever asks.
            return any([task.step("iterations") for task in self.tasks])
        return False


def _fresh_chains(posterior, seeds, settings):
    """New chains: their generators, initial states and warm-up adaptation."""
    random = ChainRandom(seeds)
    state = posterior.initial_state(random, len(seeds))
    adaptation = WarmupAdaptation(
        posterior.layout,
        len(seeds),
        step_size=settings.step_size,
        target_accept=settings.target_accept,
        trajectory_length=(
            settings.n_leapfrog * settings.step_size
            if settings.sampler != "hmc"
            else None
        ),
        max_leapfrog=settings.max_leapfrog,
    )
    return random, state, adaptation


def _warmup_iteration(iteration, state, posterior, adaptation, random, settings):
    """One warm-up iteration of the kernel, then the adaptation's update.

    The likelihood is tempered through the annealing window, and dual
    averaging restarts when the annealing ends: the step sizes of the
    tempered posteriors say little about the posterior's.
    """
    power = settings.inverse_temperature(iteration, posterior.n_weighted)
    state, info = transition(
        state,
        posterior.tempered(power),
        adaptation.tuning(),
        random,
        n_leapfrog=adaptation.n_leapfrog(iteration, settings.n_leapfrog),
        update_precisions=iteration >= settings.n_fixed,
    )
    adaptation.update(info, state)
    anneal_end = settings.anneal_window[1]
    if iteration == anneal_end - 1 and anneal_end > settings.n_fixed:
        adaptation.restart_step_size()
    return state, info


def _sampling_iteration(iteration, state, posterior, frozen, random, settings):
    """One iteration of the kernel with the frozen settings."""
    return transition(
        state,
        posterior,
        frozen.tuning(),
        random,
        n_leapfrog=frozen.n_leapfrog(
            iteration, settings.n_leapfrog, settings.max_leapfrog
        ),
    )


def run_chains(posterior, seeds, settings, on_iteration=None, resume=None):
    """Run a batch of chains: warm-up with adaptation, then sampling.

    Warm-up follows Neal's practice: the precisions stay at their prior means
    (the noise at a low level) for the first fifth of it while the weights
    find the data; then every iteration is a Gibbs step of the precisions, the
    rescaling moves and an HMC trajectory
    (:func:`~sklearn_meanfield.hmc._transition.transition`).  The step size,
    the rescaling moves and, with ``settings.sampler="chees"``, each chain's
    trajectory length adapt during warm-up
    (:class:`~sklearn_meanfield.hmc._transition.WarmupAdaptation`) and are
    frozen afterwards.

    Parameters
    ----------
    posterior : NetworkPosterior
    seeds : sequence of int
        One seed per chain.
    settings : ChainSettings
    on_iteration : callable or None, default=None
        ``on_iteration(iteration, state, info)`` after every iteration, with
        the :class:`~sklearn_meanfield.hmc._transition.ChainState` and
        :class:`~sklearn_meanfield.hmc._transition.ChainInfo`; a true return
        value asks to stop.  A request during warm-up ends the batch at once
        (once ``MIN_DRAWS`` states exist): the last ``MIN_DRAWS`` warm-up
        states become the draws and ``stopped_in_warmup`` says so.  A request
        while sampling ends it at the end of the first block of iterations
        (:func:`iteration_blocks`) that leaves every chain ``MIN_DRAWS``
        draws or more.
    resume : ChainCheckpoint or None, default=None
        The checkpoint of an earlier run of these chains with the same
        posterior and settings but fewer ``n_samples``, which this run
        continues (used, not copied: pass :meth:`ChainCheckpoint.take`'s
        copy to keep it): the chains then draw what one run with
        ``settings.n_samples`` would have drawn after that point, and only
        these new draws are returned.

    Returns
    -------
    draws : ChainDraws
        ``n_kept`` is ``n_samples`` (less the draws of ``resume``) unless a
        stop was asked for; ``checkpoint`` is where the chains ended, None
        when a stop ended them early.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.hmc._chains import ChainSettings, run_chains
    >>> from sklearn_meanfield.hmc._network import HyperPrior, NetworkLayout
    >>> from sklearn_meanfield.hmc._transition import NetworkPosterior
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(30, 1))
    >>> Y = np.tanh(X) + 0.1 * rng.normal(size=(30, 1))
    >>> posterior = NetworkPosterior((X - X.mean()) / X.std(),
    ...     (Y - Y.mean()) / Y.std(), NetworkLayout(1, 3, 1), HyperPrior())
    >>> settings = ChainSettings(n_samples=40, n_warmup=40, n_leapfrog=10)
    >>> out = run_chains(posterior, [0, 1], settings)
    >>> out.theta.shape, out.train_outputs.shape
    ((40, 2, 10), (40, 2, 30, 1))
    >>> bool(np.all(out.accept_rate > 0.5))
    True
    """
    n_chains, n_warmup = len(seeds), settings.n_warmup
    n_iterations = n_warmup + settings.n_samples
    adaptation = frozen = None
    if resume is None:
        start = 0
        random, state, adaptation = _fresh_chains(posterior, seeds, settings)
        if n_warmup == 0:
            frozen = adaptation.final()
    else:
        start = resume.n_iterations
        if start < n_warmup or resume.n_chains != n_chains:
            raise ValueError("the checkpoint is not of these chains after warm-up")
        random = ChainRandom.from_generators(resume.generators)
        state, frozen = resume.state, resume.tuning
    recorder = _DrawRecorder(posterior, n_chains, settings, max(start - n_warmup, 0))
    stop, iteration = False, start - 1
    for iteration in range(start, n_iterations):
        if iteration < n_warmup:
            state, info = _warmup_iteration(
                iteration, state, posterior, adaptation, random, settings
            )
            if iteration == n_warmup - 1:
                frozen = adaptation.final()
        else:
            state, info = _sampling_iteration(
                iteration, state, posterior, frozen, random, settings
            )
        recorder.record(iteration, state, info)
        if stop and iteration < n_warmup and _stop_now(iteration, settings):
            break  # asked for earlier in warm-up, before MIN_DRAWS states
        if on_iteration is not None:
            stop |= bool(on_iteration(iteration, state, info))
        if stop and _stop_now(iteration, settings):
            break
    checkpoint = None
    if iteration + 1 == n_iterations and n_iterations > n_warmup:
        checkpoint = ChainCheckpoint(n_iterations, state, frozen, random.generators)
    # A batch stopped in warm-up reports the settings it had reached.
    tuning = adaptation.tuning() if frozen is None else frozen.tuning()
    trajectory_length = (
        settings.n_leapfrog * tuning.step_size
        if tuning.trajectory_length is None
        else tuning.trajectory_length
    )
    return recorder.result(
        iteration + 1, tuning.step_size, trajectory_length, checkpoint=checkpoint
    )


def _run_batch(posterior, seeds, settings, tasks, verbose, chain_ids, resume=None):
    """Module-level (picklable) unit of parallel work: one batch of chains."""
    with ChainProgress(settings, tasks, verbose, chain_ids) as progress:
        return run_chains(
            posterior, seeds, settings, on_iteration=progress, resume=resume
        )


def _join(results):
    """The draws of all batches, chains side by side, as many per chain as
    the shortest batch kept (the model a single batch stopping with every
    chain together would give)."""
    n_kept = min(len(r.theta) for r in results)

    def joined(values):
        return np.concatenate([v[:n_kept] for v in values], axis=1)

    per_draw = [joined(values) for values in zip(*(r[:6] for r in results))]
    accepted, divergent = per_draw[4], per_draw[5]
    stats = ("accept_prob", "n_leapfrog", "energy_error")
    return ChainDraws(
        *per_draw,
        accept_rate=np.sum(accepted, axis=0) / n_kept,
        n_divergent=np.sum(divergent, axis=0),
        step_size=np.concatenate([r.step_size for r in results]),
        stopped_in_warmup=any(r.stopped_in_warmup for r in results),
        **{name: joined([getattr(r, name) for r in results]) for name in stats},
        trajectory_length=np.concatenate([r.trajectory_length for r in results]),
        checkpoint=(
            None
            if any(r.checkpoint is None for r in results)
            else ChainCheckpoint.join([r.checkpoint for r in results])
        ),
    )


def max_batch_size(n_rows, layout, itemsize=8):
    """Most chains one batch advances together: hidden activations of
    ``BATCH_BYTES`` at most, ``itemsize`` bytes each (one chain at least).

    Examples
    --------
    >>> from sklearn_meanfield.hmc._chains import max_batch_size
    >>> from sklearn_meanfield.hmc._network import NetworkLayout
    >>> layout = NetworkLayout(10, 10, 1)
    >>> [max_batch_size(n, layout) for n in (200, 2000, 5000)]
    [25, 2, 1]
    >>> [max_batch_size(n, layout, itemsize=4) for n in (200, 2000, 5000)]
    [50, 5, 2]
    """
    return max(1, BATCH_BYTES // max(n_rows * layout.n_hidden * itemsize, 1))


def sample_chains(
    posterior, seeds, settings, *, n_jobs=None, reporter=None, resume=None
):
    """Run every chain, in batches in parallel, and join their draws.

    Chains are grouped into one batch per worker, or more batches when a
    batch would exceed :func:`max_batch_size` chains (a worker then runs its
    batches one after the other); each chain has its own generator, so the
    grouping changes speed, not results.

    Parameters
    ----------
    posterior : NetworkPosterior
    seeds : ndarray of int
        One seed per chain.
    settings : ChainSettings
    n_jobs : int or None, default=None
    reporter : ProgressReporter or None, default=None
        The fit's reporter: its verbosity for the chains' progress lines and
        its callback task, of which every chain is a subtask (a step per block
        of iterations).
    resume : ChainCheckpoint or None, default=None
        Continue these chains from where an earlier run left them
        (:func:`run_chains`); it is left as it was.

    Returns
    -------
    draws : ChainDraws
        All chains, in the order of ``seeds``; every chain keeps as many draws
        as the shortest batch when a callback stopped some.  With ``resume``
        only the new draws.
    """
    reporter = ProgressReporter(0, "") if reporter is None else reporter
    n_chains = len(seeds)
    batch_shape = (
        posterior.X.shape[0],
        posterior.layout,
        np.dtype(posterior.gradient_dtype).itemsize,
    )
    n_batches = max(
        min(n_chains, max(effective_n_jobs(n_jobs), 1)),
        -(-n_chains // max_batch_size(*batch_shape)),
    )
    batches = np.array_split(np.arange(n_chains), n_batches)
    reporter(1, "%d chains in %d batches", n_chains, n_batches)
    block_size, n_blocks = iteration_blocks(settings.n_warmup, settings.n_samples)
    if resume is not None:
        n_blocks -= resume.n_iterations // block_size  # the blocks left
    tasks = reporter.task.subtasks(n_chains, "chain", max_steps=n_blocks)
    results = run_parallel(
        _run_batch,
        [
            (
                posterior,
                seeds[b],
                settings,
                [tasks[c] for c in b],
                reporter.verbose,
                b,
                None if resume is None else resume.take(b),
            )
            for b in batches
        ],
        n_jobs=n_jobs,
    )
    draws = _join(results)
    n_drawn = 0 if resume is None else resume.n_iterations - settings.n_warmup
    if n_drawn + len(draws.theta) < settings.n_samples:
        reporter(
            1,
            "stopped by a callback: %d draws per chain kept",
            n_drawn + len(draws.theta),
        )
    return draws
