"""Likelihoods of the TAP / EP core and their Gaussian moment updates.

Each likelihood turns a cavity distribution N(m, v) of a latent field into the
log normaliser ``log Z = log E[p(t | h)]`` and its first two derivatives with
respect to the cavity mean, from which the new Gaussian site follows
(Opper & Winther 1998; NOTES.md section 1).
"""

import numpy as np
from scipy.special import expit, log_ndtr

from .._gaussian import (
    LOG_SQRT_2PI,
    log_noisy_step,
    log_with_label_noise,
    logistic_normal_moments,
    noisy_step_moments,
    norm_pdf_cdf_ratio,
)

__all__ = [
    "NoisyStepLikelihood",
    "PoweredNoisyStep",
    "QuadraturePowered",
    "LogisticLikelihood",
    "LABEL_NOISE_BOUNDS",
    "make_likelihood",
]


# Below this z the curvature of log Phi is taken from its asymptotic series:
# nu + z (nu the inverse Mills ratio, about -z) loses about eps z^2 of its
# relative accuracy to cancellation, the series' first omitted term is
# 50 / z^6; both are about 5e-12 here (tests/test_gaussian.py checks it
# against mpmath).
_CURVATURE_SERIES_BELOW = -150.0


def _log_phi_curvature(z, ratio):
    """``-d^2 log Phi(z) / dz^2 = nu (nu + z)``, ``nu = phi(z) / Phi(z)``.

    It is the share of the cavity variance a noise-free step removes, so it
    lies in ``[0, 1]``.  Far on the wrong side of the step (``z`` very
    negative) ``nu + z`` cancels; there ``1 - 1/z^2 + 6/z^4 - 50/z^6`` is used (the
    truncated normal's variance ratio, expanded).  Without this, a diverging
    iteration with ``|z|`` of 1e11 produced curvatures of -3e5, i.e. negative
    site precisions under a log-concave likelihood.

    >>> import numpy as np
    >>> from sklearn_meanfield._gaussian import norm_pdf_cdf_ratio
    >>> z = np.array([0.0, -1e12])
    >>> _log_phi_curvature(z, norm_pdf_cdf_ratio(z)).round(6).tolist()
    [0.63662, 1.0]
    """
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        direct = ratio * (ratio + z)
        inverse_square = 1.0 / (z * z)
        series = 1.0 - inverse_square * (
            1.0 - inverse_square * (6.0 - 50.0 * inverse_square)
        )
    return np.clip(np.where(z < _CURVATURE_SERIES_BELOW, series, direct), 0.0, 1.0)


class NoisyStepLikelihood:
    """``p(t | h) = kappa + (1 - 2 kappa) Phi(t h / sigma)`` for labels ``t = +-1``.

    ``sigma = 0`` is Opper and Winther's step likelihood with label noise
    ``kappa``; ``sigma = 1, kappa = 0`` is the probit.

    Parameters
    ----------
    label_noise : float in [0, 0.5)
        Probability ``kappa`` that a label was flipped.
    sigma : float >= 0
        Width of the probit (0 for the step).

    References
    ----------
    .. [1] M. Opper and O. Winther, "Mean field methods for classification
       with Gaussian processes", NIPS 11, 1998.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.tap._likelihoods import NoisyStepLikelihood
    >>> probit = NoisyStepLikelihood(label_noise=0.0, sigma=1.0)
    >>> log_z, first, second = probit.moments(
    ...     np.array([1.0]), np.array([0.0]), np.array([3.0]))
    >>> round(float(np.exp(log_z[0])), 3)  # Phi(0) = 1/2
    0.5
    >>> bool(second[0] > 0)  # log-concave: positive site precision
    True
    >>> noisy = NoisyStepLikelihood(label_noise=0.2, sigma=0.0)
    >>> _, _, second = noisy.moments(
    ...     np.array([1.0]), np.array([-3.0]), np.array([1.0]))
    >>> bool(second[0] < 0)  # a label far on the wrong side: negative site
    True
    >>> round(float(probit.predictive_positive(np.array([1.0]), np.array([3.0]))[0]), 4)
    0.6915
    """

    def __init__(self, label_noise=0.0, sigma=0.0):
        self.label_noise = float(label_noise)
        self.sigma = float(sigma)

    def moments(self, t, cavity_mean, cavity_var):
        """Log normaliser and its derivatives with respect to the cavity mean.

        Parameters
        ----------
        t : ndarray of shape (n,)
            Labels in {-1, +1}.
        cavity_mean, cavity_var : ndarray of shape (n,)
            Cavity distribution of the field (``cavity_var > 0``).

        Returns
        -------
        log_z : ndarray
            ``log E_cavity[p(t | h)]``.
        first : ndarray
            ``d log Z / dm`` (``alpha`` of Opper and Winther).
        second : ndarray
            ``-d^2 log Z / dm^2``; negative where label noise makes the
            tilted distribution wider than the cavity.
        """
        s = cavity_var + self.sigma**2
        sqrt_s = np.sqrt(s)
        z = t * cavity_mean / sqrt_s
        log_z, dlog_z = noisy_step_moments(z, self.label_noise)
        first = t * dlog_z / sqrt_s
        if self.label_noise == 0.0:
            second = _log_phi_curvature(z, dlog_z) / s
        else:
            second = first * (first + cavity_mean / s)
        return log_z, first, second

    def label_noise_gradient(self, t, cavity_mean, cavity_var):
        """``d log Z / d kappa`` of each point, at fixed cavities.

        ``Z = kappa + (1 - 2 kappa) Phi(z)``, so the derivative is
        ``(1 - 2 Phi(z)) / Z``: positive for a point on the wrong side of its
        cavity.  At an EP fixed point the evidence is stationary in the sites,
        so the sum over points is the evidence's derivative in ``kappa``.

        Parameters
        ----------
        t : ndarray of shape (n,)
            Labels in {-1, +1}.
        cavity_mean, cavity_var : ndarray of shape (n,)
            Cavity distribution of the field.

        Returns
        -------
        ndarray of shape (n,)

        Examples
        --------
        >>> import numpy as np
        >>> from sklearn_meanfield.tap._likelihoods import NoisyStepLikelihood
        >>> noisy = NoisyStepLikelihood(label_noise=0.1, sigma=1.0)
        >>> grad = noisy.label_noise_gradient(
        ...     np.array([1.0, 1.0]), np.array([0.0, -40.0]), np.array([1.0, 1.0]))
        >>> grad.round(6).tolist()  # Phi(0) = 1/2: no pull; far off: 1 / kappa
        [0.0, 10.0]
        """
        z = t * cavity_mean / np.sqrt(cavity_var + self.sigma**2)
        log_z = log_noisy_step(z, self.label_noise)
        # 1 / Z - 2 Phi(z) / Z, each term from logs so that neither overflows.
        return np.exp(-log_z) - 2.0 * np.exp(log_ndtr(z) - log_z)

    def predictive_positive(self, mean, var):
        """``p(t = +1)`` for a Gaussian field ``N(mean, var)``.

        At zero variance (a noise-free step at a point whose site is a hard
        constraint, or a degenerate fit) the predictive is the step itself:
        by the mean's sign, 1/2 on the step.
        """
        spread = var + self.sigma**2
        with np.errstate(divide="ignore", invalid="ignore"):
            z = mean / np.sqrt(spread)
        on_step = np.where(mean > 0, np.inf, np.where(mean < 0, -np.inf, 0.0))
        z = np.where(spread > 0, z, on_step)
        return np.exp(log_noisy_step(z, self.label_noise))

    @property
    def powered_in_closed_form(self):
        """Whether :meth:`powered` is exact (the step) or a quadrature."""
        return self.sigma == 0.0

    def powered(self, exponent):
        """The likelihood raised to ``exponent`` (per site).

        The step (``sigma = 0``) has a closed form: a noisy step raised to a
        power is again a noisy step times a constant
        (:class:`PoweredNoisyStep`); the probit is integrated by quadrature
        (:class:`QuadraturePowered`).  The EP core uses it for sites of
        weight below one (see
        :func:`~sklearn_meanfield.tap._ep.expectation_propagation`).

        Parameters
        ----------
        exponent : ndarray of shape (n,)
            Exponents in ``(0, 1]``.

        Returns
        -------
        PoweredNoisyStep or QuadraturePowered
        """
        if self.sigma != 0.0:
            return QuadraturePowered(self, exponent)
        return PoweredNoisyStep(self.label_noise, exponent)

    def _log_value(self, x):
        """``log Phi(x / sigma)``: the log likelihood without label noise, of
        the signed field ``x``."""
        return log_ndtr(x / self.sigma)

    def _log_slopes(self, x):
        """The first two derivatives of :meth:`_log_value` in ``x``."""
        z = x / self.sigma
        ratio = norm_pdf_cdf_ratio(z)
        return ratio / self.sigma, -_log_phi_curvature(z, ratio) / self.sigma**2


class PoweredNoisyStep:
    """``p(t | h)**e`` for the noisy step ``p = kappa + (1 - 2 kappa) Theta(t h)``.

    ``(k + (1 - 2k) Theta)**e = k**e + ((1 - k)**e - k**e) Theta``, i.e.
    ``c`` times a noisy step with label noise ``k_e = k**e / c``, ``c = k**e +
    (1 - k)**e``; without label noise ``Theta**e = Theta``.  The exponent may
    differ from site to site.

    Parameters
    ----------
    label_noise : float in [0, 0.5)
        The label noise ``kappa`` of the likelihood before the power.
    exponent : ndarray of shape (n,)
        The power of each site's likelihood, in ``(0, 1]``.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy.stats import norm
    >>> from sklearn_meanfield.tap._likelihoods import PoweredNoisyStep
    >>> kappa, e, m, v = 0.1, np.array([0.5]), np.array([0.3]), np.array([2.0])
    >>> log_z, _, _ = PoweredNoisyStep(kappa, e).moments(np.array([1.0]), m, v)
    >>> p = norm.cdf(m / np.sqrt(v))  # E[(kappa + (1 - 2 kappa) Theta)**e]
    >>> exact = kappa**e * (1 - p) + (1 - kappa) ** e * p
    >>> bool(np.allclose(np.exp(log_z), exact))
    True
    """

    def __init__(self, label_noise, exponent):
        self.label_noise = float(label_noise)
        self.exponent = np.asarray(exponent, dtype=float)
        if self.label_noise == 0.0:
            self._noise = np.zeros_like(self.exponent)
            self._log_c = np.zeros_like(self.exponent)
        else:
            log_k = self.exponent * np.log(self.label_noise)
            log_1k = self.exponent * np.log1p(-self.label_noise)
            self._log_c = np.logaddexp(log_k, log_1k)
            self._noise = np.exp(log_k - self._log_c)

    def moments(self, t, cavity_mean, cavity_var):
        """Same contract as :meth:`NoisyStepLikelihood.moments`."""
        sqrt_v = np.sqrt(cavity_var)
        z = t * cavity_mean / sqrt_v
        noise = self._noise
        log_phi = log_ndtr(z)
        with np.errstate(divide="ignore"):
            log_noise = np.log(noise)
        log_step = np.logaddexp(log_noise, np.log1p(-2.0 * noise) + log_phi)
        # d log(k + (1 - 2k) Phi(z)) / dz = (1 - 2k) phi(z) / (k + (1 - 2k) Phi(z))
        log_pdf = -0.5 * z * z - LOG_SQRT_2PI
        dlog_z = np.exp(np.log1p(-2.0 * noise) + log_pdf - log_step)
        first = t * dlog_z / sqrt_v
        noisy = first * (first + cavity_mean / cavity_var)
        clean = _log_phi_curvature(z, dlog_z) / cavity_var
        second = np.where(noise > 0, noisy, clean)
        return log_step + self._log_c, first, second

    def label_noise_gradient(self, t, cavity_mean, cavity_var):
        """``d log E[p**e] / d kappa`` of each point, at fixed cavities.

        ``E[p**e] = k**e (1 - Phi) + (1 - k)**e Phi``, so the derivative is
        ``e (k**(e-1) (1 - Phi) - (1 - k)**(e-1) Phi) / E[p**e]``.
        """
        k, e = self.label_noise, self.exponent
        z = t * cavity_mean / np.sqrt(cavity_var)
        log_phi, log_phi_c = log_ndtr(z), log_ndtr(-z)
        log_z = np.logaddexp(e * np.log(k) + log_phi_c, e * np.log1p(-k) + log_phi)
        return e * (
            np.exp((e - 1) * np.log(k) + log_phi_c - log_z)
            - np.exp((e - 1) * np.log1p(-k) + log_phi - log_z)
        )


class LogisticLikelihood:
    """``p(t | h) = kappa + (1 - 2 kappa) sigma(t h)``, ``sigma`` the logistic function.

    With ``kappa = 0`` this is the likelihood of scikit-learn's
    :class:`~sklearn.gaussian_process.GaussianProcessClassifier`.  Its tails
    are exponential rather than Gaussian, so a mislabelled point far on the
    wrong side costs a log-likelihood linear in its field (quadratic for the
    probit).  The cavity averages have no closed form; they come from
    :func:`~sklearn_meanfield._gaussian.logistic_normal_moments` (about 1e-9
    accurate).

    Parameters
    ----------
    label_noise : float in [0, 0.5)
        Probability ``kappa`` that a label was flipped.

    References
    ----------
    .. [1] H. Nickisch and C. E. Rasmussen, "Approximations for binary
       Gaussian process classification", JMLR 9 (2008).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.tap._likelihoods import LogisticLikelihood
    >>> logistic = LogisticLikelihood()
    >>> log_z, first, second = logistic.moments(
    ...     np.array([1.0]), np.array([0.0]), np.array([1e-300]))
    >>> [round(float(x[0]), 9) for x in (np.exp(log_z), first, second)]
    [0.5, 0.5, 0.25]
    >>> noisy = LogisticLikelihood(label_noise=0.2)
    >>> _, _, second = noisy.moments(
    ...     np.array([1.0]), np.array([-6.0]), np.array([1.0]))
    >>> bool(second[0] < 0)  # a label far on the wrong side: negative site
    True
    """

    def __init__(self, label_noise=0.0):
        self.label_noise = float(label_noise)

    def _logistic_part(self, t, cavity_mean, cavity_var):
        """``log E[sigma(t h)]`` and the ``kappa``-mixture's log normaliser."""
        log_z_logistic, score, curvature = logistic_normal_moments(
            t * cavity_mean, cavity_var
        )
        log_z = log_with_label_noise(log_z_logistic, self.label_noise)
        return log_z_logistic, log_z, score, curvature

    def moments(self, t, cavity_mean, cavity_var):
        """Same contract as :meth:`NoisyStepLikelihood.moments`."""
        log_z_logistic, log_z, score, curvature = self._logistic_part(
            t, cavity_mean, cavity_var
        )
        if self.label_noise == 0.0:
            return log_z, t * score, curvature
        # Z = kappa + (1 - 2 kappa) Z_l; rho is the logistic part's share.
        rho = np.exp(np.log1p(-2.0 * self.label_noise) + log_z_logistic - log_z)
        first = rho * score
        # -(log Z)'' = rho (-(log Z_l)'') - rho (1 - rho) ((log Z_l)')^2
        second = rho * curvature - rho * (1.0 - rho) * score * score
        return log_z, t * first, second

    def label_noise_gradient(self, t, cavity_mean, cavity_var):
        """``d log Z / d kappa = (1 - 2 Z_l) / Z`` of each point, at fixed
        cavities (see :meth:`NoisyStepLikelihood.label_noise_gradient`)."""
        log_z_logistic, log_z, _, _ = self._logistic_part(t, cavity_mean, cavity_var)
        return np.exp(-log_z) - 2.0 * np.exp(log_z_logistic - log_z)

    def predictive_positive(self, mean, var):
        """``p(t = +1)`` for a Gaussian field ``N(mean, var)``."""
        _, log_z, _, _ = self._logistic_part(np.ones_like(mean), mean, var)
        return np.exp(log_z)

    def powered(self, exponent):
        """The likelihood raised to ``exponent`` (per site), by quadrature
        (:class:`QuadraturePowered`)."""
        return QuadraturePowered(self, exponent)

    def _log_value(self, x):
        """``log sigma(x)``, of the signed field ``x``."""
        return -np.logaddexp(0.0, -x)

    def _log_slopes(self, x):
        """The first two derivatives of :meth:`_log_value` in ``x``."""
        return expit(-x), -expit(x) * expit(-x)


# Trapezoid rule of QuadraturePowered, on a uniform grid in ``u`` where the
# cavity-unit variable is ``xi = focus + scale * sinh(u)``: nodes ``scale *
# step`` apart where the likelihood turns (its width over the cavity's sd,
# at most 1) and ``distance * step`` apart away from it, so that both the
# likelihood's turn and the cavity's Gaussian are resolved with a few hundred
# nodes however wide the cavity.  In ``u`` the Gaussian at distance D from
# the focus is analytic within about 1/D of the real axis: the rule's error
# is of order exp(-2 pi^2 / (step D)^2), below 1e-13 for D <= 10.
_QUADRATURE_STEP = 0.08
# Half-width of the grid around the mode (noise-free likelihoods, whose
# tilted log density is at least 1-strongly concave in these units): the mass
# beyond it is below exp(-40) of the total.
_QUADRATURE_HALF_WIDTH = 9.0


# Accuracy of the mode that centres a quadrature grid (in cavity standard
# deviations): the grid reaches 9 units either side, so a mode this far off
# moves no mass out of it.
_MODE_TOL = 1e-6


class QuadraturePowered:
    """``p(t | h)**e`` for a probit or logistic likelihood, by quadrature.

    Sites of weight below one are plain EP on ``p**w`` (see
    :func:`~sklearn_meanfield.tap._ep.expectation_propagation`), whose
    tilted distribution ``N(h; m, v) p(t h)**e`` has no closed form for these
    likelihoods.  In the cavity's standard units ``xi = (t h - t m) /
    sqrt(v)`` its log density ``-xi**2 / 2 + e log p`` is smooth, but
    turns within the likelihood's width over ``sqrt(v)``, which is narrow
    for a wide cavity.  The trapezoid rule runs on a uniform grid in ``u``,
    ``xi = focus + scale * sinh(u)``, dense where the likelihood turns and
    sparser away from it, and converges geometrically.  The window is
    centred on the mode found by safeguarded Newton when the likelihood has
    no label noise (the log density is then 1-strongly
    concave: 9 units either side hold all but ``exp(-40)`` of the mass), and
    on the cavity mean with label noise ``kappa`` (``p >= kappa``: the mass
    lies within ``sqrt(2 (40 + e |log kappa|))`` units).  Sites with ``e =
    1`` use the likelihood's own closed form.

    Parameters
    ----------
    likelihood : NoisyStepLikelihood (sigma > 0) or LogisticLikelihood
        The likelihood before the power.
    exponent : ndarray of shape (n,)
        The power of each site's likelihood, in ``(0, 1]``.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy.integrate import quad
    >>> from scipy.stats import norm
    >>> from sklearn_meanfield.tap._likelihoods import (
    ...     NoisyStepLikelihood, QuadraturePowered)
    >>> e, m, v = 0.4, -1.5, 9.0
    >>> powered = QuadraturePowered(NoisyStepLikelihood(0.0, 1.0), np.array([e]))
    >>> log_z, _, _ = powered.moments(np.array([1.0]), np.array([m]), np.array([v]))
    >>> exact = quad(lambda h: norm.pdf(h, m, 3.0) * norm.cdf(h) ** e, -40, 40)[0]
    >>> bool(abs(np.exp(log_z[0]) / exact - 1) < 1e-10)
    True
    """

    def __init__(self, likelihood, exponent):
        self.likelihood = likelihood
        self.label_noise = likelihood.label_noise
        self.exponent = np.asarray(exponent, dtype=float)
        self._width = getattr(likelihood, "sigma", 1.0)

    def _grid(self, x_mean, v, e):
        """Nodes (in cavity units) of every site, and their weights."""
        sd = np.sqrt(v)
        kappa = self.label_noise
        if kappa > 0.0:
            center = np.zeros_like(x_mean)
            half = np.sqrt(2.0 * (40.0 + e * -np.log(kappa)))
        else:
            center = self._mode(x_mean, sd, e)
            half = _QUADRATURE_HALF_WIDTH
        low, high = center - half, center + half
        # Where the likelihood turns (its argument zero), kept in the window,
        # and how sharply, in cavity units.
        focus = np.clip(-x_mean / sd, low, high)
        scale = np.minimum(self._width / sd, 1.0)
        u_low = np.arcsinh((low - focus) / scale)
        u_high = np.arcsinh((high - focus) / scale)
        n_nodes = int(np.max(np.ceil((u_high - u_low) / _QUADRATURE_STEP))) + 1
        u_step = (u_high - u_low) / (n_nodes - 1)
        exp_u = np.exp(u_low[:, None] + u_step[:, None] * np.arange(n_nodes)[None, :])
        inverse = 1.0 / exp_u
        nodes = focus[:, None] + (0.5 * scale)[:, None] * (exp_u - inverse)
        weights = (0.5 * scale * u_step)[:, None] * (exp_u + inverse)
        return nodes, weights

    def _mode(self, x_mean, sd, e):
        """The mode of ``-xi**2 / 2 + e log p(x_mean + sd xi)``, noise-free.

        Its derivative decreases (slope at most -1) from ``e sd l'(x_mean)``
        at 0, so the mode lies in ``[0, e sd l'(x_mean)]``: Newton steps,
        kept inside the shrinking bracket by bisection.
        """
        slope, _ = self.likelihood._log_slopes(x_mean)
        low, high = np.zeros_like(x_mean), e * sd * slope
        xi = 0.5 * high
        for _ in range(100):
            d1, d2 = self.likelihood._log_slopes(x_mean + sd * xi)
            gradient = -xi + e * sd * d1
            low = np.where(gradient > 0, xi, low)
            high = np.where(gradient > 0, high, xi)
            newton = xi - gradient / (-1.0 + e * sd * sd * d2)
            inside = (newton > low) & (newton < high)
            new = np.where(inside, newton, 0.5 * (low + high))
            # The mode only centres the grid, whose half-width is 9 units.
            if np.all(np.abs(new - xi) <= _MODE_TOL):
                return new
            xi = new
        return xi

    def _tilted(self, t, cavity_mean, cavity_var, e):
        """Log normaliser, mean and variance of the tilted ``xi``, and the
        normalised weights and nodes."""
        x_mean = t * cavity_mean
        sd = np.sqrt(cavity_var)
        nodes, node_weights = self._grid(x_mean, cavity_var, e)
        log_base = self.likelihood._log_value(x_mean[:, None] + sd[:, None] * nodes)
        log_p = log_with_label_noise(log_base, self.label_noise)
        log_f = -0.5 * nodes * nodes + e[:, None] * log_p
        peak = np.max(log_f, axis=1, keepdims=True)
        f = np.exp(log_f - peak) * node_weights
        total = np.sum(f, axis=1)
        log_z = np.log(total) + peak[:, 0] - LOG_SQRT_2PI
        weights = f / total[:, None]
        mean = np.sum(weights * nodes, axis=1)
        var = np.sum(weights * (nodes - mean[:, None]) ** 2, axis=1)
        return log_z, mean, var, weights, nodes, log_base, log_p

    def moments(self, t, cavity_mean, cavity_var):
        """Same contract as :meth:`NoisyStepLikelihood.moments`."""
        log_z, first, second = self.likelihood.moments(t, cavity_mean, cavity_var)
        low = self.exponent < 1.0
        if np.any(low):
            sd = np.sqrt(cavity_var[low])
            z, mean, var, *_ = self._tilted(
                t[low], cavity_mean[low], cavity_var[low], self.exponent[low]
            )
            log_z = log_z.copy()
            first, second = first.copy(), second.copy()
            log_z[low] = z
            # d log Z / dm = E[xi] / sd; -d^2 log Z / dm^2 = (1 - Var xi) / v.
            first[low] = t[low] * mean / sd
            second[low] = (1.0 - var) / cavity_var[low]
        return log_z, first, second

    def label_noise_gradient(self, t, cavity_mean, cavity_var):
        """``d log E[p**e] / d kappa = e E_tilted[(1 - 2 p0) / p]`` with ``p0``
        the likelihood without label noise, at fixed cavities."""
        gradient = self.likelihood.label_noise_gradient(t, cavity_mean, cavity_var)
        low = self.exponent < 1.0
        if np.any(low):
            e = self.exponent[low]
            _, _, _, weights, _, log_base, log_p = self._tilted(
                t[low], cavity_mean[low], cavity_var[low], e
            )
            ratio = np.exp(-log_p) - 2.0 * np.exp(log_base - log_p)
            gradient = gradient.copy()
            gradient[low] = e * np.sum(weights * ratio, axis=1)
        return gradient


# ``label_noise="auto"`` (both classifiers) searches the label noise on a log
# scale within these bounds: at the lower end a probability reaches 0.9999,
# at the upper end the labels are nearly random.
LABEL_NOISE_BOUNDS = (1e-4, 0.4)


def make_likelihood(name, label_noise):
    """The likelihood object for the estimators' ``likelihood`` parameter.

    Parameters
    ----------
    name : {"step", "probit", "logistic"}
    label_noise : float in [0, 0.5)

    Returns
    -------
    NoisyStepLikelihood or LogisticLikelihood

    Examples
    --------
    >>> from sklearn_meanfield.tap._likelihoods import make_likelihood
    >>> likelihood = make_likelihood("step", 0.1)
    >>> likelihood.sigma, likelihood.label_noise
    (0.0, 0.1)
    """
    if name == "step":
        return NoisyStepLikelihood(label_noise, sigma=0.0)
    if name == "probit":
        return NoisyStepLikelihood(label_noise, sigma=1.0)
    if name == "logistic":
        return LogisticLikelihood(label_noise)
    raise ValueError(
        f"Unknown likelihood {name!r}; use 'step', 'probit' or 'logistic'."
    )
