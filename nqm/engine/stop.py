"""When a cell stops: its stop rule, as an ODE solver's event decides when an integration ends.

The engine steps a cell until it reaches the target (its first passage T: ``L(w_t) < target``),
diverges or spends its budget. A stop rule may keep a cell that reached the target stepping
(status ``CONTINUING``) and decide when it stops, and with which status, from per-cell state of its
own that travels with the cell on the device. The engine knows a rule only through this interface:

    continues                  whether a reached cell ever steps on (False: the first passage ends it)
    label                      what the progress bar calls the cells it keeps stepping
    horizon(budget) -> int     the last step any cell may reach
    init(count, dtype)         its per-cell state for ``count`` cells (host arrays, leading axis cells)
    update(u, steps, status, loss, diverged, target, state) -> (status, state)
                               after a block's step to ``u`` (called only where a cell of the block
                               was ``CONTINUING`` before it): the block's statuses and state, given
                               each cell's first passage ``steps``, its status before the step, the
                               step's loss and whether it diverged

A rule is a frozen dataclass: what it compiles into the kernel is its hash, so per-cell data it
holds for :meth:`StopRule.init` is declared ``field(compare=False)``. :class:`FirstPassage` is
the default; :class:`ToHorizon` keeps every reached cell stepping to a fixed step.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

from nqm.status import CONTINUING, DIVERGED, REACHED


class StopRule:
    """The interface (module docstring); as a rule, the first passage."""

    continues: bool = False
    label: str = "continuing"

    def horizon(self, budget: int) -> int:
        """The last step any cell may reach under a budget of ``budget`` steps.

        Args:
          budget: the run's ``max_steps``.

        Returns:
          A step count.
        """
        return int(budget)

    def init(self, count: int, dtype) -> Any:
        """The rule's per-cell state before any step (``None``: it keeps none).

        Args:
          count: the run's cells.
          dtype: the run's float type.

        Returns:
          A pytree of host arrays with leading axis ``count``, or ``None``.
        """
        return None

    def update(self, u, steps, status, loss, diverged, target, state):
        """The statuses and state of a block's cells after their step to ``u`` (module docstring)."""
        return status, state


@dataclasses.dataclass(frozen=True)
class FirstPassage(StopRule):
    """A cell stops at its first passage: the engine's default."""


@dataclasses.dataclass(frozen=True)
class ToHorizon(StopRule):
    """Every cell that reached the target steps on to step ``step`` (its status then ``REACHED``; a
    cell that diverges on the way ends ``DIVERGED``), so that what is recorded covers the same steps
    for every cell; its first passage is kept."""

    step: int
    continues = True
    label = "stepping on"

    def horizon(self, budget: int) -> int:
        return max(int(budget), int(self.step))

    def update(self, u, steps, status, loss, diverged, target, state):
        del steps, loss, target
        ends = jnp.where(diverged, DIVERGED, jnp.where(u >= self.step, REACHED, CONTINUING))
        return ends.astype(status.dtype), state
