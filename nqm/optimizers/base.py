"""What every optimizer family provides, and the registry that maps names to families.

An optimizer acts on ONE cell (one weight vector); the engine maps it over a grid with ``vmap``.
Its hyperparameters are arrays carried in a NamedTuple, so a grid of values is one compiled program.

    state = init(w0)
    w_next, state, info = step(hyper, state, w, g, ctx)

``w`` is the current weight vector ``w_t``, ``g`` the (delayed, noisy) gradient applied at step
``t``, ``ctx`` the :class:`StepContext` of that gradient (step, delay, worker, the weights it was
computed at), and ``info`` a dict of diagnostics (e.g. the braking factor α) that the engine may
record but never carries.

A factory is registered by name and called with keyword options only; its signature is the list
of options it takes (the CLI and ``nqm.sweep`` derive theirs from it), plus two that :func:`make`
fills and no user gives: ``workers``, how many workers the delay process has, for families that keep
per-worker state, and ``problem``, the :class:`nqm.problem.Problem` it runs on, for families whose
update reads the curvature (``precond``'s ``H^(−p)``).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, NamedTuple

import numpy as np

from nqm.delays import process
from nqm.errors import NqmError
from nqm.validate import NONNEGATIVE, did_you_mean, flag


class StepContext(NamedTuple):
    """Where the gradient applied at step ``t`` comes from.

    Attributes:
      t: the step (int32).
      delay: the gradient's delay ``τ_t`` as the delay process drew it: it was computed at the
        weights of iteration ``max(0, t − τ_t)`` (int32).
      worker: the id of the worker that computed it, in ``[0, workers)`` (int32).
      stale: the weights it was computed at (``w_{t−τ_t}``, or what the optimizer sent then).
    """

    t: Any
    delay: Any
    worker: Any
    stale: Any


class Optimizer(NamedTuple):
    """A configured optimizer: pure ``init``/``step`` functions and the names of its hyperparameters.

    Attributes:
      hyper: the NamedTuple type of per-cell hyperparameters (fields = swept names).
      init: ``init(w0) -> state``.
      step: ``step(hyper, state, w, g, ctx) -> (w_next, state, info)``.
      config: static settings as ``(name, value)`` pairs (hashable, so an optimizer can be a
        static argument of ``jax.jit``), recorded in result attributes.
      velocity: ``velocity(state, ctx) -> v_t``, the velocity the step at ``ctx`` continues (for
        diagnostics; ``None``: the family has none, read as zeros).
      sent: ``sent(hyper, state, w_next) -> weights`` a worker receives after the step, when that
        is not ``w_next`` itself (DANA's look-ahead); ``None``: ``w_next``.
      workers: the number of workers the per-worker state was built for (``None``: no such state).
      linear: whether the noiseless update is linear in the weights, the gradients and the state
        (per eigencomponent, for every hyperparameter value): such a method has a transition matrix,
        hence a derived stability threshold and exact expected dynamics.
      name: its registry name (``"sgdm"``, ``"ab"``, …; see :func:`methods`), given by :func:`make`
        from the name it was registered under (a family never writes it itself).
      memory: ``memory(hyper) -> steps``, per cell (numpy, from the hyperparameter arrays by name):
        how long its moment estimates take to forget (Adam's ``1 / (1 − b2)``), which the settled
        test waits out (:func:`nqm.settling.window.settling_span`); ``None``: a method whose state
        holds no such estimate (the heavy-ball families).
    """

    hyper: type
    init: Callable[[Any], Any]
    step: Callable[..., tuple]
    config: tuple
    velocity: Callable[[Any, StepContext], Any] | None = None
    sent: Callable[..., Any] | None = None
    workers: int | None = None
    linear: bool = False
    name: str = ""
    memory: Callable[[dict], Any] | None = None


class MomentumHyper(NamedTuple):
    """The per-cell hyperparameters of a momentum method: learning rate ``lr`` (η) and ``momentum`` (m)."""
    lr: Any
    momentum: Any


class Reduction(NamedTuple):
    """What a method equals at some setting: ``method`` with hyperparameters ``hyper`` (over lr = 0.2,
    m = 0.6) steps exactly as ``other`` with ``other_hyper`` under a constant ``delay``."""

    hyper: dict
    other: str
    other_hyper: dict
    delay: int


SUPPLIED = ("workers", "problem")  # factory parameters make() fills, only for factories that declare them
_REGISTRY: dict[str, "Registered"] = {}


class NearZero(NamedTuple):
    """What a method becomes as a noiseless run decays towards the minimum: the linear ``method``
    with hyperparameters ``hyper(values)`` (from the cell's, by name; ``None``: its lr and momentum)
    and ``options`` (beside the run's own ``dampening``), once the state falls below the scale
    that the option or hyperparameter ``floor`` sets (AB's and Adam's ``eps``; ``None``: only in the
    limit, as DC-ASGD's correction vanishes). ``homogeneous``: above that floor, scaling the state
    scales every step (AB), so a run may be probed with the floor raised. ``when``: the method's
    options under which this holds (e.g. ``{"nesterov": False}``)."""

    method: str
    hyper: Callable[[dict], dict] | None = None
    options: dict = {}
    floor: str | None = None
    homogeneous: bool = False
    when: dict = {}


class Registered(NamedTuple):
    """A method as registered (:func:`register`): its ``factory``, ``title``, ``reductions``,
    ``near_zero``, ``braking_of`` and ``domains``, and the factory's ``parameters`` (read once)."""

    factory: Callable[..., Optimizer]
    title: str
    reductions: tuple
    near_zero: NearZero | None
    braking_of: str | None
    domains: dict
    parameters: dict


def registered(method: str) -> Registered:
    """The record of ``method`` in the registry.

    Args:
      method: a registered method's name.

    Returns:
      Its :class:`Registered`.

    Raises:
      NqmError: ``method`` is not registered.
    """
    if method not in _REGISTRY:
        raise NqmError(f"unknown method {method!r}{did_you_mean(method, methods())}; choose one of "
                       f"{', '.join(methods())}")
    return _REGISTRY[method]


def register(name: str, *, title: str | None = None, reductions=(), near_zero: NearZero | None = None,
             braking_of: str | None = None, domains: dict | None = None):
    """Decorator: make a factory ``f(**options) -> Optimizer`` available as ``name``, which
    :func:`make` gives the optimizer it builds (``title``: how figures and results name the method;
    default the name). A factory that keeps per-worker state declares a ``workers`` parameter and
    gets the delay process's worker count, and one whose update reads the curvature declares a
    ``problem`` parameter and gets the run's problem; no other factory sees either. ``reductions``: what the
    method equals at some settings (:class:`Reduction` fields as tuples, e.g. AB at ρ = 0 is SGDM),
    which the registry-wide tests check. ``near_zero``: what this method becomes as a noiseless
    run decays towards the minimum, where the settled test then judges it (:class:`NearZero`).
    ``braking_of``: the optimizer this method is the braking transform of
    (:func:`nqm.optimizers.braking.braked`; AB is that of ``"sgdm"``). ``domains``: where each of its
    extra hyperparameters may lie (:class:`nqm.validate.Domain` by name; one not declared is a
    number >= 0), which every entry point checks (:func:`domains`).

    Args:
      name: the method's registry name.
      title: its display name, or ``None`` for ``name``.
      reductions: :class:`Reduction` fields as tuples.
      near_zero: a :class:`NearZero`, or ``None``.
      braking_of: a method's name (or an optax factory's label), or ``None``.
      domains: ``{hyperparameter: Domain}``, or ``None``.

    Returns:
      The decorator; it returns the factory unchanged.
    """

    def deco(factory):
        _REGISTRY[name] = Registered(factory, title or name, tuple(Reduction(*r) for r in reductions), near_zero,
                                     braking_of, dict(domains or {}), dict(inspect.signature(factory).parameters))
        _changed()
        return factory

    return deco


def unregister(name: str) -> None:
    """Remove the method ``name`` from the registry (a study's own method, registered for a while).

    Args:
      name: the registered method to remove.

    Raises:
      NqmError: ``method`` is not registered.
    """
    registered(name)  # an unknown method is an error
    del _REGISTRY[name]
    _changed()


def reductions(method: str) -> tuple[Reduction, ...]:
    """What ``method`` equals at some settings, as registered (:func:`register`).

    Args:
      method: a registered method's name.

    Returns:
      Its :class:`Reduction` s (empty if none).

    Raises:
      NqmError: ``method`` is not registered.
    """
    return registered(method).reductions


def near_zero(method: str) -> NearZero | None:
    """What ``method`` becomes as a noiseless run decays towards the minimum, as registered
    (:class:`NearZero`): a run that stays below the target is judged by that linear method's
    exact stability there (:mod:`nqm.settling`).

    Args:
      method: a registered method's name.

    Returns:
      Its :class:`NearZero`, or ``None``.

    Raises:
      NqmError: ``method`` is not registered.
    """
    return registered(method).near_zero


def braking_of(method: str) -> str | None:
    """The optimizer ``method`` is the braking transform of, as registered: ``"sgdm"`` for AB,
    ``"optax.adam"`` for braked Adam; ``None`` for a method that is not braked.

    Args:
      method: a registered method's name.

    Returns:
      The name, or ``None``.

    Raises:
      NqmError: ``method`` is not registered.
    """
    return registered(method).braking_of


def domains(method: str) -> dict:
    """Where each hyperparameter of ``method`` beyond lr and momentum may lie, as registered (one
    not declared: a number >= 0); lr and momentum have the same domain in every method.

    Args:
      method: a registered method's name.

    Returns:
      ``{hyperparameter: nqm.validate.Domain}``.

    Raises:
      NqmError: ``method`` is not registered.
    """
    fields = hyperparameters(method)._fields
    declared = registered(method).domains
    return {f: declared.get(f, NONNEGATIVE) for f in fields if f not in ("lr", "momentum")}


def title(method: str) -> str:
    """The method's name in figures and result attributes (e.g. "Adaptive Braking").

    Args:
      method: a registered method's name.

    Returns:
      The title it was registered with.

    Raises:
      NqmError: ``method`` is not registered.
    """
    return registered(method).title


def methods() -> tuple[str, ...]:
    """Every registered method's name, sorted."""
    return tuple(sorted(_REGISTRY))


def options(method: str) -> dict[str, inspect.Parameter]:
    """The options of ``method``'s family by name (its factory's keyword parameters but ``workers``
    and ``problem``, which :func:`make` fills).

    Args:
      method: a registered method's name.

    Returns:
      ``{name: inspect.Parameter}``.

    Raises:
      NqmError: ``method`` is not registered.
    """
    return {name: p for name, p in registered(method).parameters.items() if name not in SUPPLIED}


def hyperparameters(method: str) -> type:
    """The NamedTuple type of ``method``'s per-cell hyperparameters (its defaults are the sweep's).

    Args:
      method: a registered method's name.

    Returns:
      The NamedTuple type (its fields are the swept hyperparameters' names).
    """
    return make(method).hyper


def documentation(method: str) -> dict[str, str]:
    """One line per option of ``method``, from the ``Args:`` section of its factory's docstring.

    Args:
      method: a method's name (an unknown one has no options: ``{}``).

    Returns:
      ``{option: text}``.
    """
    lines = inspect.getdoc(_REGISTRY[method].factory).splitlines() if method in _REGISTRY else []
    docs, name = {}, None
    for line in lines[lines.index("Args:") + 1:] if "Args:" in lines else []:
        if not line.strip() or not line.startswith("  "):
            break
        head, sep, text = line.strip().partition(": ")
        if sep and not line.startswith("    ") and all(n.strip().isidentifier() for n in head.split(",")):
            for name in (n.strip() for n in head.split(",")):
                docs[name] = text
        elif name is not None:
            docs[name] += " " + line.strip()
    return docs


def make(method: str, *, delay=0, problem=None, **given) -> Optimizer:
    """Build the optimizer ``method`` for a run under ``delay`` (a constant ``D`` or a
    :mod:`nqm.delays` process, which says how many workers per-worker state needs) on ``problem``
    (given only to a family that declares it: one whose update reads the curvature).

    Options left at ``None`` take the family's default; an option the family does not have is an
    error (so that e.g. ``--group`` is never silently ignored for SGDM).

    Args:
      method: a registered method's name.
      delay: a constant delay ``D`` or anything :func:`nqm.delays.process` accepts.
      problem: the :class:`nqm.problem.Problem` the optimizer will run on, or ``None``; a family
        that reads the curvature cannot step without it (its hyperparameters are known without).
      given: the family's options, by name (``None``: the default).

    Returns:
      The configured :class:`Optimizer`, named ``method``.

    Raises:
      NqmError: ``method`` is not registered, or an option does not apply to it or is of the wrong type.
    """
    accepted = options(method)
    given = {k: v for k, v in given.items() if v is not None}
    extra = sorted(set(given) - set(accepted))
    if extra:
        raise NqmError(f"option(s) {', '.join(extra)} do not apply to method {method!r}")
    for name, value in given.items():
        if isinstance(accepted[name].default, bool):  # a switch: "yes" or 1 would silently count as on
            flag(value, name)
    workers = process(delay).workers
    if "problem" not in registered(method).parameters:
        problem = None  # the key of the memo: a family that never reads the problem is built once
    return _build(method, workers, problem, tuple(sorted((k, _frozen(v)) for k, v in given.items())))


_CACHES: list = []  # the caches of what is built from a method's name (registry_cache)


def registry_cache(maxsize: int = 64):
    """``functools.lru_cache`` for what is built from a method's name: emptied whenever a name is
    registered or unregistered, so a notebook that re-registers a method with changed code gets the
    new method everywhere (its optimizer, thresholds, settling tests), never a stale one.

    Args:
      maxsize: the cache's size.

    Returns:
      The decorator.
    """

    def deco(function):
        cached = functools.lru_cache(maxsize=maxsize)(function)
        _CACHES.append(cached)
        return cached

    return deco


def _changed() -> None:
    for cache in _CACHES:
        cache.cache_clear()


@registry_cache(maxsize=256)
def _build(method: str, workers: int, problem, options: tuple) -> Optimizer:
    # Memoized: the same settings give the same (hashable) functions, so jit never recompiles (a
    # problem is its own key: Problem compares by identity).
    factory, parameters = _REGISTRY[method].factory, _REGISTRY[method].parameters
    supplied = {name: value for name, value in (("workers", workers), ("problem", problem)) if name in parameters}
    return factory(**supplied, **{k: _thawed(v) for k, v in options})._replace(name=method)


class _Labels(tuple):
    """A hashable stand-in for an array option (a group partition)."""


def _frozen(value):
    return _Labels(np.asarray(value).tolist()) if isinstance(value, (np.ndarray, list)) else value


def _thawed(value):
    return np.asarray(value) if isinstance(value, _Labels) else value
