"""Convergence heatmaps: steps to target over learning rate × momentum, one panel per setting."""

from __future__ import annotations


import warnings

import matplotlib.colors as mcolors
import matplotlib.patches as mpatches
import matplotlib.pyplot as plt
import numpy as np
import xarray as xr

from nqm.errors import NqmError, NqmWarning
from nqm.plots.script import suptitle
from nqm.results import combine_seeds, grid, panel_keys
from nqm.thresholds.polynomials import table_line
from nqm.status import DIVERGED, REACHED, SKIPPED, TRANSIENT, UNDECIDED, format_t_star, plural, t_star

SKIPPED_GREY = "0.7"  # cells not run (known not to settle): grey, apart from white (budget) and black
UNDECIDED_COLOUR = "#f2b134"  # reached the target, no verdict within the work limit: dotted amber


def grid_panel(ds: xr.Dataset) -> xr.Dataset:
    """The lr × momentum panel of a sweep with a single value of every other dimension (those
    coordinates dropped).

    Args:
      ds: a result with one value of every dimension but lr and momentum.

    Returns:
      The panel.

    Raises:
      NqmError: another dimension has several values.
    """
    extra = [d for d in ds.steps.dims if d not in ("momentum", "lr")]
    if any(ds.sizes[d] != 1 for d in extra):
        raise NqmError(f"grid_panel needs one value of {', '.join(extra)}; select a panel first")
    return ds.isel({d: 0 for d in extra}, drop=True).drop_vars([c for c in ds.coords if c in extra], errors="ignore")


def draw_heatmap(ax, panel: xr.Dataset, norm, cmap="viridis"):
    """Draw one lr × momentum panel: T coloured on a log scale, diverged black, over budget white,
    transient (reached the target without staying) hatched grey, undecided (reached it, no verdict
    within the work limit, :data:`~nqm.status.UNDECIDED`) dotted amber, not run (known not to settle,
    :data:`~nqm.status.SKIPPED`) plain grey.

    Args:
      ax: the matplotlib axes to draw on.
      panel: one lr × momentum panel (``steps`` and ``status`` over momentum and lr only).
      norm: the colour scale of T (e.g. :func:`steps_norm`).
      cmap: the colormap of T.

    Returns:
      The mesh of T (for a colour bar).
    """
    panel = panel[["steps", "status"]].transpose("momentum", "lr")
    lr_edges = _edges(panel.lr.values, log=True)
    m_edges = _edges(panel.momentum.values, log=False)
    m_edges[-1] = min(m_edges[-1], 1.0)  # momentum < 1: do not draw cells past it
    status, steps = panel.status.values, panel.steps.values.astype(float)
    failed = np.ma.masked_where(status == REACHED, np.select([status == DIVERGED, status == SKIPPED], [2.0, 1.0], 0.0))
    ax.pcolormesh(lr_edges, m_edges, failed, cmap=mcolors.ListedColormap(["white", SKIPPED_GREY, "black"]), vmin=0, vmax=2)
    mesh = ax.pcolormesh(lr_edges, m_edges, np.ma.masked_where(status != REACHED, steps), cmap=cmap, norm=norm)
    for code, face, edge, hatch in ((TRANSIENT, "0.85", "0.45", "////"), (UNDECIDED, UNDECIDED_COLOUR, "0.3", "..")):
        for i, j in zip(*np.nonzero(status == code)):
            ax.add_patch(mpatches.Rectangle((lr_edges[j], m_edges[i]), lr_edges[j + 1] - lr_edges[j],
                                            m_edges[i + 1] - m_edges[i], facecolor=face, edgecolor=edge, hatch=hatch,
                                            linewidth=0))
    ax.set_xscale("log")
    ax.set_xlim(lr_edges[0], lr_edges[-1])
    ax.set_ylim(m_edges[0], m_edges[-1])
    # A single value is drawn as that value: one labelled tick, not a band of invented neighbours.
    if panel.lr.size == 1:
        ax.set_xticks(panel.lr.values, [f"{panel.lr.values[0]:g}"])
        ax.minorticks_off()
    if panel.momentum.size == 1:
        ax.set_yticks(panel.momentum.values, [f"{panel.momentum.values[0]:g}"])
    if (status == REACHED).any():
        best = np.unravel_index(np.argmin(np.where(status == REACHED, steps, np.inf)), steps.shape)
        ax.plot(panel.lr.values[best[1]], panel.momentum.values[best[0]], marker="*", color="white",
                markeredgecolor="black", markersize=11, linestyle="none")
    return mesh


def plot_heatmaps(ds: xr.Dataset, *, title: str | None = None, threshold: bool | xr.Dataset = False,
                  ncols: int | None = None, cmap: str = "viridis", spread: xr.Dataset | None = None):
    """Heatmaps of T over learning rate × momentum, one panel per (delay, noise, ρ).

    Diverged cells are black, cells that did not reach the target within the budget white, and
    the fastest cell carries a star; each panel's title gives ``T*`` (1st percentile of T over the
    cells that reached the target). Several seeds are combined by :func:`combine_seeds`.

    Args:
      ds: a result of :func:`nqm.sweep`.
      title: the figure title (default: method, problem and budget).
      threshold: ``True``: overlay the stability threshold ``η*(m) = x*(D, m)/λ_max`` derived from
        the result's own method (linear methods; none for the others, and the title says so);
        or a threshold table (``nqm threshold … --out``, e.g. simulated) to overlay instead.
      ncols: panels per row (default: one row per (delay, noise), one column per ρ).
      cmap: colormap of T.
      spread: a :func:`nqm.summary.robustness` (or :func:`nqm.summary.spread`) result for the
        same panels: each title then also gives T*'s range over seeds and lr perturbations.

    Returns:
      the matplotlib Figure.
    """
    ds = grid(ds)  # the schema nqm.save checks: what it writes is drawn
    seeds = ds.sizes.get("seed", 1)
    ds = combine_seeds(ds)
    keys = panel_keys(ds)
    ncols = ncols or (ds.sizes.get("rho", 1) if len(keys) > 1 else 1)
    nrows = -(-len(keys) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols + 1.2, 3.5 * nrows + 0.9),
                             squeeze=False, sharex=True, sharey=True, layout="constrained")
    norm = steps_norm(ds)
    mesh, drawn = None, False
    overlay = threshold is not False and threshold is not None
    for ax, key in zip(axes.flat, keys):
        panel = ds.sel(key)
        mesh = draw_heatmap(ax, panel, norm, cmap)
        if overlay:
            drawn = overlay_threshold(ax, ds, key, None if threshold is True else threshold) or drawn
        ax.set_title(_panel_title(panel, key, spread), fontsize=10)
    _label_axes(axes, len(keys))
    steps_colorbar(fig, mesh, axes, shrink=min(0.9, 2.0 / nrows))
    status_legend(fig, star=False, transient=bool((ds.status == TRANSIENT).any()),
                  skipped=bool((ds.status == SKIPPED).any()), undecided=bool((ds.status == UNDECIDED).any()))
    missing = "" if drawn or threshold is False or threshold is None else \
        f" — no derived threshold ({ds.attrs.get('method')} is not linear, or no pmf): see nqm threshold --simulate"
    if missing:
        warnings.warn(NqmWarning(f"no threshold drawn: {ds.attrs.get('method')} has no derived threshold here (not a "
                                 "linear method, or a delay without a pmf); write one with nqm threshold --simulate "
                                 "--out T.nc and overlay it with --threshold T.nc (threshold=table)"), stacklevel=2)
    suptitle(fig, (title or default_title(ds, seeds)) + missing, fontsize=11)
    return fig


def _panel_title(panel: xr.Dataset, key: dict, spread: xr.Dataset | None) -> str:
    """A panel's title: its coordinates, T*'s range over seeds and perturbations (with ``spread``),
    T* and the count of transient cells."""
    label = ", ".join(_format(k, v) for k, v in key.items())
    if spread is not None:
        rng = spread.sel({k: v for k, v in key.items() if k in spread.dims})
        ts_range = f"T* in [{float(rng.t_star_min):,.0f}, {float(rng.t_star_max):,.0f}]"
        label += "\n" + ts_range.replace("[nan, nan]", "— (none converged)")
    return f"{label}\n{format_t_star(t_star(panel))}{transient_count(panel)}"


def _label_axes(axes, panels: int) -> None:
    """The axes' labels on the outer panels; the panels left over hidden."""
    for ax in axes.flat[panels:]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("learning rate η")
    for ax in axes[:, 0]:
        ax.set_ylabel("momentum m")


def steps_norm(*datasets: xr.Dataset) -> mcolors.LogNorm:
    """One log colour scale of T over the cells that reached the target in all ``datasets``.

    Args:
      datasets: results or panels (``steps`` and ``status``).

    Returns:
      The ``LogNorm`` over [min T, max T] (1 to 10 when none reached).
    """
    reached = np.concatenate([np.ravel(ds.steps.values[ds.status.values == REACHED]) for ds in datasets])
    vmin, vmax = (reached.min(), reached.max()) if reached.size else (1, 10)
    return mcolors.LogNorm(vmin=max(vmin, 1), vmax=max(vmax, vmin + 1))


def steps_colorbar(fig, mesh, axes, shrink: float = 0.9):
    """The colour bar of T shared by ``axes``.

    Args:
      fig: the figure.
      mesh: the mesh of T (:func:`draw_heatmap`).
      axes: the axes it spans.
      shrink: its length relative to the axes.

    Returns:
      The colour bar.
    """
    cbar = fig.colorbar(mesh, ax=axes, shrink=shrink, pad=0.02)
    cbar.set_label("steps to target T")
    return cbar


def status_legend(fig, star: bool = True, transient: bool = False, skipped: bool = False, undecided: bool = False):
    """Below the panels: what black, white (hatched grey, dotted amber, plain grey, the star) mean.

    Args:
      fig: the figure.
      star: include the fastest cell's star.
      transient: include the hatched transient cells.
      skipped: include the cells not run (known not to settle).
      undecided: include the undecided cells (no verdict within the work limit).

    Returns:
      The legend.
    """
    handles = [mpatches.Patch(facecolor="black", label="diverged"),
               mpatches.Patch(facecolor="white", edgecolor="0.5", label="target not reached in budget")]
    if transient:
        handles.append(mpatches.Patch(facecolor="0.85", edgecolor="0.45", hatch="////",
                                      label="transient: reached the target, does not stay"))
    if undecided:
        handles.append(mpatches.Patch(facecolor=UNDECIDED_COLOUR, edgecolor="0.3", hatch="..",
                                      label="undecided: reached the target, no verdict within the work limit"))
    if skipped:
        handles.append(mpatches.Patch(facecolor=SKIPPED_GREY, edgecolor="0.5", label="not run: cannot settle (exact)"))
    if star:
        handles.append(plt.Line2D([], [], marker="*", color="white", markeredgecolor="black", markersize=10,
                                  linestyle="none", label="fastest cell"))
    across = max(1, min(len(handles), int(fig.get_figwidth() // 2.4)))  # a narrow figure wraps its legend
    return fig.legend(handles=handles, loc="outside lower center", ncols=across, frameon=False, fontsize=9)


def transient_count(panel: xr.Dataset) -> str:
    """``", N transient cells"`` (and ``", M undecided"``) for a panel with transient (undecided)
    cells (none: nothing), for its title.

    Args:
      panel: one lr × momentum panel (``steps`` and ``status`` over momentum and lr only).

    Returns:
      The text (empty without transient or undecided cells).
    """
    count, open_ = int((panel.status == TRANSIENT).sum()), int((panel.status == UNDECIDED).sum())
    return (f", {plural(count, 'transient cell')}" if count else "") + (f", {open_:,} undecided" if open_ else "")


def panel_caption(panel: xr.Dataset) -> str:
    """T* and the converged area of one lr × momentum panel, as its title's last line.

    Args:
      panel: one lr × momentum panel (``steps`` and ``status`` over momentum and lr only).

    Returns:
      The text.
    """
    converged = int((panel.status == REACHED).sum())
    if not converged:
        if transient_count(panel):
            return f"none of {panel.status.size} cells converged{transient_count(panel)}"
        return f"none of {panel.status.size} cells reached the target"
    return f"{format_t_star(t_star(panel))}, {converged} of {panel.status.size} cells converge{transient_count(panel)}"


def draw_panels(fig, axes, panels: dict, *, norm=None, shrink: float = 0.9) -> mcolors.LogNorm:
    """Heatmaps of several lr × momentum panels on one colour scale, titled by name and
    :func:`panel_caption`, with axis labels on the outer axes, one colour bar and the legend.

    Args:
      fig: the figure (or subfigure) holding ``axes``.
      axes: one axes per panel (any shape; extra axes are hidden).
      panels: ``{title: panel}``, each panel a Dataset over (momentum, lr) only.
      norm: the colour scale (default :func:`steps_norm` of the panels).
      shrink: the colour bar's length relative to the axes.

    Returns:
      the colour scale used.
    """
    grid = np.asarray(axes).reshape(-1, np.shape(axes)[-1])  # a row of axes is a one-row grid
    norm = norm or steps_norm(*panels.values())
    mesh = None
    for ax, (name, panel) in zip(grid.flat, panels.items()):
        mesh = draw_heatmap(ax, panel, norm)
        ax.set_title(f"{name}\n{panel_caption(panel)}", fontsize=9.5)
    for ax in grid[-1]:
        ax.set_xlabel("learning rate η")
    for ax in grid[:, 0]:
        ax.set_ylabel("momentum m")
    axes = grid
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    steps_colorbar(fig, mesh, list(axes.flat), shrink=shrink)
    status_legend(fig, transient=any(bool((panel.status == TRANSIENT).any()) for panel in panels.values()),
                  skipped=any(bool((panel.status == SKIPPED).any()) for panel in panels.values()),
                  undecided=any(bool((panel.status == UNDECIDED).any()) for panel in panels.values()))
    return norm


def default_title(ds: xr.Dataset, seeds: int = 1) -> str:
    """The heatmap figure's default title: method, problem, target and budget (and how many seeds
    were combined).

    Args:
      ds: the result (its attributes give the title).
      seeds: the number of seeds combined (a median), 1: none.

    Returns:
      The title.
    """
    a = ds.attrs
    method = a.get("method_title", a.get("method", "?"))
    extra = f", median of {seeds} seeds" if seeds > 1 else ""
    shown = lambda value, form: format(value, form) if isinstance(value, (int, float, np.number)) else "?"
    return (f"{method} on {a.get('spectrum', '?')}: steps to loss < {shown(a.get('target'), 'g')} "
            f"(budget {shown(a.get('max_steps'), ',')}{extra})")


def _format(name, value):
    symbol = {"delay": "D", "noise": "σ", "batch_size": "B", "rho": "ρ", "lambda_dc": "λ_dc"}.get(name, name)
    shown = value if isinstance(value, str) else f"{value:g}"
    return f"{symbol} = {shown}" + (" (SGDM)" if name == "rho" and value == 0 else "")


def _edges(values: np.ndarray, log: bool) -> np.ndarray:
    """Cell edges around sorted centres (geometric midpoints on a log axis)."""
    x = np.log(values) if log else np.asarray(values, float)
    if x.size == 1:
        half = 0.5 if log else 0.05
        edges = np.array([x[0] - half, x[0] + half])
    else:
        mid = (x[1:] + x[:-1]) / 2
        edges = np.concatenate([[x[0] - (mid[0] - x[0])], mid, [x[-1] + (x[-1] - mid[-1])]])
    return np.exp(edges) if log else edges


def overlay_threshold(ax, ds, key, table: xr.Dataset | None = None) -> bool:
    """Draw the stability threshold η*(m) of panel ``key`` of ``ds`` (a dashed red line): derived
    from the result's own method where it is linear, or read from ``table`` (e.g. simulated by
    ``nqm threshold --simulate``). Returns whether there was one to draw (never another method's).

    Args:
      ax: the panel's axes.
      ds: the result (``lam_max`` attribute, momentum coordinate).
      key: the panel's ``{dimension: value}`` (:func:`nqm.results.panel_keys`).
      table: a threshold table, or ``None`` to derive the threshold.
    """
    momenta = np.linspace(ds.momentum.values.min(), ds.momentum.values.max(), 60) if ds.momentum.size > 1 else \
        ds.momentum.values
    if table is not None:  # read off the table: no JAX, so a figure redraws from its data alone
        eta = table_line(table, key, momenta) / float(ds.attrs["lam_max"])
    else:
        from nqm.thresholds.agreement import panel_threshold  # JAX, only where no table was kept

        eta = panel_threshold(ds, key, momenta)
    if eta is None:
        return False
    label = "stability η*(m)" + (f" ({table.attrs.get('criterion', 'table')})" if table is not None else ", derived")
    if ds.momentum.size == 1:  # one momentum: η* is one value, drawn across the panel
        ax.axvline(eta[0], color="red", lw=1.6, ls="--", label=label)
    else:
        ax.plot(eta, momenta, color="red", lw=1.6, ls="--", label=label)
    ax.legend(loc="lower left", fontsize=8, framealpha=0.8)
    return True
