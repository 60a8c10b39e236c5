"""Progress bars wherever the user is: a widget in a Jupyter kernel (text there when ipywidgets is
missing), text on a terminal, and in a log (stderr neither a terminal nor a kernel: a batch job, a
background run, CI) one line every :data:`LOG_EVERY` seconds, none for a bar that ends sooner; none
when a run asks for quiet (``progress=False``, ``--quiet``). Every bar of nqm comes from here."""

from __future__ import annotations

import importlib.util
import sys

LOG_EVERY = 60.0  # seconds between a bar's lines in a log (the first comes after as long)


def in_kernel() -> bool:
    """Whether this process is a Jupyter kernel (IPython's kernel app runs it).

    Returns:
      True in a notebook's kernel, False in a script, a terminal or plain IPython.
    """
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


def bar(enabled: bool = True, **options):
    """A tqdm bar: the notebook widget in a kernel with ipywidgets, else the text bar; shown in a
    kernel or on a terminal (``disable=None`` hides it elsewhere), never when not ``enabled``.

    Args:
      enabled: False for none (a bar that counts, draws nothing).
      options: tqdm's keyword arguments (``total``, ``desc``, ``unit``, …).

    Returns:
      The bar.
    """
    kernel = enabled and in_kernel()
    if kernel and importlib.util.find_spec("ipywidgets") is not None:  # the notebook bar is a widget
        from tqdm.notebook import tqdm  # the widget bar, importable only with ipywidgets
    else:
        from tqdm import tqdm  # the text bar (one import: the name is chosen here)
    if enabled and not kernel and not _terminal(sys.stderr):
        return tqdm(file=_Lines(sys.stderr), mininterval=LOG_EVERY, maxinterval=LOG_EVERY, delay=LOG_EVERY, ascii=True,
                    **options)
    return tqdm(disable=not enabled, dynamic_ncols=True, **options)


def _terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no such method, or closed
        return False


class _Lines:
    """A log's view of a text bar: each redraw a line of its own (a terminal redraws in place)."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> None:
        line = text.replace("\r", "").strip()
        if line:
            self.stream.write(line + "\n")

    def flush(self) -> None:
        self.stream.flush()
