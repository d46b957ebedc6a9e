"""HMCNetworkRegressor against NumPyro's NUTS on the same model, side by side.

The same model on both sides: inputs and targets standardised as the estimator
does, one hidden tanh layer, Gaussian priors per weight group (one precision
per input under ARD, hidden biases, hidden-to-output weights, output biases)
with the Gamma hyperpriors of the estimator's ``HyperPrior`` and a Gaussian
likelihood with a Gamma-prior noise precision per output.  A model-agreement
check (log joint densities at random points, and our sampler's Gibbs
conditionals) runs and prints first.  Problems: a smooth 2-input, 2-output
function (200 points, 16 hidden units), ``make_friedman1`` at several sizes
(noise 1, 10 hidden) and ``load_diabetes`` (75/25 split, 10 hidden).  For
each problem and sampler it prints test MSE, wall time (fit and test
predictions), the smallest bulk ESS over the test predictions, ESS/s, the
largest split R-hat over test predictions and log hyperparameters, whether
our fit warned, and the ratios ours / NUTS of ESS/s and MSE.

Usage: ``python benchmarks/bench_hmc_numpyro.py [--quick] [--sizes 200 1000]
[--seeds 0 1 2] [--samplers hmc] [--no-nuts]``
(``python -m benchmarks --only bench_hmc_numpyro --merge`` writes its section
of RESULTS.md).  NumPyro and JAX are optional (``pip install numpyro jax``):
without them only our estimator runs, and friedman1 at its smallest size
unless ``--sizes`` says otherwise.  Both sides get the machine's 2 cores
and one BLAS/XLA thread per worker: our 4 chains in 2 workers (``n_jobs=2``),
NumPyro's 2 chains on 2 host devices in parallel (Hoffman & Gelman 2014; NUTS
with 1000 warm-up and 1000 draws per chain).
"""

import os

# One thread per worker on both sides, set before numpy and jax load: our two
# joblib workers and NumPyro's two XLA devices then share the 2 cores alike.
for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "")
    + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
).strip()

import argparse  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from importlib import metadata  # noqa: E402

import numpy as np  # noqa: E402
from scipy.stats import gamma as gamma_dist  # noqa: E402
from sklearn.datasets import load_diabetes, make_friedman1  # noqa: E402
from sklearn.exceptions import ConvergenceWarning  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

from sklearn_meanfield import HMCNetworkRegressor  # noqa: E402

# Private on purpose: the model-agreement check evaluates the estimator's own
# log posterior, prior numbers, standardisation and Gibbs conditionals (no
# public counterpart exists), so that the NumPyro model is checked against the
# code that actually runs, not against a transcription of it.
from sklearn_meanfield._base import Standardizer  # noqa: E402
from sklearn_meanfield.diagnostics import (  # noqa: E402
    effective_sample_size,
    split_rhat,
)
from sklearn_meanfield.hmc._network import (  # noqa: E402
    HyperPrior,
    NetworkLayout,
    gibbs_precisions,
    log_posterior_and_grad,
    network_outputs,
    prior_precision_vector,
)

N_CORES = 2
PREDICT_ROWS = 250  # test rows per predict_draws call (bounds its memory)
# friedman1 sizes of the full mode.  Up to 2000 rows the whole script ran in
# 21 minutes on 2 cores; adding 5000 rows (``--sizes 5000``) took it past 30.
FULL_SIZES = [200, 500, 1000, 2000]

try:
    import numpyro

    numpyro.set_host_device_count(N_CORES)
    numpyro.enable_x64()  # float64 like ours
    import jax
    import jax.numpy as jnp
    import numpyro.distributions as dist
    from numpyro.handlers import reparam
    from numpyro.infer import MCMC, NUTS
    from numpyro.infer.reparam import LocScaleReparam
    from numpyro.infer.util import log_density, potential_energy

    HAVE_NUMPYRO = True
except ImportError:
    HAVE_NUMPYRO = False


# --------------------------------------------------------------------------
# Problems


def smooth_problem(n_train=200, n_test=1000, noise=0.05):
    """y1 = sin(x1) cos(x2), y2 = x1 x2 / 4 on [-2, 2]^2, noise sd 0.05."""

    def draw(n, seed):
        rng = np.random.RandomState(seed)
        X = rng.uniform(-2, 2, size=(n, 2))
        Y = np.column_stack([np.sin(X[:, 0]) * np.cos(X[:, 1]), X[:, 0] * X[:, 1] / 4])
        return X, Y + noise * rng.normal(size=Y.shape)

    return draw(n_train, 0) + draw(n_test, 1)


PROBLEMS = ("smooth2", "friedman1", "diabetes")


def problems(quick, sizes, which=PROBLEMS):
    """(label, n_hidden, X, y, X_test, y_test) of every benchmark problem."""
    if "smooth2" in which:
        yield ("smooth2 n=200", 16) + smooth_problem()
    for n in () if "friedman1" not in which else (200,) if quick else sizes:
        X, y = make_friedman1(n_samples=n, noise=1.0, random_state=0)
        X_test, y_test = make_friedman1(n_samples=2000, noise=1.0, random_state=1)
        yield f"friedman1 n={n}", 10, X, y, X_test, y_test
    if not quick and "diabetes" in which:
        X, y = load_diabetes(return_X_y=True)
        X, X_test, y, y_test = train_test_split(X, y, test_size=0.25, random_state=0)
        yield f"diabetes n={len(y)}", 10, X, y, X_test, y_test


# --------------------------------------------------------------------------
# The NumPyro model


def prior_numbers(layout, prior):
    """Gamma (shape, rate) of every weight group and of the noise precision.

    Shape ``a/2`` and mean ``w`` (rate ``a / 2w``), the means for this
    problem's sizes as HyperPrior gives them (input-to-hidden times
    n_features, hidden-to-output times n_hidden).
    """
    a, means = prior.a_weights, prior.group_means(layout)
    groups = (np.full(layout.n_groups, a / 2), a / (2 * means))
    noise = (prior.a_noise / 2, prior.a_noise / (2 * prior.w_noise))
    return groups, noise


def make_model(layout, prior):
    """The estimator's model in NumPyro (centred, as ours is)."""
    d, h, m = layout.n_features, layout.n_hidden, layout.n_outputs
    (shape, rate), (noise_shape, noise_rate) = prior_numbers(layout, prior)
    n_w1 = d if layout.ard else 1

    def model(X, Y=None):
        # Precisions first; NUTS samples them on the log scale (NumPyro's
        # transform of a Gamma site, Jacobian included).
        p_w1 = numpyro.sample(
            "prec_W1", dist.Gamma(shape[:n_w1], rate[:n_w1]).to_event(1)
        )
        p_b1 = numpyro.sample("prec_b1", dist.Gamma(shape[n_w1], rate[n_w1]))
        p_w2 = numpyro.sample("prec_W2", dist.Gamma(shape[n_w1 + 1], rate[n_w1 + 1]))
        p_b2 = numpyro.sample("prec_b2", dist.Gamma(shape[n_w1 + 2], rate[n_w1 + 2]))
        sd_w1 = jnp.broadcast_to((1 / jnp.sqrt(p_w1))[:, None], (d, h))
        w1 = numpyro.sample("W1", dist.Normal(0.0, sd_w1).to_event(2))
        b1 = numpyro.sample(
            "b1", dist.Normal(0.0, jnp.full(h, 1 / jnp.sqrt(p_b1))).to_event(1)
        )
        w2 = numpyro.sample(
            "W2", dist.Normal(0.0, jnp.full((h, m), 1 / jnp.sqrt(p_w2))).to_event(2)
        )
        b2 = numpyro.sample(
            "b2", dist.Normal(0.0, jnp.full(m, 1 / jnp.sqrt(p_b2))).to_event(1)
        )
        tau = numpyro.sample(
            "noise_precision",
            dist.Gamma(jnp.full(m, noise_shape), noise_rate).to_event(1),
        )
        f = jnp.tanh(X @ w1 + b1) @ w2 + b2
        numpyro.sample("Y", dist.Normal(f, 1 / jnp.sqrt(tau)).to_event(2), obs=Y)

    return model


WEIGHT_SITES = ("W1", "b1", "W2", "b2")
HYPER_SITES = ("prec_W1", "prec_b1", "prec_W2", "prec_b2", "noise_precision")


def _split_params(theta, groups, noise, layout):
    """Our flat (theta, group precisions, noise) as NumPyro's sites."""
    n_w1 = layout.n_features if layout.ard else 1
    w1, b1, w2, b2 = layout.unpack(theta[None])
    return {
        "W1": w1[0],
        "b1": b1[0],
        "W2": w2[0],
        "b2": b2[0],
        "prec_W1": groups[:n_w1],
        "prec_b1": groups[n_w1],
        "prec_W2": groups[n_w1 + 1],
        "prec_b2": groups[n_w1 + 2],
        "noise_precision": noise,
    }


class _ShapeRate:
    """A stand-in generator that makes ``gibbs_precisions`` reveal its Gamma
    conditionals: ``gamma(shape)`` returns 1, so the draw is ``1 / rate``."""

    def __init__(self):
        self.shapes = []

    def gamma(self, shape, size):
        self.shapes.append(np.broadcast_to(shape, size).copy())
        return np.ones(size)


def _our_conditional(theta, phi, Xs, Ys, layout, prior):
    """log p(precisions | theta) of our sampler's Gibbs step, at ``phi``."""
    residual = Ys - network_outputs(theta[None], Xs, layout)
    stub = _ShapeRate()
    inv_groups, inv_noise = gibbs_precisions(theta[None], residual, layout, prior, stub)
    groups, noise = phi
    return float(
        np.sum(gamma_dist.logpdf(groups, stub.shapes[0][0], scale=inv_groups[0]))
        + np.sum(gamma_dist.logpdf(noise, stub.shapes[1][0], scale=inv_noise[0]))
    )


def _our_weights_term(theta, phi, Xs, Ys, layout):
    """Our log posterior of the weights given the precisions (up to a constant
    in theta): the energy the HMC trajectories use."""
    groups, noise = phi
    precision = prior_precision_vector(groups[None], layout)
    return float(
        log_posterior_and_grad(theta[None], Xs, Ys, noise[None], precision, layout)[0][
            0
        ]
    )


def _our_log_joint(theta, phi, Xs, Ys, layout, prior):
    """Our full log joint: the weights' energy plus its precision-dependent
    normalisers and the Gamma hyperpriors (shape a/2, mean w)."""
    groups, noise = phi
    n, m = Ys.shape
    sizes = layout.group_sizes()
    (shape, rate), (noise_shape, noise_rate) = prior_numbers(layout, prior)
    return (
        _our_weights_term(theta, phi, Xs, Ys, layout)
        + 0.5 * np.sum(sizes * np.log(groups))
        + 0.5 * n * np.sum(np.log(noise))
        - 0.5 * (layout.n_params + n * m) * np.log(2 * np.pi)
        + np.sum(gamma_dist.logpdf(groups, shape, scale=1 / rate))
        + np.sum(gamma_dist.logpdf(noise, noise_shape, scale=1 / noise_rate))
    )


def model_agreement(Xs, Ys, layout, prior, n_points=6, seed=0):
    """Compare NumPyro's log density with ours at random points; print and assert.

    Three comparisons, each over ``n_points`` random (weights, precisions):
    (1) NumPyro's log joint against ours written out (our weights' energy plus
    normalisers and Gamma priors): the difference must be constant (it is 0);
    (2) the same difference from our sampler's own pieces only, without any
    prior written here: log p(theta_i, phi_i) - log p(theta_0, phi_0) is our
    energy difference at phi_i plus the Gibbs-conditional difference at
    theta_0 (two full conditionals determine the joint); (3) NumPyro's
    potential energy in its unconstrained space (log precisions) against
    minus the log joint minus the log-Jacobian sum of log precisions.
    """
    rng = np.random.RandomState(seed)
    means = prior.group_means(layout)
    points = []
    for _ in range(n_points):
        theta = 0.7 * rng.normal(size=layout.n_params)
        groups = means * np.exp(rng.normal(size=layout.n_groups))
        noise = 20.0 * np.exp(rng.normal(size=layout.n_outputs))
        points.append((theta, (groups, noise)))
    ours = np.array([_our_log_joint(t, p, Xs, Ys, layout, prior) for t, p in points])
    theta0, phi0 = points[0]
    path = np.array(
        [
            _our_weights_term(t, p, Xs, Ys, layout)
            - _our_weights_term(theta0, p, Xs, Ys, layout)
            + _our_conditional(theta0, p, Xs, Ys, layout, prior)
            - _our_conditional(theta0, phi0, Xs, Ys, layout, prior)
            for t, p in points
        ]
    )
    if not HAVE_NUMPYRO:
        print("  model check: NumPyro not installed, skipped")
        return
    model = make_model(layout, prior)
    theirs, potential, log_jac = [], [], []
    for theta, (groups, noise) in points:
        params = _split_params(theta, groups, noise, layout)
        params = {k: jnp.asarray(v) for k, v in params.items()}
        theirs.append(float(log_density(model, (Xs, Ys), {}, params)[0]))
        unconstrained = {
            k: jnp.log(v) if k in HYPER_SITES else v for k, v in params.items()
        }
        potential.append(float(potential_energy(model, (Xs, Ys), {}, unconstrained)))
        log_jac.append(np.sum(np.log(groups)) + np.sum(np.log(noise)))
    theirs, potential = np.array(theirs), np.array(potential)
    diff = theirs - ours
    spread = float(np.ptp(diff))
    path_dev = float(np.max(np.abs((theirs - theirs[0]) - path)))
    jac_dev = float(np.max(np.abs(potential + theirs + np.array(log_jac))))
    scale = float(np.max(np.abs(theirs)))
    print(
        f"  model check ({n_points} random points, |log p| up to {scale:.3g}): "
        f"NumPyro - ours = {diff[0]:+.3g} (spread {spread:.2g}); "
        f"via our Gibbs conditionals max dev {path_dev:.2g}; "
        f"unconstrained potential vs -log p - sum log prec max dev {jac_dev:.2g}"
    )
    tol = 1e-8 * max(scale, 1.0)
    assert spread < tol, f"models differ: NumPyro - ours varies by {spread}"
    assert path_dev < tol, f"Gibbs conditionals disagree with NumPyro: {path_dev}"
    assert jac_dev < tol, f"log-scale transform inconsistent: {jac_dev}"


# --------------------------------------------------------------------------
# The two samplers


def _as_3d(draws, n_outputs):
    return draws.reshape(draws.shape[0], draws.shape[1], n_outputs)


def _min_ess(per_chain):
    """Smallest bulk ESS over the quantities of (n_chains, n_draws, k) draws."""
    return float(np.min(effective_sample_size(per_chain)))


def sampler_options():
    """The estimator's default sampler, then its alternatives (None: no choice)."""
    params = HMCNetworkRegressor().get_params()
    if "sampler" not in params:
        return [None]
    default, options = params["sampler"], []
    for constraint in HMCNetworkRegressor._parameter_constraints.get("sampler", []):
        options += sorted(
            o for o in getattr(constraint, "options", ()) if isinstance(o, str)
        )
    return [default] + [o for o in options if o != default]


def _leapfrog_detail(est):
    """Leapfrog steps per draw and trajectory length, where the estimator
    reports them (``chain_draws()["n_steps"]``, ``trajectory_length_``)."""
    text = ""
    if hasattr(est, "chain_draws"):
        steps = est.chain_draws().get("n_steps")
        if steps is not None:
            text += f", leapfrog/draw {np.mean(steps):.0f}"
    if hasattr(est, "trajectory_length_"):
        text += f", trajectory {np.mean(est.trajectory_length_):.3g}"
    return text


def run_ours(X, y, X_test, y_test, n_hidden, sampler, quick, seed=0):
    # Chains that disagree are continued, as NUTS's are not: the fit a user
    # makes to get converged chains.
    kwargs = dict(
        hidden_layer_size=n_hidden,
        max_samples="auto",
        n_jobs=N_CORES,
        random_state=seed,
    )
    if sampler is not None:
        kwargs["sampler"] = sampler
    if quick:
        kwargs.update(n_samples=100, n_warmup=100)
    est = HMCNetworkRegressor(**kwargs)
    load = os.getloadavg()[0]
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        est.fit(X, y)
    draws = np.concatenate(
        [
            est.predict_draws(X_test[i : i + PREDICT_ROWS])
            for i in range(0, len(X_test), PREDICT_ROWS)
        ],
        axis=1,
    )
    seconds = time.perf_counter() - start
    kinds = sorted(
        {
            kind
            for w in caught
            if issubclass(w.category, ConvergenceWarning)
            for kind in ("R-hat", "k-hat", "divergent", "stopped")
            if kind in str(w.message)
        }
    )
    m = 1 if y.ndim == 1 else y.shape[1]
    draws = _as_3d(draws, m)
    n_chains = est.n_chains
    # predict_draws and the draws attributes are chain after chain.
    preds = draws.reshape(n_chains, -1, draws.shape[1] * m)
    hyper = np.log(
        np.concatenate([est.precision_draws_, est.noise_precision_draws_], axis=1)
    ).reshape(n_chains, preds.shape[1], -1)
    mean = draws.mean(axis=0)
    name = "ours" if sampler is None else f"ours[{sampler}]"
    return dict(
        name=name,
        mse=float(np.mean((y_test.reshape(mean.shape) - mean) ** 2)),
        seconds=seconds,
        ess=_min_ess(preds),
        rhat=float(max(np.max(split_rhat(preds)), np.max(split_rhat(hyper)))),
        own_rhat=est.rhat_,
        warned=",".join(kinds) or "-",
        detail=f"draws {est.n_draws_}/chain, "
        f"accept {np.mean(est.acceptance_rate_):.2f}, "
        f"divergent {int(np.sum(est.n_divergent_))}" + _leapfrog_detail(est),
        load=load,
    )


def run_nuts(X, y, X_test, y_test, n_hidden, quick, seed=0, noncentred=False):
    Y = y.reshape(len(y), -1)
    x_scaler, y_scaler = StandardScaler().fit(X), StandardScaler().fit(Y)
    Xs, Ys = x_scaler.transform(X), y_scaler.transform(Y)
    Xt = x_scaler.transform(X_test)
    layout = NetworkLayout(X.shape[1], n_hidden, Y.shape[1], ard=True)
    n_warmup, n_samples = (200, 200) if quick else (1000, 1000)
    chain_method = "parallel" if jax.local_device_count() >= N_CORES else "sequential"
    model = make_model(layout, HyperPrior())
    if noncentred:
        # The same posterior, the weights sampled as standard normals times
        # their group's sd (the usual remedy for hierarchical funnels).
        model = reparam(model, config={k: LocScaleReparam(0) for k in WEIGHT_SITES})
    mcmc = MCMC(
        NUTS(model),
        num_warmup=n_warmup,
        num_samples=n_samples,
        num_chains=N_CORES,
        chain_method=chain_method,
        progress_bar=False,
    )
    load = os.getloadavg()[0]
    start = time.perf_counter()
    mcmc.run(
        jax.random.PRNGKey(seed),
        jnp.asarray(Xs),
        jnp.asarray(Ys),
        extra_fields=("diverging", "num_steps"),
    )
    s = {k: np.asarray(v) for k, v in mcmc.get_samples(group_by_chain=True).items()}
    C, S = s["b1"].shape[:2]
    w1, b1 = s["W1"].reshape(C * S, *s["W1"].shape[2:]), s["b1"].reshape(C * S, -1)
    w2, b2 = s["W2"].reshape(C * S, *s["W2"].shape[2:]), s["b2"].reshape(C * S, -1)
    out = np.empty((C * S, len(Xt), layout.n_outputs))
    for i in range(0, C * S, PREDICT_ROWS):
        j = slice(i, i + PREDICT_ROWS)
        hidden = np.tanh(Xt @ w1[j] + b1[j][:, None, :])
        out[j] = hidden @ w2[j] + b2[j][:, None, :]
    draws = out * y_scaler.scale_ + y_scaler.mean_
    seconds = time.perf_counter() - start
    extra = mcmc.get_extra_fields(group_by_chain=True)
    preds = draws.reshape(C, S, -1)
    hyper = np.log(
        np.concatenate([s[k].reshape(C, S, -1) for k in HYPER_SITES], axis=2)
    )
    mean = draws.mean(axis=0)
    return dict(
        name=("NUTS-nc " if noncentred else "NUTS ") + chain_method,
        mse=float(np.mean((y_test.reshape(mean.shape) - mean) ** 2)),
        seconds=seconds,
        ess=_min_ess(preds),
        rhat=float(max(np.max(split_rhat(preds)), np.max(split_rhat(hyper)))),
        own_rhat=float("nan"),
        warned="-",
        detail=f"leapfrog/draw {np.mean(extra['num_steps']):.0f}, "
        f"divergent {int(np.sum(extra['diverging']))}",
        load=load,
    )


# --------------------------------------------------------------------------


def _version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def environment_line(when):
    load = "{:.2f} / {:.2f} / {:.2f}".format(*os.getloadavg())
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?"
    libs = ", ".join(
        f"{n} {_version(n)}"
        for n in ("numpy", "scikit-learn", "jax", "jaxlib", "numpyro")
    )
    return (
        f"[{when}] load {load}; cores {os.cpu_count()} (usable {cores}); "
        f"Python {platform.python_version()}; {libs}; "
        f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}"
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="n=200 problems only, short chains"
    )
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=None,
        help=f"friedman1 training sizes (full mode; default {FULL_SIZES} with "
        "NumPyro, the first alone without it)",
    )
    parser.add_argument(
        "--problems",
        nargs="+",
        choices=PROBLEMS,
        default=PROBLEMS,
        help="which problems to run (default: all)",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=[0],
        help="random_state of ours and PRNG key of NUTS; with several, one row "
        "per seed and the median ESS/s ratio per problem (the smallest ESS "
        "over the test points varies much from seed to seed)",
    )
    parser.add_argument(
        "--samplers",
        nargs="+",
        default=None,
        help="our samplers to run (default: all, the default one first)",
    )
    parser.add_argument(
        "--no-nuts",
        action="store_true",
        help="skip NumPyro even when installed (ours only)",
    )
    parser.add_argument(
        "--noncentred",
        action="store_true",
        help="also run NUTS on the non-centred parameterisation (same posterior)",
    )
    args = parser.parse_args(argv)
    print(environment_line("start"))
    samplers = sampler_options()
    if args.samplers is not None:
        samplers = [s for s in samplers if s in args.samplers]
    run_nuts_too = HAVE_NUMPYRO and not args.no_nuts
    if args.sizes is None:
        # Without its peer the benchmark compares nothing: the smallest size
        # still shows that ours runs, without an hour of unpaired sampling.
        args.sizes = FULL_SIZES if HAVE_NUMPYRO else FULL_SIZES[:1]
    print(
        f"our samplers: {samplers if samplers != [None] else 'one (no sampler param)'}"
    )
    if HAVE_NUMPYRO:
        print(
            f"NumPyro NUTS: {N_CORES} chains x "
            + ("200 warm-up + 200 draws" if args.quick else "1000 warm-up + 1000 draws")
            + f", {jax.local_device_count()} host devices, float64"
        )
    else:
        print("NumPyro not installed (pip install numpyro jax): only ours runs")
    if args.quick:
        print("quick mode: ours with n_samples=100, n_warmup=100 (not the defaults)")

    rows = []
    chosen = problems(args.quick, args.sizes, args.problems)
    for label, n_hidden, X, y, X_test, y_test in chosen:
        print(f"\n{label}: {X.shape[1]} inputs, {n_hidden} hidden", flush=True)
        Y = y.reshape(len(y), -1)
        # The estimator's standardisation is StandardScaler's (biased sd).
        Xs, Ys = StandardScaler().fit_transform(X), StandardScaler().fit_transform(Y)
        assert np.allclose(Standardizer(X).transform(X), Xs)
        assert np.allclose(Standardizer(Y).transform(Y), Ys)
        layout = NetworkLayout(X.shape[1], n_hidden, Y.shape[1], ard=True)
        model_agreement(Xs, Ys, layout, HyperPrior())
        for seed in args.seeds:
            results = []
            for sampler in samplers:
                result = run_ours(
                    X, y, X_test, y_test, n_hidden, sampler, args.quick, seed=seed
                )
                results.append(result)
                print("  ", results[-1], flush=True)
            if run_nuts_too:
                if args.noncentred:
                    result = run_nuts(
                        X,
                        y,
                        X_test,
                        y_test,
                        n_hidden,
                        args.quick,
                        seed=seed,
                        noncentred=True,
                    )
                    results.append(result)
                    print("  ", result, flush=True)
                # The centred NUTS (the same parameterisation as ours) comes
                # last: the ratios are against it.
                results.append(
                    run_nuts(X, y, X_test, y_test, n_hidden, args.quick, seed=seed)
                )
                print("  ", results[-1], flush=True)
            seeded = label if len(args.seeds) == 1 else f"{label} s{seed}"
            rows.append((seeded, label, results))

    print(
        "\nMin bulk ESS over the test predictions (chains kept apart), ESS/s over "
        "fit + test\npredictions; max R-hat: split R-hat over test predictions and "
        "log hyperparameters\n(ours' own rhat_ over training predictions and log "
        "precisions in 'rhat_'); ratios ours / NUTS;\nload: 1-min load average at "
        "the start of the fit"
    )
    header = (
        f"{'problem':18s} {'sampler':16s} {'test MSE':>9s} {'wall s':>7s} "
        f"{'min ESS':>8s} {'ESS/s':>7s} {'R-hat':>6s} {'rhat_':>6s} "
        f"{'warned':>8s} {'ESS/s x':>8s} {'MSE x':>6s} {'load':>5s}  detail"
    )
    print(header)
    print("-" * len(header))
    ratios = {}
    for label, problem, results in rows:
        nuts = results[-1] if results[-1]["name"].startswith("NUTS") else None
        for r in results:
            ess_s = r["ess"] / r["seconds"]
            if nuts is not None and r["name"].startswith("ours"):
                ratio = ess_s / (nuts["ess"] / nuts["seconds"])
                ratios.setdefault((problem, r["name"]), []).append(ratio)
                ratio_ess = f"{ratio:8.2f}"
                ratio_mse = f"{r['mse'] / nuts['mse']:6.3f}"
            else:
                ratio_ess, ratio_mse = f"{'':8s}", f"{'':6s}"
            own = "" if np.isnan(r["own_rhat"]) else f"{r['own_rhat']:.3f}"
            print(
                f"{label:18s} {r['name']:16s} {r['mse']:9.4g} {r['seconds']:7.1f} "
                f"{r['ess']:8.0f} {ess_s:7.2f} {r['rhat']:6.3f} {own:>6s} "
                f"{r['warned']:>8s} {ratio_ess} {ratio_mse} {r['load']:5.2f}  "
                f"{r['detail']}"
            )
    if len(args.seeds) > 1:
        print(f"\nESS/s ours / NUTS over seeds {args.seeds} (same seed on both sides)")
        for (problem, name), values in ratios.items():
            print(
                f"{problem:18s} {name:16s} median {np.median(values):.2f}, "
                f"range {min(values):.2f}-{max(values):.2f}"
            )
    print()
    print(environment_line("end"))


if __name__ == "__main__":
    main()
