"""Any optax optimizer as an nqm family, and Adaptive Braking around any of them.

optax's numeric hyperparameters become per-cell hyperparameters (grid axes) through
``optax.inject_hyperparams``: each step writes the cell's values into the injected state's
``hyperparams``, then takes optax's update. nqm's ``lr`` is optax's ``learning_rate``, and optax's
updates already carry the −lr, so ``w_{t+1} = w_t + updates``. A method has nqm's ``momentum``
axis only if one of its optax hyperparameters plays it (``momentum`` of ``optax.sgd`` and
``optax.rmsprop``, or the one ``from_optax(..., momentum=NAME)`` names); the others have no
momentum, and their results have the single momentum coordinate 0.

Braked (``brake=True``), the gradient is scaled by ``α = 1 − ρ cos(g, u)`` per group before the
wrapped optimizer sees it, ``u`` being the optimizer's own first moment (adam's and lion's ``mu``,
the ``trace`` of sgd with momentum) before the step, as Adaptive Braking (:mod:`nqm.optimizers.ab`)
does with the heavy ball's velocity.
"""

from __future__ import annotations

import collections
import inspect
import numbers
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from nqm.errors import NqmError
from nqm.optimizers.ab import grouping
from nqm.optimizers.base import NearZero, Optimizer, register

LEARNING_RATE = "learning_rate"  # optax's name of nqm's lr
# optax's names of the decay rates of moment estimates (adam's, lion's and rmsprop's): their
# forgetting time 1 / (1 − rate) is the method's memory, which the settled test waits out.
MOMENT_DECAYS = ("b1", "b2", "decay")
BRAKE_EPS = 1e-12  # the floor of ‖g‖‖u‖, AB's default (adam's own eps is a hyperparameter of that name)
_BRAKE_OPTIONS = (
    inspect.Parameter("group", inspect.Parameter.KEYWORD_ONLY, default="global"),
    inspect.Parameter("alpha_min", inspect.Parameter.KEYWORD_ONLY, default=None, annotation="float | None"),
    inspect.Parameter("alpha_max", inspect.Parameter.KEYWORD_ONLY, default=None, annotation="float | None"),
)


def from_optax(name: str, factory: Callable[..., Any], *, brake: bool = False, momentum: str | None = None,
               title: str | None = None, reductions=(), near_zero: NearZero | None = None, **fixed) -> str:
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
      title: how figures and results name it (default ``name``).
      reductions: what it equals at some settings, as :func:`nqm.optimizers.base.register` takes.
      near_zero: what it becomes near the minimum, as :func:`nqm.optimizers.base.register` takes.
      fixed: factory arguments held for every cell (neither swept nor options), e.g. ``mask=...``.

    Returns:
      ``name``.

    Raises:
      NqmError: ``factory`` is not an optax optimizer factory with a ``learning_rate``, ``momentum``
        names none of its numeric hyperparameters, or ``brake`` finds no first moment to brake against.
    """
    family = bridge(factory, brake=brake, momentum=momentum, **fixed)
    family()  # an unusable factory is refused now, not at the first run
    register(name, title=title or name, reductions=reductions, near_zero=near_zero)(family)
    return name


def bridge(factory: Callable[..., Any], *, brake: bool = False, momentum: str | None = None,
           **fixed) -> Callable[..., Optimizer]:
    """The nqm family (a factory of :class:`Optimizer`, keyword options only) that runs ``factory``;
    :func:`from_optax` registers it.

    Args:
      factory, brake, momentum, fixed: as :func:`from_optax`.

    Returns:
      The family: ``family(**options) -> Optimizer``, its signature the options it takes.

    Raises:
      NqmError: as :func:`from_optax`.
    """
    if isinstance(factory, optax.GradientTransformation):
        raise NqmError("give the optax factory (e.g. optax.adam), not a GradientTransformation it built "
                       "(optax.adam(1e-3)): nqm sweeps its hyperparameters")
    if not callable(factory):
        raise NqmError(f"an optax optimizer factory such as optax.adam is needed, got {factory!r}")
    label = f"optax.{getattr(factory, '__name__', repr(factory))}"
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
    if momentum is None and "momentum" in parameters and "momentum" not in fixed:
        momentum = "momentum"
    numeric = {k: p.default for k, p in parameters.items() if k not in fixed and _number(p.default)}
    if momentum is not None and momentum not in numeric and momentum != "momentum":
        raise NqmError(f"momentum={momentum!r} names none of {label}'s numeric hyperparameters "
                       f"({', '.join(numeric) or 'none'})")
    # Swept: lr, the momentum axis, the other numbers (optax's defaults are the sweep's), and ρ.
    names = {"lr": LEARNING_RATE, **({"momentum": momentum} if momentum else {}),
             **{k: k for k in numeric if k not in (LEARNING_RATE, momentum)}}
    defaults = {k: numeric[v] for k, v in names.items() if k not in ("lr", "momentum")}
    if brake:
        if "rho" in names:
            raise NqmError(f"{label} has its own rho, which braking's ρ would shadow")
        defaults["rho"] = 0.5  # AB's default
    switches = {k: p.default for k, p in parameters.items() if k not in fixed and isinstance(p.default, bool)}
    options = [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=v, annotation="bool")
               for k, v in switches.items()] + (list(_BRAKE_OPTIONS) if brake else [])
    typename = "".join(c for c in label.title() if c.isalnum())
    hyper = collections.namedtuple(f"{typename}Hyper",
                                   [*(k for k in ("lr", "momentum") if k in names), *defaults],
                                   defaults=list(defaults.values()))

    def family(**given):
        settings = {**switches, **fixed, **{k: v for k, v in given.items() if k in switches}}
        return _optimizer(factory, label, hyper, names, settings, brake,
                          **{k: given.get(k, p.default) for k, p in ((p.name, p) for p in _BRAKE_OPTIONS) if brake})

    family.__signature__ = inspect.Signature(options)
    family.__name__ = label.replace(".", "_")
    family.__doc__ = (f"{label} through nqm's optax bridge{', braked' if brake else ''}.\n\n"
                      + ("Args:\n" + "".join(f"  {p.name}: {_OPTION_DOCS.get(p.name, f'{label} {p.name}')}\n"
                                             for p in options) if options else ""))
    return family


_OPTION_DOCS = {
    "group": "braking groups: global, element, blocks:K or an array of group labels (as ab).",
    "alpha_min": "optional lower clamp of the braking factor α.",
    "alpha_max": "optional upper clamp of the braking factor α.",
}


def _number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _optimizer(factory, label, hyper, names, settings, brake, group="global", alpha_min=None, alpha_max=None):
    """The :class:`Optimizer` of one setting of the options."""
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
    moment = _moment(transform, start, label)
    shaped = _shaped_by_hyperparameters(injected, start, settings)
    if brake and moment is None:
        raise NqmError(f"{label} keeps no first moment (mu or trace) to brake against; brake an optimizer with one "
                       "(adam, lion, sgd with momentum)")
    if brake:
        for bound_name, bound in (("alpha_min", alpha_min), ("alpha_max", alpha_max)):
            if bound is not None and not np.isfinite(bound):
                raise NqmError(f"{bound_name} must be a finite number, got {bound}")
        if alpha_min is not None and alpha_max is not None and alpha_min > alpha_max:
            raise NqmError(f"alpha_min ({alpha_min}) must not exceed alpha_max ({alpha_max})")
        group_label, cosine = grouping(group)
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
        info = {}
        if brake:
            cos = cosine(g, moment(state), BRAKE_EPS)
            alpha = 1.0 - cell.rho * cos  # written as ab writes it, so that braked SGDM is ab bit for bit
            if alpha_min is not None or alpha_max is not None:
                alpha = jnp.clip(alpha, alpha_min, alpha_max)
            g = alpha * g
            info = {"alpha": jnp.mean(alpha), "cosine": jnp.broadcast_to(cos, g.shape)}
        updates, state = transform.update(g, state, w)
        return w + updates, state, info

    def velocity(state, ctx):
        del ctx
        return moment(state)

    config = (("optax", label), ("optax_version", optax.__version__),
              *((k, v if isinstance(v, (bool, int, float, str)) else repr(v)) for k, v in sorted(settings.items())))
    if "momentum" in names:
        config += (("momentum_axis", names["momentum"]),)
    decays = tuple(field for field, optax_name in names.items() if optax_name in MOMENT_DECAYS)

    def memory(values):
        """The longest forgetting time of the moment estimates, ``1 / (1 − rate)`` steps."""
        rates = np.stack([np.asarray(values[field], np.float64) for field in decays])
        return 1.0 / np.maximum(1.0 - rates.max(0), np.finfo(np.float64).eps)

    if brake:
        config += (("group", group_label), ("alpha_min", alpha_min), ("alpha_max", alpha_max), ("brake_eps", BRAKE_EPS))
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


def _moment(transform, start, label):
    """``moment(state) -> u``: the first ``mu`` or ``trace`` in the optimizer's state, turned to
    point along the gradient (rmsprop's trace follows its updates, −lr ĝ): ``None`` if it has none."""
    w, g = jnp.zeros(2), jnp.ones(2)
    path = _path(transform.init(w).inner_state)
    if path is None:
        return None

    def raw(state):
        node = state.inner_state
        for key in path:
            node = getattr(node, key) if isinstance(key, str) and hasattr(node, "_fields") else node[key]
        return node

    _, after = transform.update(g, transform.init(w), w)
    sign = float(np.sign(np.vdot(g, np.asarray(raw(after)))))
    if sign == 0:
        raise NqmError(f"{label}'s moment {'.'.join(map(str, path))} stays 0 after a step at "
                       f"{start}; nqm cannot tell which way it points")
    return raw if sign > 0 else (lambda state: -raw(state))


def _path(node, path=()):
    if hasattr(node, "_fields"):
        for field in ("mu", "trace"):
            if field in node._fields:
                return path + (field,)
        children = [(f, getattr(node, f)) for f in node._fields]
    elif isinstance(node, (tuple, list)):
        children = list(enumerate(node))
    elif isinstance(node, dict):
        children = list(node.items())
    else:
        return None
    for key, child in children:
        found = _path(child, path + (key,))
        if found is not None:
            return found
    return None


# The CLI methods, under optax's own names and defaults; each states what it equals at some setting:
# Adam with b1 = b2 = ε = 0 and Lion with b1 = 0 (no weight decay) both step by −lr·sign(g); RMSProp
# that never updates its ν = 1 (decay 1, initial scale 1, ε = 0) is SGDM, to rounding.
SIGN_DESCENT = {"lr": 0.07}  # a rate whose steps from w₀ = 1 never land on g = 0 (sign(0) = 0, 0/0 = NaN)
# Near the minimum, once √v̂ < ε, Adam steps by lr·m̂/ε: SGDM with the dampened momentum b1 at the
# rate lr / (ε + √ε_root) (bias corrections → 1), whatever the braking (α → 1 there).
ADAM_NEAR_ZERO = NearZero("sgdm", lambda v: {"lr": v["lr"] / (v["eps"] + np.sqrt(v["eps_root"])), "momentum": v["b1"]},
                          {"dampening": True}, floor="eps", when={"nesterov": False})
from_optax("adam", optax.adam, title="Adam", near_zero=ADAM_NEAR_ZERO,
           reductions=[({**SIGN_DESCENT, "b1": 0.0, "b2": 0.0, "eps": 0.0}, "lion",
                        {**SIGN_DESCENT, "b1": 0.0, "weight_decay": 0.0}, 2)])
from_optax("lion", optax.lion, title="Lion",
           reductions=[({**SIGN_DESCENT, "b1": 0.0, "weight_decay": 0.0}, "adam",
                        {**SIGN_DESCENT, "b1": 0.0, "b2": 0.0, "eps": 0.0}, 2)])
from_optax("rmsprop", optax.rmsprop, title="RMSProp",
           reductions=[({"decay": 1.0, "initial_scale": 1.0, "eps": 0.0}, "sgdm", {}, 2)])
from_optax("ab-adam", optax.adam, brake=True, title="Adaptive Braking (Adam)", near_zero=ADAM_NEAR_ZERO,
           reductions=[({"rho": 0.0}, "adam", {}, 2)])
