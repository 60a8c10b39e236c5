"""What every optimizer family provides, and the registry that maps names to families.

An optimizer acts on ONE cell (one weight vector); the engine ``vmap``s it over a grid. Its
hyperparameters are arrays carried in a NamedTuple, so a grid of values is one compiled program.

    state = init(w0)
    w_next, state, info = step(hyper, state, w, g, t)

``w`` is the current weight vector ``w_t``, ``g`` the (delayed, noisy) gradient used at step
``t``, and ``info`` a dict of diagnostics (e.g. the braking factor α) that the engine may record
but never carries.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, NamedTuple

import numpy as np

from nqm.errors import NqmError


class Optimizer(NamedTuple):
    """A configured optimizer: pure ``init``/``step`` functions and the names of its hyperparameters.

    Attributes:
      name: registry name (``"sgdm"``, ``"ab"``, ``"shifted"``).
      hyper: the NamedTuple type of per-cell hyperparameters (fields = swept names).
      init: ``init(w0) -> state``.
      step: ``step(hyper, state, w, g, t) -> (w_next, state, info)``.
      config: static settings as ``(name, value)`` pairs (hashable, so an optimizer can be a
        static argument of ``jax.jit``), recorded in result attributes.
    """

    name: str
    hyper: type
    init: Callable[[Any], Any]
    step: Callable[..., tuple]
    config: tuple


class MomentumHyper(NamedTuple):
    lr: Any
    momentum: Any


_REGISTRY: dict[str, Callable[..., Optimizer]] = {}


def register(name: str):
    """Decorator: make a factory ``f(*, delay, **options) -> Optimizer`` available by name."""

    def deco(factory):
        _REGISTRY[name] = factory
        return factory

    return deco


def methods() -> tuple[str, ...]:
    return tuple(sorted(_REGISTRY))


def make(method: str, *, delay: int = 0, **options) -> Optimizer:
    """Build the optimizer ``method`` for a run with constant delay ``delay``.

    Options left at ``None`` take the family's default; an option the family does not have is an
    error (so that e.g. ``--group`` is never silently ignored for SGDM).
    """
    if method not in _REGISTRY:
        raise NqmError(f"unknown method {method!r}; choose one of {', '.join(methods())}")
    factory = _REGISTRY[method]
    accepted = inspect.signature(factory).parameters
    given = {k: v for k, v in options.items() if v is not None}
    extra = sorted(set(given) - set(accepted))
    if extra:
        raise NqmError(f"option(s) {', '.join(extra)} do not apply to method {method!r}")
    return _build(method, int(delay), tuple(sorted((k, _frozen(v)) for k, v in given.items())))


@functools.lru_cache(maxsize=256)
def _build(method: str, delay: int, options: tuple) -> Optimizer:
    # Memoized: the same settings give the same (hashable) functions, so jit never recompiles.
    return _REGISTRY[method](delay=delay, **{k: _thawed(v) for k, v in options})


class _Labels(tuple):
    """A hashable stand-in for an array option (a group partition)."""


def _frozen(value):
    return _Labels(np.asarray(value).tolist()) if isinstance(value, (np.ndarray, list)) else value


def _thawed(value):
    return np.asarray(value) if isinstance(value, _Labels) else value


def momentum_coefficient(momentum, dampening: bool):
    """The gradient's weight in the velocity: ``1`` (AB paper) or ``1 − m`` (dampened, Giladi et al.)."""
    return 1.0 - momentum if dampening else 1.0


def convention(dampening: bool) -> str:
    return "dampened: v = m v + (1-m) g" if dampening else "undampened: v = m v + g"
