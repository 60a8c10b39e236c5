"""Stability-threshold figures (Giladi et al. 2020, Figs. 4, 6, 7, 8, 10): 1/x* against delay."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import xarray as xr

from nqm.thresholds.polynomials import sgd_inverse_threshold_approx, threshold_dataset

STYLE = {"font.size": 12, "axes.titlesize": 13, "legend.fontsize": 10, "axes.grid": True, "grid.alpha": 0.3}
Y_LABEL = r"$1/x^* = 1/(a\,\eta^*)$"
X_LABELS = {"delay": r"delay $\tau$ (iterations)", "mean_delay": r"mean delay $\mathbb{E}[\tau]$ (iterations)"}
ASYMPTOTE = r"$(2\tau+1)/\pi$ (eq. 7)"


def plot_inverse_thresholds(ax, ds: xr.Dataset, *, against: str = "delay", label: str = "numeric",
                            cmap: str = "viridis"):
    """Draw ``1/threshold`` against a delay coordinate, one marked line per momentum.

    Args:
      ax: matplotlib axes.
      ds: a :func:`nqm.thresholds.polynomials.threshold_dataset` result.
      against: coordinate for the horizontal axis, "delay" or "mean_delay".
      label: legend entry when there is a single momentum (otherwise "m = …").
      cmap: colour map over momentum (one colour when there is a single momentum).
    """
    n = ds.sizes["momentum"]
    colours = ["tab:blue"] if n == 1 else plt.get_cmap(cmap)(np.linspace(0, 0.85, n))
    every = max(1, ds.threshold.shape[0] // 22)  # markers stay legible on long delay ranges
    for colour, m in zip(colours, ds.momentum.values):
        ax.plot(ds[against], 1 / ds.threshold.sel(momentum=m), "o-", ms=4, lw=1.5, markevery=every,
                color=colour, label=label if n == 1 else f"m = {m:g}")
    ax.set_xlabel(X_LABELS[against])
    ax.set_ylabel(Y_LABEL)
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)


def plot_sgd_asymptote(ax, delays, **kwargs):
    """Draw the SGD approximation ``1/x* = (2τ + 1)/π`` (Giladi et al. 2020, eq. 7).

    Args:
      ax: the matplotlib axes.
      delays: the delays drawn; the line spans 0 … their maximum.
      kwargs: ``Axes.plot`` arguments overriding the style (colour, width, label, …).
    """
    tau = np.linspace(0, np.max(delays), 200)
    ax.plot(tau, sgd_inverse_threshold_approx(tau), **{"color": "tab:orange", "lw": 1.8, "ls": "--",
                                                       "label": ASYMPTOTE, **kwargs})


def threshold_figure(ds: xr.Dataset, title: str, *, against: str = "delay", label: str = "numeric",
                     asymptote: bool = False, constant: xr.Dataset | None = None, residual: bool = False):
    """Figure of 1/x* curves with a title naming the convention.

    Args:
      ds: threshold dataset to draw.
      title: first title line; the second line is the dataset's convention and delay law.
      against: "delay" or "mean_delay".
      label: legend entry of a single-momentum curve.
      asymptote: add the SGD line ``(2τ + 1)/π``.
      constant: constant-delay SGD dataset drawn for comparison (grey); by default the
        ``constant_threshold`` variable of ``ds`` if it has one (:func:`with_constant_delay`).
      residual: add a lower panel with numeric minus ``(2τ + 1)/π`` (single-momentum data).

    Returns:
      the matplotlib Figure.
    """
    if constant is None and "constant_threshold" in ds:
        constant = xr.Dataset({"threshold": ds.constant_threshold.rename(constant_delay="delay")})
        ds = ds.drop_vars("constant_threshold")
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(2 if residual else 1, 1, figsize=(7.5, 7.5 if residual else 5.6), sharex=True,
                                 squeeze=False, gridspec_kw={"height_ratios": [3, 1.2] if residual else [1]})
        ax = axes[0, 0]
        if constant is not None:
            ax.plot(constant.delay, 1 / constant.threshold.isel(momentum=0), color="0.6", lw=6, alpha=0.5,
                    solid_capstyle="butt", label=r"constant delay $\tau = \mathbb{E}[\tau]$ (numeric)")
        plot_inverse_thresholds(ax, ds, against=against, label=label)
        if asymptote:
            plot_sgd_asymptote(ax, ds[against].values)
        ax.legend(loc="upper left", ncol=2 if ds.sizes["momentum"] > 4 else 1)
        labels = ds.delay.values
        law = "" if labels.dtype.kind in "iuf" else f";  delays {labels[0]}" + (f" … {labels[-1]}" if labels.size > 1 else "")
        ax.set_title(f"{title}\n{ds.attrs['convention']}{law}")
        if residual:
            err = 1 / ds.threshold.isel(momentum=0) - sgd_inverse_threshold_approx(ds[against])
            axes[1, 0].plot(ds[against], err, "o-", ms=4, lw=1.5, color="tab:blue")
            axes[1, 0].axhline(0, color="tab:orange", ls="--", lw=1.5)
            axes[1, 0].set_ylabel("numeric − eq. 7")
            axes[1, 0].set_xlabel(X_LABELS[against])
            ax.set_xlabel("")
        fig.tight_layout()
    return fig


def with_constant_delay(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` (random-delay SGD thresholds) with the constant-delay SGD thresholds for
    τ = 0 … max E[τ] as ``constant_threshold`` over ``constant_delay``, for :func:`threshold_figure`.

    Args:
      ds: a threshold dataset of SGD under random delays (``mean_delay`` coordinate).

    Returns:
      ``ds`` with the ``constant_threshold`` variable.
    """
    constant = threshold_dataset("sgd", delays=np.arange(int(ds.mean_delay.max()) + 1))
    return ds.assign(constant_threshold=constant.threshold.drop_vars("mean_delay").rename(delay="constant_delay"))
