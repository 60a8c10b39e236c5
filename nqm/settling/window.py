"""The continued test's run: a reached cell steps on past its first passage T and is judged by what
its loss does there, as the engine's stop rule :class:`Window` (its state travels with the cell).

Two looks, the cheap one first:

* the **look**, at ``H₁ = T + max(T/4, span) + 250`` (``span``: 32 × the optimizer's memory, its
  moment estimates' forgetting time, where it keeps some): over the second half of what follows T, 32 samples and the largest loss at
  every step. A noiseless run whose log-loss clearly falls there (its least-squares slope below
  zero by more than three standard errors) and whose largest loss stays below half the target, or
  a noisy one that does not grow and whose level (the mean of eight batch means plus three of
  their standard errors) lies below half the target, is **settled at the look**: it stops there;
* the **window**, otherwise, at ``H = 2^(k+2) + 1000`` for ``S = max(T, span)`` in ``[2^k, 2^(k+1))``
  (at least ``2S + 1000``): 256 samples over H, those of the second half of what follows T kept, and
  the largest loss at every step there; the host judges it (:func:`stays`).

A cell stops ``UNDECIDED`` where the next look would pass its work limit (the last step it may
reach: ``work_limit × max_steps``), ``TRANSIENT`` if it diverges on the way. The probe of a floor
(:mod:`nqm.settling.floor`) runs the same rule with a fixed horizon instead.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from nqm.engine.stop import StopRule
from nqm.status import CONTINUE, CONTINUING, REACHED, TRANSIENT, UNDECIDED, WINDOW_POINTS, slope, stays_below
from nqm.validate import MAX_STEPS

# A cell that reached the target at T steps on to at least 2·T + CONTINUE, its loss sampled every
# horizon // WINDOW_POINTS steps (nqm.status), and past MEMORIES × its optimizer's memory (a moment
# estimate's forgetting time).
MEMORIES = 32
WINDOW_SLOTS = 168  # the most samples a window holds (at T = 2; every T is checked in the tests)
LOOK_SHARE = 4  # the look comes max(T / LOOK_SHARE, span) + LOOK_EXTRA steps after T
LOOK_EXTRA = 250
LOOK_POINTS = 64  # samples over what follows T up to the look; its second half is read
LOOK_SLOTS = 34  # the most the look's second half holds
LOOK_ERRORS = 3.0  # standard errors a look needs: the slope's (noiseless decay) or the level's (noise)
LOOK_MARGIN = 1.0  # ... and a level below this fraction of the target
BATCHES = 8  # batch means of a noisy level


class State(NamedTuple):
    """The rule's state of one cell."""

    span: object  # int32: the least span of its run past T (MEMORIES × its optimizer's memory)
    limit: object  # int32: the last step it may reach
    going: object  # bool: it steps on past T (False: its verdict needs no run, it stops at T)
    noisy: object  # bool: σ > 0
    window: object  # (WINDOW_SLOTS,) the window's losses, NaN until sampled
    peak: object  # the largest loss at any step of the window's second half (0 before)
    look: object  # (LOOK_SLOTS,) the look's losses, NaN until sampled
    look_peak: object  # the largest loss at any step of the look's second half
    early: object  # int8: 1 where the look settled it
    horizon: object  # int32: the window's last step (0 until the cell's first step past T)
    look_at: object  # int32: the look's step
    next: object  # int32: the next step at which the rule acts for it (a sample, the look, the end)


@dataclasses.dataclass(frozen=True)
class Window(StopRule):
    """The continued test's stop rule (module docstring). ``probe``: a floor probe's run, whose
    cells' ``spans`` are their least horizons h: a fixed horizon ``max(h, PROBE_FIRSTS · T)``, no
    look. ``longest`` (the longest span of any cell, which sets the run's horizon) and the per-cell
    arrays — ``spans``, ``limits``, ``going`` and ``noisy`` — feed its horizon and state only, not
    its compiled kernel: a probe run again longer is the same program."""

    probe: bool = False
    longest: int = dataclasses.field(default=0, compare=False)  # the longest span of any cell: the run's horizon
    spans: np.ndarray = dataclasses.field(default=None, compare=False, repr=False)
    limits: np.ndarray = dataclasses.field(default=None, compare=False, repr=False)
    going: np.ndarray = dataclasses.field(default=None, compare=False, repr=False)
    noisy: np.ndarray = dataclasses.field(default=None, compare=False, repr=False)
    continues = True
    label = "settling"

    def horizon(self, budget: int) -> int:
        last = int(np.max(self.limits, initial=budget))
        if self.probe:
            return max(int(budget), min(last, max(self.longest, PROBE_FIRSTS * int(budget))))
        return max(int(budget), min(last, int(horizons(budget, self.longest)[0])))

    def init(self, count: int, dtype) -> State:
        dtype = np.dtype(dtype)
        return State(np.broadcast_to(np.asarray(self.spans, np.int32), (count,)).copy(),
                     np.broadcast_to(np.asarray(self.limits, np.int32), (count,)).copy(),
                     np.broadcast_to(np.asarray(self.going, bool), (count,)).copy(),
                     np.broadcast_to(np.asarray(self.noisy, bool), (count,)).copy(),
                     np.full((count, WINDOW_SLOTS), np.nan, dtype), np.zeros(count, dtype),
                     np.full((count, LOOK_SLOTS), np.nan, dtype), np.zeros(count, dtype), np.zeros(count, np.int8),
                     np.zeros(count, np.int32), np.zeros(count, np.int32), np.zeros(count, np.int32))

    def update(self, u, steps, status, loss, diverged, target, state: State):
        # Every step: the peaks of the look's and the window's second halves, and divergence. The rest
        # — the schedule, the samples, the look, the end — only at the steps a cell of the block needs
        # it (its ``next``): integer divisions at every step would cost as much as the step at small N.
        continuing = status == CONTINUING
        going = continuing & state.going
        state = state._replace(look_peak=_peak(state.look_peak, going, u, loss, steps, state.look_at),
                               peak=_peak(state.peak, going, u, loss, steps, state.horizon))
        event = continuing & (u >= state.next)
        ends, state = jax.lax.cond(jnp.any(event), functools.partial(self._act, u, steps, loss, target),
                                   lambda event, state: (event.astype(jnp.int8) * 0 + CONTINUING, state), event, state)
        ends = jnp.where(state.going & diverged, TRANSIENT, ends)
        return ends.astype(status.dtype), state

    def _act(self, u, steps, loss, target, event, state: State):
        """What the rule does at a step where some of the block's cells need it (``event``): their
        schedule on their first step past T, their samples, the look, the end, and their next step."""
        going = event & state.going
        if self.probe:
            horizon, stride, n0, n1 = probe_horizons(steps, state.span)
            look_at, look_stride, m0, m1 = horizon, jnp.ones_like(horizon), horizon + 1, horizon
        else:
            horizon, stride, n0, n1 = horizons(steps, state.span)
            after, look_stride, m0, m1 = looks(steps, state.span)
            look_at = steps + after
        state = state._replace(horizon=jnp.where(event, horizon, state.horizon),
                               look_at=jnp.where(event, look_at, state.look_at))
        state = _sampled(state, "look", going, u, loss, look_stride, m0, m1)
        state = _sampled(state, "window", going, u, loss, stride, n0, n1)
        looking = going & (u == look_at)  # judged only at a step where some cell of the block is at its look
        settled_early = jax.lax.cond(jnp.any(looking), lambda: looking & _look_stays(state, m1 - m0 + 1, target),
                                     lambda: jnp.zeros_like(looking))
        # What comes next: the look, or the window's end; a cell that may not reach it stops undecided.
        next_end = jnp.where(u < look_at, look_at, horizon)
        ends = jnp.where(~state.going | settled_early | (u >= horizon), REACHED,
                         jnp.where(next_end > state.limit, UNDECIDED, CONTINUING))
        ends = jnp.where(event, ends, CONTINUING).astype(jnp.int8)
        sample = jnp.where(u < look_at, _next_sample(u, look_stride, m0, m1), horizon)
        sample = jnp.minimum(sample, _next_sample(u, stride, n0, n1))
        following = jnp.minimum(sample, jnp.where(u < look_at, look_at, horizon))
        state = state._replace(early=jnp.where(settled_early, 1, state.early).astype(state.early.dtype),
                               next=jnp.where(event, following, state.next))
        return ends, state


def _peak(peak, going, u, loss, first, end):
    """``peak`` following the largest loss at every step of the second half of what follows the
    first passage ``first`` up to ``end`` (0 until scheduled: no step is inside)."""
    inside = going & (2 * u > first + end) & (u <= end)
    return jnp.where(inside, jnp.maximum(peak, loss), peak)


def _next_sample(u, stride, n0, n1):
    """The first step after ``u`` at which a sample n·stride, n0 ≤ n ≤ n1, is due (a large number
    where none is left)."""
    n = jnp.maximum(u // stride + 1, n0)
    return jnp.where(n <= n1, n * stride, jnp.iinfo(jnp.int32).max)


PROBE_FIRSTS = 8  # a floor probe runs at least this many times its own first passage


def _sampled(state: State, samples: str, going, u, loss, stride, n0, n1) -> State:
    """``state`` with the loss at step ``u`` sampled into ``samples`` where due (steps n·stride,
    n0 ≤ n ≤ n1)."""
    n = u // stride
    due = going & (u % stride == 0) & (n >= n0) & (n <= n1)
    held = getattr(state, samples)
    rows, slot = jnp.arange(due.size), jnp.clip(n - n0, 0, held.shape[1] - 1)
    return state._replace(**{samples: held.at[rows, slot].set(jnp.where(due, loss, held[rows, slot]))})


def _look_stays(state: State, count, target):
    """Per cell, whether its look settles it (module docstring), from its samples on the device."""
    look = state.look
    slots = jnp.arange(LOOK_SLOTS)
    valid = slots[None, :] < count[:, None]
    n = jnp.maximum(count, 3).astype(look.dtype)
    finite = jnp.all(jnp.isfinite(look) | ~valid, axis=1)
    y = jnp.where(valid, jnp.log(jnp.maximum(jnp.where(valid, look, 1), jnp.finfo(look.dtype).tiny)), 0)
    x = jnp.where(valid, slots[None, :].astype(look.dtype), 0)
    dx = jnp.where(valid, x - (x.sum(1) / n)[:, None], 0)
    dy = jnp.where(valid, y - (y.sum(1) / n)[:, None], 0)
    sxx = (dx * dx).sum(1)
    rate = (dx * dy).sum(1) / sxx
    error = jnp.sqrt(((dy - rate[:, None] * dx) ** 2).sum(1) / (n - 2) / sxx)
    # A loss rounded to 0 at the look's end has decayed past the run's precision (as the window reads it).
    last = jnp.take_along_axis(look, jnp.clip(count - 1, 0, LOOK_SLOTS - 1)[:, None], axis=1)[:, 0]
    decays = finite & ((rate + LOOK_ERRORS * error < 0) | (last == 0)) & (state.look_peak < LOOK_MARGIN * target)
    batch = jnp.where(valid, slots[None, :] * BATCHES // jnp.maximum(count, 1)[:, None], BATCHES)
    members = jax.nn.one_hot(batch, BATCHES, dtype=look.dtype)  # (cells, slots, batches); invalid: none
    means = jnp.einsum("cs,csb->cb", jnp.where(valid, look, 0), members) / jnp.maximum(members.sum(1), 1)
    level = means.mean(1) + LOOK_ERRORS * means.std(1, ddof=1) / np.sqrt(BATCHES)
    level_ok = finite & ~(rate - 2 * error > 0) & (level < LOOK_MARGIN * target)
    return jnp.where(state.noisy, level_ok, decays) & (count >= 8)


def horizons(first, span=0):
    """The window of a cell that first reached the target at step ``first`` = T ≥ 1 (numpy or jax
    integers), whose optimizer asks for a run of at least ``span`` steps past it
    (:func:`settling_span`): ``(horizon, stride, n0, n1)``. With ``S = max(T, span)``, the horizon H
    is 2^(k+2) + CONTINUE for S in [2^k, 2^(k+1)) — at least 2S + CONTINUE, the same for a whole
    octave — capped at the largest budget; the loss is sampled at steps n·stride, ``stride =
    max(1, H // WINDOW_POINTS)``, and the window is n0 ≤ n ≤ n1: the steps in ((T + H)/2, H], the
    second half of what follows T."""
    if isinstance(first, jax.Array):
        scale = jnp.maximum(first.astype(jnp.int32), jnp.asarray(span, jnp.int32))
        bits = 32 - jax.lax.clz(scale)  # k + 1
        horizon = jnp.minimum(jnp.left_shift(jnp.int32(1), bits + 1) + CONTINUE, MAX_STEPS)
        stride = jnp.maximum(1, horizon // WINDOW_POINTS)
    else:
        first = np.asarray(first, np.int64)
        scale = np.maximum(np.maximum(first, np.asarray(span, np.int64)), 1)
        horizon = np.minimum(2 ** (np.frexp(scale)[1] + 1) + CONTINUE, MAX_STEPS)
        stride = np.maximum(1, horizon // WINDOW_POINTS)
    return horizon, stride, (first + horizon) // (2 * stride) + 1, horizon // stride


def looks(first, span=0):
    """The look of a cell that first reached the target at ``first`` = T (numpy or jax integers):
    ``(after, stride, m0, m1)``: it comes ``after`` steps past T, at ``T + max(T // LOOK_SHARE,
    span) + LOOK_EXTRA`` (a method with moment estimates waits its whole span out: Adam's bursts come
    up to tens of its memories past T); the loss is sampled at steps m·stride, ``stride = max(1, after //
    LOOK_POINTS)``, for m0 ≤ m ≤ m1: the steps in ((T + H₁)/2, H₁], the second half of what
    follows T up to the look H₁."""
    xp = jnp if isinstance(first, jax.Array) else np
    first = first.astype(jnp.int32) if xp is jnp else np.asarray(first, np.int64)
    after = xp.maximum(first // LOOK_SHARE, xp.asarray(span, first.dtype)) + LOOK_EXTRA
    stride = -(-after // LOOK_POINTS)  # at most LOOK_POINTS samples up to the look
    at = first + after
    return after, stride, (first + at) // (2 * stride) + 1, at // stride


def probe_horizons(first, probe: int):
    """The window of a floor probe's cell that first reached the target at ``first``: its horizon
    ``max(probe, PROBE_FIRSTS · T)`` (capped at the largest budget), sampled as :func:`horizons`
    samples: ``(horizon, stride, n0, n1)``."""
    xp = jnp if isinstance(first, jax.Array) else np
    first = first if xp is jnp else np.asarray(first, np.int64)
    horizon = xp.minimum(xp.maximum(probe, PROBE_FIRSTS * first), MAX_STEPS)
    stride = xp.maximum(1, horizon // WINDOW_POINTS)
    return horizon, stride, (first + horizon) // (2 * stride) + 1, horizon // stride


def settling_span(optimizer, hyper: dict) -> np.ndarray:
    """Per cell, the least span of its run past T: :data:`MEMORIES` × the optimizer's memory
    (:attr:`nqm.optimizers.Optimizer.memory`: the steps its moment estimates take to forget), so
    that the window sees what the method does once the state of its first passage is forgotten
    (Adam's bursts come when its second moment has decayed with the gradient); 0 for a method
    without one.

    Args:
      optimizer: the configured optimizer.
      hyper: per-cell hyperparameter arrays by name.

    Returns:
      int64 steps per cell, at most the largest budget.
    """
    size = np.broadcast(*hyper.values()).size if hyper else 1
    if optimizer.memory is None:
        return np.zeros(size, np.int64)
    memory = np.broadcast_to(np.asarray(optimizer.memory(hyper), np.float64), (size,))
    return np.minimum(np.ceil(MEMORIES * memory), MAX_STEPS).astype(np.int64)


def stays(noise, first, state: State, target: float) -> tuple[np.ndarray, np.ndarray]:
    """Whether each cell that ran its window through stays, and its loss's decay rate there, from
    what its state holds: settled at the look (its look's decay rate), or judged over the window
    (:func:`nqm.status.stays_below`: the loss does not grow and its level is below the target —
    without noise its largest value at any step, with noise its mean plus two standard errors).

    Args:
      noise: the cells' σ.
      first: their first passages T.
      state: their rule states where they stopped (:class:`State`, host arrays).
      target: the target.

    Returns:
      ``(stays, rate)``: per cell, a bool and its decay rate per step (minus the slope of ``log L``
      where the loss decays beyond two standard errors; 0 where it does not; ∞ where it reached 0).
    """
    first = np.asarray(first, np.int64)
    early = np.asarray(state.early) == 1
    result, rate = np.zeros(first.size, bool), np.zeros(first.size)
    _, stride, n0, n1 = horizons(first, np.asarray(state.span))
    _, look_stride, m0, m1 = looks(first, np.asarray(state.span))
    for i in range(first.size):
        if early[i]:
            n = np.arange(m0[i], m1[i] + 1)
            result[i], rate[i] = True, _decay(look_stride[i] * n, np.asarray(state.look[i, :n.size], np.float64))
            continue
        n = np.arange(n0[i], n1[i] + 1)
        losses = np.asarray(state.window[i, :n.size], np.float64)
        noisy = bool(noise[i] > 0)
        result[i] = stays_below(losses, stride[i] * n, noisy, target) and (noisy or state.peak[i] < target)
        rate[i] = _decay(stride[i] * n, losses)
    return result, rate


def _decay(t, loss) -> float:
    """The decay rate per step of ``loss`` sampled at steps ``t`` (:func:`stays`)."""
    if t.size < 8 or not np.isfinite(loss).all():
        return 0.0
    if (loss == 0).any():
        return np.inf
    fall, error = slope(t, np.log(loss))
    return -fall if -fall > 2 * error else 0.0
