"""The ρ explorer: Adaptive Braking against SGDM on one cell, redrawn as sliders move.

:func:`rho_view` runs AB at ρ and SGDM (AB at ρ = 0: the same start, the same noise and the same
delays) for a fixed number of steps and keeps what the AB paper's Figure 2 reads: the loss of
both, each eigencomponent's energy at the end, and the relative energy decay ``E / E_SGDM`` of AB
per component (the geometric mean over the steps of its energy after an AB step over that after an
SGDM step from the same state; below 1, braking removes that component's energy faster).
:func:`draw_rho_view` draws it; :func:`rho_explorer` puts sliders for ρ, lr, momentum, delay and
noise over the drawing in a notebook (``pip install "nqm[widgets]"``). A change of a slider's value
reruns the two cells on programs already compiled (a new delay compiles once).
"""

from __future__ import annotations

import io

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
import xarray as xr

from nqm.errors import NqmError
from nqm.plots.script import suptitle
from nqm.problem import Problem, zhang

DEFAULTS = dict(rho=0.5, lr=0.03, momentum=0.9, delay=4, noise=0.01)
SLIDERS = {  # name: (kind, low, high, step): log sliders take exponents of 10
    "rho": ("linear", 0.0, 2.0, 0.05),
    "lr": ("log", -3.0, 0.5, 0.05),
    "momentum": ("linear", 0.0, 0.99, 0.01),
    "delay": ("int", 0, 32, 1),
    "noise": ("log", -4.0, 0.0, 0.1),
}


def rho_view(rho: float = DEFAULTS["rho"], lr: float = DEFAULTS["lr"], momentum: float = DEFAULTS["momentum"],
             delay=DEFAULTS["delay"], noise: float = DEFAULTS["noise"], *, problem: Problem | None = None,
             steps: int = 2000, stride: int = 10, seed: int = 0) -> xr.Dataset:
    """AB at ``rho`` and SGDM on one cell, for ``steps`` steps.

    Args:
      rho: AB's braking coefficient.
      lr, momentum, delay, noise, seed: the cell, as in :func:`nqm.sweep` (``delay`` may be a process).
      problem: the quadratic (default :func:`nqm.zhang` with N = 1,000).
      steps: how many steps each run takes (no early stop).
      stride: the loss is kept every ``stride`` steps.

    Returns:
      A dataset over ``rho`` (0 and ``rho``) with ``loss`` ``(rho, step)``, ``energy`` ``(rho,
      component)`` at the last step, and AB's ``relative_energy_decay`` ``(component)``.
    """
    from nqm.diagnostics import trajectory  # JAX: drawing a view (draw_rho_view) needs none

    problem = zhang(1000) if problem is None else problem
    if stride < 1 or steps < stride:
        raise NqmError(f"stride must be in [1, steps], got stride {stride!r} for steps {steps!r}")
    cell = dict(lr=lr, momentum=momentum, delay=delay, noise=noise, seed=seed, problem=problem, steps=steps)
    runs = {r: trajectory("ab", rho=r, record=("loss", "energy"), stride=stride, summaries=r > 0, **cell)
            for r in dict.fromkeys((0.0, float(rho)))}
    ab = runs[float(rho)]
    decay = ab.relative_energy_decay.values if rho > 0 else np.ones(problem.dim)
    return xr.Dataset(
        {"loss": (("rho", "step"), np.stack([ds.loss.values for ds in runs.values()])),
         "energy": (("rho", "component"), np.stack([ds.energy.isel(step=-1).values for ds in runs.values()])),
         "relative_energy_decay": ("component", decay)},
        coords={"rho": list(runs), "step": ab.step.values, "eigenvalue": ("component", problem.eigenvalues)},
        attrs={"lr": float(lr), "momentum": float(momentum), "delay": str(delay), "noise": float(noise),
               "seed": int(seed), "steps": int(steps), "dim": problem.dim, "spectrum": ab.attrs["spectrum"]})


def draw_rho_view(view: xr.Dataset, fig=None):
    """Three panels: the loss of AB and SGDM; each component's energy at the end against λ; AB's
    relative energy decay against λ.

    Args:
      view: a :func:`rho_view` dataset.
      fig: a figure to draw on (cleared), or ``None`` for a new one.

    Returns:
      The figure.
    """
    fig = plt.figure(figsize=(15, 4.4), layout="constrained") if fig is None else fig
    fig.clear()
    axes = fig.subplots(1, 3)
    for rho in view.rho.values:
        name = "SGDM (ρ = 0)" if rho == 0 else f"AB ρ = {rho:g}"
        diverged = not np.isfinite(view.loss.sel(rho=rho)[-1])
        axes[0].semilogy(view.step, view.loss.sel(rho=rho), lw=1, label=name + (", diverged" if diverged else ""))
        energy = np.full(view.component.size, np.nan) if diverged else view.energy.sel(rho=rho)  # no last step
        axes[1].loglog(view.eigenvalue, energy, ".", ms=2, label=name + (": diverged" if diverged else ""))
    axes[2].semilogx(view.eigenvalue, view.relative_energy_decay, ".", ms=2, color="C1")
    axes[2].axhline(1.0, color="grey", ls=":")
    axes[0].set(title="loss", xlabel="step", ylabel="L(w)")
    axes[1].set(title="energy per eigencomponent at the last step", xlabel="eigenvalue λ", ylabel="E_k")
    axes[2].set(title="relative energy decay of AB against SGDM", xlabel="eigenvalue λ",
                ylabel="E / E_SGDM (geometric mean; < 1: damped faster)")
    for ax in axes[:2]:
        ax.legend(fontsize=8)
    a = view.attrs
    suptitle(fig, f"{a['spectrum']}: η = {a['lr']:.3g}, m = {a['momentum']:g}, delay {a['delay']}, "
                  f"σ = {a['noise']:.2g}, seed {a['seed']}, {a['steps']:,} steps (AB and SGDM share noise and delays)")
    return fig


class RhoExplorer:
    """Sliders over a :func:`rho_view` drawing; ``widget`` is what a notebook displays, ``update()``
    redraws from the sliders' values (the sliders call it), ``view`` is the last data drawn.

    The drawing is shown in the widget's output area on every update, whatever the kernel's
    matplotlib backend: with ipympl (``%matplotlib widget``) its interactive canvas, shown once and
    redrawn in place; with any other (the default inline one) a PNG of the figure, replacing the
    last one — an inline figure is not redrawn by its canvas."""

    def __init__(self, problem: Problem | None = None, steps: int = 2000, **initial):
        try:
            import ipywidgets as widgets  # optional: the widgets extra
        except ImportError:
            raise NqmError('the ρ explorer needs ipywidgets: pip install "nqm[widgets]"') from None
        unknown = set(initial) - set(SLIDERS)
        if unknown:
            raise NqmError(f"the ρ explorer has sliders for {', '.join(SLIDERS)}, not {', '.join(sorted(unknown))}")
        self.problem, self.steps = zhang(1000) if problem is None else problem, steps
        values = {**DEFAULTS, **initial}
        self.sliders = {name: _slider(widgets, name, values[name]) for name in SLIDERS}
        self.output = widgets.Output()
        self.interactive = "ipympl" in matplotlib.get_backend() or "widget" in matplotlib.get_backend().lower()
        if self.interactive:  # one canvas, shown once and redrawn in place
            with self.output:
                self.figure = plt.figure(figsize=(15, 4.4), layout="constrained")
                plt.show()
        else:  # a figure pyplot does not hold (the inline backend would show it again at the cell's end)
            self.figure = Figure(figsize=(15, 4.4), layout="constrained")
        for slider in self.sliders.values():
            slider.observe(lambda change: self.update(), names="value")
        self.widget = widgets.VBox([widgets.HBox(list(self.sliders.values())[:3]),
                                    widgets.HBox(list(self.sliders.values())[3:]), self.output])
        self.view = None
        self.update()

    def values(self) -> dict:
        """The sliders' values, by name."""
        return {name: slider.value for name, slider in self.sliders.items()}

    def update(self) -> xr.Dataset:
        """Rerun the two cells at the sliders' values and redraw; returns the new view."""
        self.view = rho_view(**self.values(), problem=self.problem, steps=self.steps)
        draw_rho_view(self.view, self.figure)
        if self.interactive:
            self.figure.canvas.draw_idle()
        else:
            self._show_png()
        return self.view

    def _show_png(self) -> None:
        """The figure as a PNG in the output area, in place of the last one."""
        from IPython.display import Image, display  # IPython: there only in a kernel

        buffer = io.BytesIO()
        self.figure.savefig(buffer, format="png", dpi=80)
        self.output.clear_output(wait=True)
        with self.output:
            display(Image(data=buffer.getvalue(), format="png"))

    def _ipython_display_(self):
        from IPython.display import display  # IPython: there only in a kernel

        display(self.widget)


def rho_explorer(problem: Problem | None = None, steps: int = 2000, **initial) -> RhoExplorer:
    """The ρ explorer for a notebook: ``rho_explorer()`` as a cell's last line shows sliders for ρ,
    lr, momentum, delay and noise over :func:`draw_rho_view`'s three panels.

    Args:
      problem: the quadratic (default :func:`nqm.zhang` with N = 1,000).
      steps: how many steps each run takes.
      initial: the sliders' first values, by name (default :data:`DEFAULTS`).

    Returns:
      The :class:`RhoExplorer`.

    Raises:
      NqmError: ipywidgets is missing, or ``initial`` names no slider.
    """
    return RhoExplorer(problem, steps, **initial)


def _slider(widgets, name: str, value):
    kind, low, high, step = SLIDERS[name]
    layout = dict(description=name, continuous_update=False, style={"description_width": "70px"})
    if kind == "int":
        return widgets.IntSlider(value=int(value), min=low, max=high, step=step, **layout)
    if kind == "log":
        return widgets.FloatLogSlider(value=float(value), base=10, min=low, max=high, step=step, readout_format=".2g",
                                      **layout)
    return widgets.FloatSlider(value=float(value), min=low, max=high, step=step, **layout)
