"""Progress bars wherever the user is: a widget in a Jupyter kernel (text there when ipywidgets is
missing), text on a terminal, and none in a log or on CI (stderr neither a terminal nor a kernel)
or when a run asks for quiet (``progress=False``, ``--quiet``). Every bar of nqm comes from here."""

from __future__ import annotations

import importlib.util
import sys


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
        from tqdm.notebook import tqdm
    else:
        from tqdm import tqdm
    disable = True if not enabled else (False if kernel else None)
    return tqdm(disable=disable, dynamic_ncols=True, **options)
