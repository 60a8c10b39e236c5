"""Iid delays: ``uniform:A:B``, ``gaussian:MU`` and ``pmf:P0,P1,...``, drawn from one pmf at every step."""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from nqm.delays.registry import STREAM, History, bad, register
from nqm.pmfs import gaussian_pmf, uniform_pmf, validate_pmf


@dataclasses.dataclass(frozen=True)
class Iid:
    """``τ_t ~ pmf`` independently. There are no real workers: per-worker methods see
    ``W = max delay + 1`` round-robin workers, ``k_t = (t − τ_t) mod W`` (the worker that would
    have fetched iteration ``t − τ_t``)."""

    probabilities: tuple  # P(τ = k), k = 0..K, normalised, K = the largest delay
    label: str

    @property
    def workers(self) -> int:
        return len(self.probabilities)

    @property
    def mean(self) -> float:
        return float(np.arange(len(self.probabilities)) @ np.asarray(self.probabilities))

    def pmf(self) -> np.ndarray:
        return np.asarray(self.probabilities)

    def schedule(self, seed: int, steps: int):
        u = np.random.default_rng([STREAM, int(seed)]).random(steps)
        cdf = np.cumsum(self.probabilities)
        delay = np.minimum(np.searchsorted(cdf / cdf[-1], u, side="right"), len(self.probabilities) - 1)
        t = np.arange(steps, dtype=np.int64)
        return delay.astype(np.int32), ((t - delay) % self.workers).astype(np.int32)

    def history(self, delays) -> History:
        # As deep as the largest delay drawn within the budget: no delay ever wraps around it.
        return History(int(np.max(delays, initial=0)) + 1)


def iid(probabilities, label: str | None = None) -> Iid:
    """The iid delay process ``τ_t ~ probabilities`` (:class:`Iid`).

    Args:
      probabilities: the weights of ``P(τ = k)``, ``k = 0…K`` (normalised by :func:`validate_pmf`).
      label: the spec string; default ``pmf:`` followed by the normalised weights.

    Returns:
      The process, drawing ``τ_t`` independently at every step.

    Raises:
      NqmError: the weights are not a valid pmf.

    Examples:
      >>> from nqm import delays
      >>> p = delays.iid([0.5, 0.0, 0.5])
      >>> p.label, p.mean
      ('pmf:0.5,0,0.5', 1.0)
    """
    p = validate_pmf(probabilities)
    return Iid(tuple(float(x) for x in p), label or "pmf:" + ",".join(f"{x:g}" for x in p))


@register("uniform", syntax="uniform:A:B", help="iid, uniform on {A..B}", example="uniform:1:4")
def _parse_uniform(rest: str) -> Iid:
    match = re.fullmatch(r"(\d+):(\d+)", rest)
    if not match:
        raise bad("uniform", rest)
    return iid(uniform_pmf(*map(int, match.groups())), f"uniform:{rest}")


@register("gaussian", syntax="gaussian:MU", help="iid, N(MU, 1) discretised on 1..2MU", example="gaussian:3")
def _parse_gaussian(rest: str) -> Iid:
    if not re.fullmatch(r"\d+", rest):
        raise bad("gaussian", rest)
    return iid(gaussian_pmf(int(rest)), f"gaussian:{rest}")


@register("pmf", syntax="pmf:P0,P1,...", help="iid with P(τ = k) = Pk (normalised)", example="pmf:0.5,0,0.5")
def _parse_pmf(rest: str) -> Iid:
    try:
        weights = [float(x) for x in rest.split(",")]
    except ValueError:
        raise bad("pmf", rest) from None
    return iid(weights, f"pmf:{rest}")
