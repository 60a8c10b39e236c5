"""The ρ explorer: its data is AB against SGDM on one cell (SGDM being AB at ρ = 0, bit for bit),
its sliders rerun and redraw it, without a browser."""

import queue
import time

import numpy as np
import pytest

import nqm
from nqm.plots.explore import DEFAULTS, draw_rho_view, rho_explorer, rho_view

CELL = dict(lr=0.3, momentum=0.8, delay=2, noise=0.02)


def test_the_view_is_ab_against_sgdm_from_the_same_noise():
    problem = nqm.zhang(30)
    view = rho_view(1.0, **CELL, problem=problem, steps=300, stride=5)
    sgdm = nqm.trajectory("sgdm", **CELL, problem=problem, steps=300, stride=5, record=("loss", "energy"))
    ab = nqm.trajectory("ab", rho=1.0, **CELL, problem=problem, steps=300, stride=5, summaries=True)
    np.testing.assert_array_equal(view.loss.sel(rho=0.0), sgdm.loss)
    np.testing.assert_array_equal(view.energy.sel(rho=0.0), sgdm.energy.isel(step=-1))
    np.testing.assert_array_equal(view.loss.sel(rho=1.0), ab.loss)
    np.testing.assert_array_equal(view.relative_energy_decay, ab.relative_energy_decay)
    assert (view.relative_energy_decay < 1).any()  # braking damps some components faster
    figure = draw_rho_view(view)
    assert len(figure.axes) == 3 and len(figure.axes[0].lines) == 2


def test_the_sliders_rerun_and_redraw():
    pytest.importorskip("ipywidgets")
    explorer = rho_explorer(nqm.zhang(30), steps=200, lr=0.2)
    assert explorer.values() == {**DEFAULTS, "lr": pytest.approx(0.2)}
    first = explorer.view
    explorer.sliders["rho"].value = 1.5
    assert list(explorer.view.rho.values) == [0.0, 1.5]
    explorer.sliders["delay"].value = 0
    assert explorer.view.attrs["delay"] == "0" and not np.array_equal(explorer.view.loss, first.loss)
    assert "delay 0" in explorer.figure._suptitle.get_text() and len(explorer.figure.axes) == 3


def test_a_slider_it_does_not_have_is_one_line():
    pytest.importorskip("ipywidgets")
    with pytest.raises(nqm.NqmError, match="sliders for rho, lr, momentum, delay, noise, not beta"):
        rho_explorer(nqm.zhang(10), beta=0.5)


def test_in_a_real_kernel_the_explorer_shows_its_figure_and_a_slider_redraws_it():
    """A notebook run by nbclient in a real kernel (the default inline backend): the explorer's output
    widget holds a PNG of the drawing, and moving a slider replaces it with the new one."""
    pytest.importorskip("ipywidgets")
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    cells = ["import nqm\nfrom nqm.plots.explore import rho_explorer\n"
             "explorer = rho_explorer(nqm.zhang(30), steps=200)\nexplorer",
             "explorer.sliders['rho'].value = 1.5\nprint(explorer.view.rho.values.tolist())"]
    book = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    client = nbclient.NotebookClient(book, timeout=300, kernel_name="python3", store_widget_state=True)
    client.on_notebook_start = lambda **_: _listen_in_slices(client.kc)
    client.execute()
    assert "[0.0, 1.5]" in book.cells[1].outputs[0]["text"]
    state = book.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    outputs = [m["state"].get("outputs", []) for m in state.values() if m["model_name"] == "OutputModel"]
    pngs = [o for out in outputs for o in out if "image/png" in o.get("data", {})]
    assert len(pngs) == 1  # the drawing after the slider moved, in place of the first
    assert not any("text/plain" in o.get("data", {}) and "Figure size" in o["data"]["text/plain"]
                   for out in outputs for o in out)
    assert not any(o.get("output_type") == "display_data" and "image/png" in o.get("data", {})
                   for o in book.cells[0].outputs)  # no stray copy of the figure under the cell


def _listen_in_slices(kernel_client, every=1.0):
    """The notebook client's waits for the kernel's replies and outputs, made of one-second waits.
    On a loaded machine a single long wait can miss the wake-up of a reply that has arrived (the
    kernel's reply is stamped seconds in, the cell returns when the wait times out, 300 s later);
    each new wait looks at the socket first, so a missed one costs a second."""
    for channel in (kernel_client.shell_channel, kernel_client.iopub_channel):
        def get_msg(timeout=None, _get=channel.get_msg):
            async def sliced():
                deadline = None if timeout is None else time.monotonic() + timeout
                while True:
                    left = every if deadline is None else min(every, max(0.0, deadline - time.monotonic()))
                    try:
                        return await _get(timeout=left)
                    except queue.Empty:
                        if deadline is not None and time.monotonic() >= deadline:
                            raise
            return sliced()
        channel.get_msg = get_msg
