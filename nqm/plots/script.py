"""The command line every figure script shares: compute the data, write it beside the PNG, draw the
figure from the data as written, and record the numbers the README quotes.

A script keeps only its science::

    def compute(smoke: bool) -> xr.Dataset | dict: ...   # the numbers (may run the engine)
    def draw(data) -> Figure: ...                        # from the data alone (no engine)
    def claims(data) -> dict[str, float]: ...            # the numbers the README quotes

    main = FigureScript("fig_x", compute, draw, claims, doc=__doc__).main

``python scripts/fig_x.py [--smoke] [--out PNG] [--redraw]`` writes, all atomically:

- ``PNG`` (default ``figures/fig_x.png``; a smoke run's default is the temporary directory);
- beside it the data, ``fig_x.nc`` (a Dataset, :func:`nqm.io.save`) or ``fig_x.json`` (a dict),
  with the run's regime added (size, script options, wall time, nqm version, date);
- ``fig_x.claims.json``: ``{"figure", "data", "claims": {key: number}}``, the figure's numbers
  that the README quotes (each followed there by ``<!--claim:fig_x/key-->``).

The figure is always drawn from the data file as read back, so ``--redraw`` (draw from that file,
compute nothing, import no JAX) gives the same figure. ``--smoke`` (or ``NQM_SMOKE=1``) runs the
script's tiny size.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import glob
import io
import json
import os
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import xarray as xr

from nqm import __version__, sharing
from nqm.devices import use_every_core
from nqm.errors import NqmError
from nqm.io import check_writable, json_plain, load_dataset, save, write_bytes

DATA_SUFFIXES = (".nc", ".json")


@dataclasses.dataclass(frozen=True)
class FigureScript:
    """A figure script's command line.

    Args:
      name: the file stem (``figures/<name>.png``, ``.nc`` or ``.json``, ``.claims.json``).
      compute: ``compute(smoke, **options) -> xr.Dataset | dict``; it records its own regime (N,
        grid, budget, seeds) in the data, which is all ``draw`` sees. ``None``: nothing to draw yet
        (a share of the work done; the checkpoint stays for the run that draws).
      draw: ``draw(data) -> Figure``, from the data as read back from its file.
      claims: ``claims(data) -> {key: number}``, the numbers the README quotes.
      doc: the ``--help`` text (the script's docstring).
      options: extra flags, ``{"--flag": argparse keyword arguments}``; their values are passed to
        ``compute`` by their ``dest`` and recorded in the data.
      checkpoint: pass ``compute(..., checkpoint=PATH)``, a resumable file beside the data that is
        removed once the data is written.
      dpi: resolution of the PNG.
    """

    name: str
    compute: Callable[..., Any]
    draw: Callable[[Any], Any]
    claims: Callable[[Any], dict] = lambda data: {}
    doc: str | None = None
    options: dict = dataclasses.field(default_factory=dict)
    checkpoint: bool = False
    dpi: int = 150

    def parser(self) -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser(prog=f"{self.name}.py", description=self.doc,
                                         formatter_class=argparse.RawDescriptionHelpFormatter)
        parser.add_argument("--smoke", action="store_true",
                            help="the tiny size (also when NQM_SMOKE=1); default --out in the temporary directory")
        parser.add_argument("--out", type=Path, default=None,
                            help=f"PNG path (default figures/{self.name}.png); the data and claims are written beside it")
        parser.add_argument("--redraw", action="store_true",
                            help="draw from the data file beside --out, computing nothing")
        for flag, kwargs in self.options.items():
            parser.add_argument(flag, **kwargs)
        return parser

    def main(self, argv=None) -> int:
        """Run the command line; an :class:`NqmError` is one line on stderr and exit status 2, an
        interruption one line and status 130."""
        use_every_core()  # a figure's sweeps shard their cells over one device per core
        args = self.parser().parse_args(argv)
        try:
            self.run(args)
        except NqmError as exc:
            print(f"{self.name}: error: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM inside a sweep: one line, not a traceback
            kept = "; the same command resumes from its checkpoint" if self.checkpoint and not args.redraw else ""
            print(f"{self.name}: interrupted{kept}", file=sys.stderr)
            return 130
        return 0

    def run(self, args: argparse.Namespace) -> Path | None:
        """Compute (unless ``args.redraw``), write the data, draw from it; returns the PNG path (``None``
        where ``compute`` returned ``None``: it did a share of the work and leaves the drawing to a later run)."""
        smoke = args.smoke or os.environ.get("NQM_SMOKE") == "1"
        png = args.out or (Path(tempfile.gettempdir()) if smoke else Path("figures")) / f"{self.name}.png"
        if png.suffix.lower() != ".png":
            raise NqmError(f"--out {png}: give a .png path (the data is written beside it)")
        for path in (png, claims_path(png), *(png.with_suffix(s) for s in DATA_SUFFIXES)):
            check_writable(path)
        if args.redraw:
            data_path = existing_data(png)
        else:
            dests = [kw.get("dest", flag.lstrip("-").replace("-", "_")) for flag, kw in self.options.items()]
            options = {dest: getattr(args, dest) for dest in dests}
            data_path = None

            def clear():  # once the data is written; a run that leaves the drawing to a later one keeps it
                if data_path is not None:
                    remove_checkpoint(partial)

            with contextlib.ExitStack() as stack:
                if self.checkpoint:  # removed with the files beside it once the data is written
                    options["checkpoint"] = partial = str(png.with_name(png.stem + ".nc.partial"))
                    stack.enter_context(sharing.member(partial, clear=clear))
                start = time.perf_counter()
                data = self.compute(smoke, **options)
                if data is None:  # compute did its share of the work, said so, and left the drawing to a later run
                    return None
                regime = {"figure": self.name, "size": "smoke" if smoke else "full",
                          "wall_seconds": round(time.perf_counter() - start, 1),
                          "options": {k: v for k, v in options.items() if k != "checkpoint"}}
                data_path = write_data(data, png, regime)
        data = read_data(data_path)
        fig = self.draw(data)
        write_figure(fig, png, self.dpi)
        numbers = {key: json_plain(value) for key, value in self.claims(data).items()}
        write_bytes(claims_path(png), _json({"figure": self.name, "data": data_path.name, "claims": numbers}))
        print(f"wrote {png} (drawn from {data_path}; claims in {claims_path(png).name})")
        return png


def remove_checkpoint(path: str) -> None:
    """Remove a figure's checkpoint and the files its pieces keep beside it (``PATH.*``), all but
    the lock the caller holds."""
    for file in [Path(path), *Path(path).parent.glob(glob.escape(Path(path).name) + ".*")]:
        if file.is_file() and file.suffix != ".lock":
            file.unlink()


def claims_path(png: Path) -> Path:
    return png.with_name(png.stem + ".claims.json")


def existing_data(png: Path) -> Path:
    """The data file beside ``png`` (``.nc`` first, then ``.json``)."""
    for suffix in DATA_SUFFIXES:
        if png.with_suffix(suffix).is_file():
            return png.with_suffix(suffix)
    raise NqmError(f"no data beside {png} ({png.stem}.nc or {png.stem}.json): run without --redraw first")


def write_data(data, png: Path, regime: dict) -> Path:
    """Write a Dataset as ``.nc`` or a dict as ``.json`` beside ``png``, with ``regime`` added."""
    stamp = {**regime, "nqm_version": _version(), "created": datetime.date.today().isoformat()}
    if isinstance(data, xr.Dataset):
        path = png.with_suffix(".nc")
        attrs = {**data.attrs, **stamp, "options": json.dumps(json_plain(stamp["options"]))}
        save(data.assign_attrs({k: _netcdf_attr(v) for k, v in attrs.items()}), path)
    elif isinstance(data, dict):
        path = png.with_suffix(".json")
        write_bytes(path, _json({**data, "regime": stamp}))
    else:
        raise NqmError(f"compute returned {type(data).__name__}; return an xarray Dataset or a dict")
    for stale in (png.with_suffix(s) for s in DATA_SUFFIXES if s != path.suffix):
        if stale.is_file():  # one data file beside the PNG: --redraw must not find an older one
            stale.unlink()
    return path


def read_data(path: Path):
    """A figure's data as written by :func:`write_data`."""
    if path.suffix == ".nc":
        return load_dataset(path)
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise NqmError(f"cannot read {path}: {exc}") from None


def write_figure(fig, png: Path, dpi: int = 150) -> None:
    """Render ``fig`` to PNG bytes in memory, then replace ``png`` atomically (never truncated)."""
    import matplotlib.pyplot as plt  # pyplot picks a backend: only when a figure is written

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    plt.close(fig)
    write_bytes(png, buffer.getvalue())


def suptitle(fig, text: str, fontsize: float = 10):
    """The title of a figure (or subfigure), each line wrapped to its width (about 0.55 em per character)."""
    inches = fig.bbox.width / fig.figure.dpi
    width = max(20, int(inches * 72 / (fontsize * 0.55)))
    lines = [textwrap.fill(line, width) for line in text.split("\n")]
    return fig.suptitle("\n".join(lines), fontsize=fontsize)


def stack(datasets: dict, dim: str) -> xr.Dataset:
    """Datasets (or arrays) of the same shape along a new labelled dimension ``dim`` (the keys of
    ``datasets`` are its labels; attributes they all share are kept)."""
    labels = xr.DataArray(list(datasets), dims=dim, name=dim)
    return xr.concat(list(datasets.values()), dim=labels, combine_attrs="drop_conflicts")


def _version() -> str:

    return __version__


def _netcdf_attr(value):
    """netCDF attributes are numbers, strings or arrays: booleans become 0/1, others text."""
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if value is None:
        return "none"
    if isinstance(value, (dict, list, tuple)) and not all(isinstance(v, (int, float)) for v in value):
        return json.dumps(json_plain(value))
    return value



def _json(value) -> bytes:
    return (json.dumps(json_plain(value), indent=1, ensure_ascii=False) + "\n").encode()
