"""Privacy calibration of the reconstructed mechanism: the zCDP closed form and opacus' RDP accountant.

A machine's transcript under noise cancellation is post-processing of its noisy prefix sums, so it
is ``releases`` composed Gaussian mechanisms of one sensitivity; the naive and DP-FedSGD baselines
release each record once. Orders: opacus' default grid ends at 63, which is below the optimal order
at small epsilon and delta (about 130 at epsilon = 0.25, delta = 1e-7), so the grid is extended.
"""

from __future__ import annotations

import math

from companion.papers.dp_fl_partial import logistic_sco as lr

# opacus' default orders (1.1 ... 63) extended beyond 63 so that the optimum stays inside the grid
EXTRA_ORDERS = (80.0, 100.0, 128.0, 160.0, 200.0, 256.0, 384.0, 512.0, 768.0, 1024.0)


def rdp_orders() -> list[float]:
    """The RDP orders every conversion here searches: opacus' defaults plus EXTRA_ORDERS."""
    from opacus.accountants import RDPAccountant

    return [float(a) for a in RDPAccountant.DEFAULT_ALPHAS] + list(EXTRA_ORDERS)


def zcdp_rho(eps: float, delta: float) -> float:
    """The zCDP budget rho with rho + 2 sqrt(rho log(1/delta)) = eps."""
    log_inv = math.log(1.0 / delta)
    return (math.sqrt(log_inv + eps) - math.sqrt(log_inv)) ** 2


def noise_multiplier(eps: float, delta: float, releases: int, calibration: str = "zcdp") -> float:
    """Gaussian noise multiplier z = sigma/sensitivity for ``releases`` composed releases."""
    if calibration == "zcdp":
        return math.sqrt(releases / (2.0 * zcdp_rho(eps, delta)))
    from opacus.accountants.utils import get_noise_multiplier

    return float(get_noise_multiplier(target_epsilon=eps, target_delta=delta, sample_rate=1.0, steps=releases,
                                      accountant="rdp", epsilon_tolerance=1e-3, alphas=rdp_orders()))


def rdp_spent(z: float, releases: int, delta: float) -> tuple[float, float]:
    """opacus' (epsilon, optimal order) of ``releases`` Gaussian releases with multiplier z (improved conversion)."""
    from opacus.accountants.analysis.rdp import compute_rdp, get_privacy_spent

    orders = rdp_orders()
    rdp = compute_rdp(q=1.0, noise_multiplier=z, steps=releases, orders=orders)
    eps, order = get_privacy_spent(orders=orders, rdp=rdp, delta=delta)
    return float(eps), float(order)


def rdp_epsilon(z: float, releases: int, delta: float) -> float:
    """opacus' epsilon of ``releases`` Gaussian releases with multiplier z."""
    return rdp_spent(z, releases, delta)[0]


def increment_bound(D: float) -> float:
    """S = G + 4 L D, the bound on a mu2 increment alpha_t g(x_t) - alpha_{t-1} g(x_{t-1})."""
    return lr.LIPSCHITZ_G + 4.0 * lr.SMOOTHNESS_L * D
