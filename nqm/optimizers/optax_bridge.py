"""Any optax optimizer as an nqm family, and Adaptive Braking around any of them.

optax's numeric hyperparameters become per-cell hyperparameters (grid axes) through
``optax.inject_hyperparams``: each step writes the cell's values into the injected state's
``hyperparams``, then takes optax's update. nqm's ``lr`` is optax's ``learning_rate``, and optax's
updates already carry the −lr, so ``w_{t+1} = w_t + updates``. A method has nqm's ``momentum``
axis only if one of its optax hyperparameters plays it (``momentum`` of ``optax.sgd`` and
``optax.rmsprop``, or the one ``from_optax(..., momentum=NAME)`` names); the others have no
momentum, and their results have the single momentum coordinate 0.

Braked (``brake=True``), it is the braking transform of :mod:`nqm.optimizers.braking` (which
Adaptive Braking is of SGDM): the gradient is scaled by ``α = 1 − ρ cos(g, u)`` per group before
the optimizer sees it, ``u`` its first moment before the step, read by an accessor declared for
it — :data:`MOMENTS` for optax's own optimizers (adam's and lion's ``mu``, sgd's ``trace``), or the
``moment`` given to :func:`from_optax`.
"""

from __future__ import annotations

import collections
import inspect
import numbers
import re
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from nqm.errors import NqmError
from nqm.optimizers.base import NearZero, Optimizer, StepContext, methods, register
from nqm.optimizers.braking import braked
from nqm.validate import DECAY, NONNEGATIVE, Domain

LEARNING_RATE = "learning_rate"  # optax's name of nqm's lr
# optax's names of the decay rates of moment estimates (adam's, lion's and rmsprop's): their
# forgetting time 1 / (1 − rate) is the method's memory, which the settled test waits out.
MOMENT_DECAYS = ("b1", "b2", "decay")
# The domains of the hyperparameter names the bridge knows; a factory's other numeric ones must be
# declared (from_optax(domains=...)): a value outside is refused before any run.
KNOWN_DOMAINS = {
    "b1": DECAY, "b2": DECAY, "decay": DECAY,
    "eps": Domain("an epsilon > 0 (it keeps a division finite)", 0.0, closed_low=False),
    "eps_root": NONNEGATIVE, "weight_decay": NONNEGATIVE, "initial_scale": NONNEGATIVE,
    "rho": NONNEGATIVE,  # braking's ρ
}
BRAKE_EPS = 1e-12  # the floor of ‖g‖‖u‖, AB's default (adam's own eps is a hyperparameter of that name)
_BRAKE_OPTIONS = (
    inspect.Parameter("group", inspect.Parameter.KEYWORD_ONLY, default="global"),
    inspect.Parameter("alpha_min", inspect.Parameter.KEYWORD_ONLY, default=None, annotation="float | None"),
    inspect.Parameter("alpha_max", inspect.Parameter.KEYWORD_ONLY, default=None, annotation="float | None"),
)


def from_optax(name: str, factory: Callable[..., Any], *, brake: bool = False, momentum: str | None = None,
               moment: Callable[[Any], Any] | None = None, title: str | None = None, reductions=(),
               near_zero: NearZero | None = None, domains: dict | None = None, replace: bool = False,
               **fixed) -> str:
    """Register the optax optimizer ``factory`` (e.g. ``optax.adam``, not ``optax.adam(1e-3)``) as
    the nqm method ``name``: its numeric hyperparameters are swept grid axes under optax's names
    and defaults (``learning_rate`` is nqm's ``lr``), its switches are method options.

    Args:
      name: the method's registry name (``nqm.sweep(name, ...)``, ``nqm sweep --method NAME``).
      factory: an optax optimizer factory: keyword hyperparameters in, a
        ``GradientTransformation`` out, with a ``learning_rate`` parameter.
      brake: wrap it in Adaptive Braking: the gradient is scaled by ``α = 1 − ρ cos(g, u)``,
        ``u`` its first moment, with ``rho`` a hyperparameter and AB's ``group``, ``alpha_min``
        and ``alpha_max`` options.
      momentum: the optax hyperparameter that is nqm's ``momentum`` axis (e.g. ``"b1"``); default
        ``"momentum"`` if the factory has one, else none (the method takes no momentum).
      moment: ``moment(inner_state) -> u``, the optimizer's first moment, pointing along the
        gradient, from the state of the transformation ``factory`` builds (e.g.
        ``lambda s: s[0].mu``): what braking brakes against and diagnostics read as the velocity;
        default :data:`MOMENTS`'s for optax's own factories.
      title: how figures and results name it (default ``name``).
      reductions: what it equals at some settings, as :func:`nqm.optimizers.base.register` takes.
      near_zero: what it becomes near the minimum, as :func:`nqm.optimizers.base.register` takes.
      domains: ``{hyperparameter: nqm.validate.Domain}`` for the numeric hyperparameters the bridge
        does not know (:data:`KNOWN_DOMAINS`); each of them must have one.
      replace: register ``name`` even if a method has it (the new one is then what every later call
        builds); without it a name already registered is refused.
      fixed: factory arguments held for every cell (neither swept nor options), e.g. ``mask=...``.

    Returns:
      ``name``.

    Raises:
      NqmError: ``factory`` is not an optax optimizer factory with a ``learning_rate``, ``momentum``
        names none of its numeric hyperparameters, ``brake`` has no first moment to brake against, or
        a numeric hyperparameter has no domain.
    """
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise NqmError(f"a method's name is letters, digits, '.', '_' or '-' (as --method takes it), got {name!r}")
    if name in methods() and not replace:
        raise NqmError(f"{name!r} is already a method: choose another name, or give replace=True to replace it")
    family = bridge(factory, brake=brake, momentum=momentum, moment=moment, **fixed)
    _steps_once(family(), _label(factory))  # an unusable factory is refused now, not at the first run
    return _registered(name, factory, family, brake, title, reductions, near_zero, domains)


def _registered(name: str, factory, family, brake: bool, title, reductions, near_zero, domains) -> str:
    """Register the bridged ``family`` as ``name`` (:func:`from_optax`'s last step)."""
    register(name, title=title or name, reductions=reductions, near_zero=near_zero,
             braking_of=_label(factory) if brake else None,
             domains=_domains(_label(factory), family().hyper._fields, domains or {}))(family)
    return name


def _own(name: str, factory, *, brake: bool = False, title: str, reductions=(), near_zero=None) -> str:
    """One of optax's own optimizers registered as :func:`from_optax` registers it, without its step
    at every import of nqm (the first eager step compiles dozens of small programs, seconds in a
    fresh process): every method runs in tests/optimizers/test_methods.py."""
    return _registered(name, factory, bridge(factory, brake=brake), brake, title, reductions, near_zero, None)


def _steps_once(optimizer: Optimizer, label: str) -> None:
    """Build the optimizer's state and take one step at its default hyperparameters (lr 0.1), as a
    run would: a factory that cannot (it needs a random key, a shape it is not given) is refused."""
    w = jnp.ones(3, jnp.float32)
    given = {"lr": 0.1, **({"momentum": 0.5} if "momentum" in optimizer.hyper._fields else {})}
    try:
        hyper = optimizer.hyper(**given)
        state = optimizer.init(w)
        keys = [leaf for leaf in jax.tree.leaves(state) if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key)]
        if keys:
            raise TypeError("its state holds a random key, which the engine cannot carry between chunks")
        optimizer.step(hyper, state, w, w, StepContext(0, 0, 0, w))
    except Exception as error:  # what the first run would have raised, now and in one line
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise NqmError(f"{label} cannot take a step through the bridge ({type(error).__name__}: {first[:160]}); "
                       "nqm runs optimizers whose update needs only the gradient and its own state") from None


def _domains(label: str, fields: tuple, declared: dict) -> dict:
    """Every extra hyperparameter's domain: declared, else known by name; none is an error."""
    extra = [f for f in fields if f not in ("lr", "momentum")]
    unknown = [f for f in extra if f not in declared and f not in KNOWN_DOMAINS]
    if unknown:
        raise NqmError(f"{label}'s hyperparameter(s) {', '.join(unknown)} have no domain nqm knows: give "
                       f"from_optax(..., domains={{{unknown[0]!r}: nqm.validate.Domain('a number >= 0', 0.0)}}) "
                       "with where each may lie")
    return {f: declared.get(f, KNOWN_DOMAINS.get(f)) for f in extra}


def bridge(factory: Callable[..., Any], *, brake: bool = False, momentum: str | None = None,
           moment: Callable[[Any], Any] | None = None, **fixed) -> Callable[..., Optimizer]:
    """The nqm family (a factory of :class:`Optimizer`, keyword options only) that runs ``factory``;
    :func:`from_optax` registers it.

    Args:
      factory, brake, momentum, moment, fixed: as :func:`from_optax`.

    Returns:
      The family: ``family(**options) -> Optimizer``, its signature the options it takes.

    Raises:
      NqmError: as :func:`from_optax`.
    """
    label, parameters = _checked_factory(factory, fixed)
    names, defaults = _swept(label, parameters, fixed, momentum)
    if brake and "rho" in names:
        raise NqmError(f"{label} has its own rho, which braking's ρ would shadow")
    moment = MOMENTS.get(factory) if moment is None else moment
    if brake and moment is None:
        raise NqmError(f"{label} keeps no first moment nqm knows of to brake against: brake one that does (adam, "
                       "lion, sgd with momentum) or give moment=, a function of its state that returns it "
                       "(e.g. lambda state: state[0].mu)")
    switches = {k: p.default for k, p in parameters.items() if k not in fixed and isinstance(p.default, bool)}
    options = [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=v, annotation="bool")
               for k, v in switches.items()] + (list(_BRAKE_OPTIONS) if brake else [])
    typename = "".join(c for c in label.title() if c.isalnum())
    hyper = collections.namedtuple(f"{typename}Hyper", [*(k for k in ("lr", "momentum") if k in names), *defaults],
                                   defaults=list(defaults.values()))

    def family(**given):
        settings = {**switches, **fixed, **{k: v for k, v in given.items() if k in switches}}
        optimizer = _optimizer(factory, label, hyper, names, settings, moment)
        if not brake:
            return optimizer
        return braked(optimizer, eps=BRAKE_EPS, eps_name="brake_eps",
                      **{p.name: given.get(p.name, p.default) for p in _BRAKE_OPTIONS})

    family.__signature__ = inspect.Signature(options)
    family.__name__ = label.replace(".", "_")
    family.__doc__ = (f"{label} through nqm's optax bridge{', braked' if brake else ''}.\n\n"
                      + ("Args:\n" + "".join(f"  {p.name}: {_OPTION_DOCS.get(p.name, f'{label} {p.name}')}\n"
                                             for p in options) if options else ""))
    return family


def _checked_factory(factory, fixed: dict) -> tuple[str, dict]:
    """``factory``'s label and parameters, refused (one line) if it is no optax optimizer factory
    with a learning rate, or ``fixed`` names what it does not take."""
    if isinstance(factory, optax.GradientTransformation):
        raise NqmError("give the optax factory (e.g. optax.adam), not a GradientTransformation it built "
                       "(optax.adam(1e-3)): nqm sweeps its hyperparameters")
    if not callable(factory):
        raise NqmError(f"an optax optimizer factory such as optax.adam is needed, got {factory!r}")
    label = _label(factory)
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        raise NqmError(f"{label} has no signature to read its hyperparameters from") from None
    if LEARNING_RATE not in parameters:
        raise NqmError(f"{label} has no learning_rate parameter, which nqm's lr sweeps; chain it with "
                       "optax.scale_by_learning_rate in a factory that takes learning_rate")
    if LEARNING_RATE in fixed:
        raise NqmError("learning_rate is nqm's lr axis (lr=, --lr): it cannot be fixed")
    unknown = sorted(set(fixed) - set(parameters))
    if unknown:
        raise NqmError(f"{label} has no parameter(s) {', '.join(unknown)}; it takes {', '.join(parameters)}")
    return label, parameters


def _swept(label: str, parameters: dict, fixed: dict, momentum: str | None) -> tuple[dict, dict]:
    """What a cell sweeps: nqm's names of optax's (lr, the momentum axis, the other numbers) and the
    defaults of those beyond lr and momentum (optax's, which are the sweep's)."""
    if momentum is None and "momentum" in parameters and "momentum" not in fixed:
        momentum = "momentum"
    numeric = {k: p.default for k, p in parameters.items() if k not in fixed and _number(p.default)}
    if momentum is not None and momentum not in numeric and momentum != "momentum":
        raise NqmError(f"momentum={momentum!r} names none of {label}'s numeric hyperparameters "
                       f"({', '.join(numeric) or 'none'})")
    names = {"lr": LEARNING_RATE, **({"momentum": momentum} if momentum else {}),
             **{k: k for k in numeric if k not in (LEARNING_RATE, momentum)}}
    return names, {k: numeric[v] for k, v in names.items() if k not in ("lr", "momentum")}


_OPTION_DOCS = {
    "group": "braking groups: global, element, blocks:K or an array of group labels (as ab).",
    "alpha_min": "optional lower clamp of the braking factor α.",
    "alpha_max": "optional upper clamp of the braking factor α.",
}


def _label(factory) -> str:
    return f"optax.{getattr(factory, '__name__', repr(factory))}"


def _number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _optimizer(factory, label, hyper, names, settings, moment):
    """The :class:`Optimizer` of one setting of the options (unbraked)."""
    # The values the transformation is built with; every step overwrites the swept ones per cell.
    start = {optax_name: 1.0 if field == "lr" else 0.5 if field == "momentum" else hyper._field_defaults[field]
             for field, optax_name in names.items()}
    injected = optax.inject_hyperparams(factory)
    try:
        transform = injected(**start, **settings)
        probe = transform.init(jnp.zeros(2))
    except NqmError:
        raise
    except Exception as exc:  # noqa: BLE001  (optax's own errors, e.g. a required argument not given)
        raise NqmError(f"{label} could not be built with {', '.join(f'{k}={v!r}' for k, v in {**start, **settings}.items())}"
                       f": {type(exc).__name__}: {exc}".splitlines()[0]) from None
    if not isinstance(transform, optax.GradientTransformation) or not hasattr(probe, "hyperparams"):
        raise NqmError(f"{label} does not build an optax GradientTransformation")
    if moment is not None:
        try:
            jax.eval_shape(moment, probe.inner_state)
        except Exception as exc:  # noqa: BLE001  (a declared accessor that does not fit this state)
            raise NqmError(f"the first moment declared for {label} cannot be read from its state: "
                           f"{type(exc).__name__}: {exc}".splitlines()[0]) from None
    shaped = _shaped_by_hyperparameters(injected, start, settings)
    swept = [(field, optax_name) for field, optax_name in names.items()]

    def init(w0):
        return transform.init(jnp.asarray(w0))

    def step(cell, state, w, g, ctx):
        del ctx
        values = {o: getattr(cell, f) for f, o in swept}
        if shaped:  # init() saw no cell's values: such a state is made again from the cell's own first
            fresh = injected(**{**start, **values}, **settings).init(w)
            state = jax.tree.map(lambda new, old: jnp.where(state.count == 0, new, old), fresh, state)
        state = state._replace(hyperparams={**state.hyperparams, **values})
        updates, state = transform.update(g, state, w)
        return w + updates, state, {}

    def velocity(state, ctx):
        del ctx
        return moment(state.inner_state)

    config = (("optax", label), ("optax_version", optax.__version__),
              *((k, v if isinstance(v, (bool, int, float, str)) else repr(v)) for k, v in sorted(settings.items())))
    if "momentum" in names:
        config += (("momentum_axis", names["momentum"]),)
    decays = tuple(field for field, optax_name in names.items() if optax_name in MOMENT_DECAYS)

    def memory(values):
        """The longest forgetting time of the moment estimates, ``1 / (1 − rate)`` steps."""
        rates = np.stack([np.asarray(values[field], np.float64) for field in decays])
        return 1.0 / np.maximum(1.0 - rates.max(0), np.finfo(np.float64).eps)

    return Optimizer(hyper, init, step, config, velocity=None if moment is None else velocity,
                     memory=memory if decays else None)


def _shaped_by_hyperparameters(injected, start, settings) -> bool:
    """Whether the initial state depends on the swept values (rmsprop's ν starts at initial_scale):
    then each cell's is made from its own values at its first step. Optimizers whose state starts
    at zeros whatever the values (sgd, adam, lion) run without that extra code."""
    w = jnp.ones(2)
    try:
        moved = {k: v * 0.5 + 0.25 for k, v in start.items()}
        states = [injected(**values, **settings).init(w).inner_state for values in (start, moved)]
    except Exception:  # noqa: BLE001  (values the factory refuses: assume it depends on them)
        return True
    return any(not np.array_equal(a, b) for a, b in zip(*map(jax.tree.leaves, states)))


# Where optax's own optimizers keep their first moment, pointing along the gradient (their
# ``inner_state``: the states of the chain they are built from).
MOMENTS = {
    optax.sgd: lambda inner: inner[0].trace,  # trace(momentum), then the learning rate
    optax.adam: lambda inner: inner[0].mu,
    optax.adamw: lambda inner: inner[0].mu,
    optax.lion: lambda inner: inner[0].mu,
    optax.rmsprop: lambda inner: -inner[2].trace,  # its trace follows the updates, −lr ĝ
}


# The CLI methods, under optax's own names and defaults; each states what it equals at some setting:
# Adam with b1 = b2 = ε = 0 and Lion with b1 = 0 (no weight decay) both step by −lr·sign(g); RMSProp
# that never updates its ν = 1 (decay 1, initial scale 1, ε = 0) is SGDM, to rounding.
SIGN_DESCENT = {"lr": 0.07}  # a rate whose steps from w₀ = 1 never land on g = 0 (sign(0) = 0, 0/0 = NaN)
# Near the minimum, once √v̂ < ε, Adam steps by lr·m̂/ε: SGDM with the dampened momentum b1 at the
# rate lr / (ε + √ε_root) (bias corrections → 1), whatever the braking (α → 1 there).
ADAM_NEAR_ZERO = NearZero("sgdm", lambda v: {"lr": v["lr"] / (v["eps"] + np.sqrt(v["eps_root"])), "momentum": v["b1"]},
                          {"dampening": True}, floor="eps", when={"nesterov": False})
_own("adam", optax.adam, title="Adam", near_zero=ADAM_NEAR_ZERO,
     reductions=[({**SIGN_DESCENT, "b1": 0.0, "b2": 0.0, "eps": 0.0}, "lion",
                  {**SIGN_DESCENT, "b1": 0.0, "weight_decay": 0.0}, 2)])
_own("lion", optax.lion, title="Lion",
     reductions=[({**SIGN_DESCENT, "b1": 0.0, "weight_decay": 0.0}, "adam",
                  {**SIGN_DESCENT, "b1": 0.0, "b2": 0.0, "eps": 0.0}, 2)])
_own("rmsprop", optax.rmsprop, title="RMSProp",
     reductions=[({"decay": 1.0, "initial_scale": 1.0, "eps": 0.0}, "sgdm", {}, 2)])
_own("ab-adam", optax.adam, brake=True, title="Adaptive Braking (Adam)", near_zero=ADAM_NEAR_ZERO,
     reductions=[({"rho": 0.0}, "adam", {}, 2)])
