"""The figure-script helper: data beside the PNG with its regime, drawn from the file as written,
redrawn without computing, claims recorded, every file written whole or not at all."""

import json

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import xarray as xr  # noqa: E402

from nqm.plots.heatmap import steps_norm  # noqa: E402
from nqm.plots.script import FigureScript, stack, suptitle  # noqa: E402

CALLS = []


def compute(smoke, scale=1.0):
    CALLS.append((smoke, scale))
    return xr.Dataset({"y": ("x", scale * np.arange(4.0))}, coords={"x": np.arange(4)}, attrs={"dim": 4, "flag": True})


def draw(ds):
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot(ds.x, ds.y)
    return fig


def claims(ds):
    return {"last": float(ds.y[-1]), "count": np.int64(ds.sizes["x"]), "missing": float("nan")}


def never(*args, **kwargs):
    raise AssertionError("compute must not run")


TOY = FigureScript("toy", compute, draw, claims, options={"--scale": dict(type=float, default=1.0)})


def test_data_claims_and_regime_are_written_beside_the_png(tmp_path):
    out = tmp_path / "toy.png"
    assert TOY.main(["--out", str(out), "--scale", "2"]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    ds = xr.open_dataset(tmp_path / "toy.nc", engine="h5netcdf").load()
    np.testing.assert_array_equal(ds.y, 2 * np.arange(4.0))
    assert ds.attrs["figure"] == "toy" and ds.attrs["size"] == "full" and ds.attrs["flag"] == 1
    assert json.loads(ds.attrs["options"]) == {"scale": 2.0} and ds.attrs["wall_seconds"] >= 0
    stored = json.loads((tmp_path / "toy.claims.json").read_text())
    assert stored == {"figure": "toy", "data": "toy.nc", "claims": {"last": 6.0, "count": 4, "missing": None}}


def test_smoke_comes_from_the_environment_too(tmp_path, monkeypatch):
    monkeypatch.setenv("NQM_SMOKE", "1")
    CALLS.clear()
    TOY.main(["--out", str(tmp_path / "toy.png")])
    assert CALLS == [(True, 1.0)]
    assert xr.open_dataset(tmp_path / "toy.nc", engine="h5netcdf").attrs["size"] == "smoke"


def test_redraw_draws_the_same_figure_from_the_data_without_computing(tmp_path):
    out = tmp_path / "toy.png"
    TOY.main(["--out", str(out)])
    first, claims_before = out.read_bytes(), (tmp_path / "toy.claims.json").read_text()
    out.unlink()
    redraw = FigureScript("toy", never, draw, claims, options=TOY.options)
    assert redraw.main(["--out", str(out), "--redraw"]) == 0
    assert out.read_bytes() == first
    assert (tmp_path / "toy.claims.json").read_text() == claims_before


def test_a_dict_is_written_as_json_with_its_regime(tmp_path):
    small = FigureScript("small", lambda smoke: {"values": np.arange(3), "mean": np.float64(1.0)},
                         lambda data: draw(xr.Dataset({"y": ("x", data["values"])}, coords={"x": np.arange(3)})),
                         lambda data: {"mean": data["mean"]})
    small.main(["--out", str(tmp_path / "small.png")])
    data = json.loads((tmp_path / "small.json").read_text())
    assert data["values"] == [0, 1, 2] and data["regime"]["figure"] == "small"
    assert json.loads((tmp_path / "small.claims.json").read_text())["claims"] == {"mean": 1.0}


def test_redraw_without_data_is_one_line(tmp_path, capsys):
    assert FigureScript("toy", never, draw).main(["--out", str(tmp_path / "toy.png"), "--redraw"]) == 2
    err = capsys.readouterr().err
    assert "no data beside" in err and "run without --redraw" in err and err.count("\n") == 1


def test_an_unwritable_output_fails_before_computing(tmp_path, capsys):
    assert FigureScript("toy", never, draw).main(["--out", str(tmp_path / "missing" / "toy.png")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert FigureScript("toy", never, draw).main(["--out", str(tmp_path / "toy.pdf")]) == 2


def test_a_failed_write_leaves_the_previous_figure_whole(tmp_path, monkeypatch):
    out = tmp_path / "toy.png"
    TOY.main(["--out", str(out)])
    before = out.read_bytes()

    def full_disk(*args):
        raise OSError(28, "No space left on device")

    import nqm.io

    monkeypatch.setattr(nqm.io.os, "replace", full_disk)
    assert TOY.main(["--out", str(out), "--redraw"]) == 2
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["toy.claims.json", "toy.nc", "toy.png"]  # no temp files


def test_a_figure_that_fails_to_render_leaves_the_previous_png(tmp_path):
    out = tmp_path / "toy.png"
    TOY.main(["--out", str(out)])
    before = out.read_bytes()

    class Broken:
        def savefig(self, buffer, **kwargs):
            buffer.write(b"\x89PNG half a figure")
            raise RuntimeError("renderer failed")

    with pytest.raises(RuntimeError):
        FigureScript("toy", never, lambda data: Broken()).main(["--out", str(out), "--redraw"])
    assert out.read_bytes() == before


def test_suptitle_wraps_every_line_to_the_figure_width():
    fig = plt.figure(figsize=(4, 3))
    title = suptitle(fig, "word " * 40 + "\nsecond line", fontsize=10).get_text()
    width = int(4 * 72 / (10 * 0.55))
    lines = title.split("\n")
    assert len(lines) > 3 and all(len(line) <= width for line in lines) and lines[-1] == "second line"
    plt.close(fig)


def test_stack_labels_the_new_dimension_and_keeps_shared_attributes():
    a = xr.Dataset({"v": ("x", [1, 2])}, attrs={"shared": 1, "method": "sgdm"})
    b = xr.Dataset({"v": ("x", [3, 4])}, attrs={"shared": 1, "method": "ab"})
    out = stack({"first": a, "second": b}, "panel")
    assert list(out.panel.values) == ["first", "second"] and out.v.sel(panel="second").values.tolist() == [3, 4]
    assert out.attrs == {"shared": 1}


def test_steps_norm_spans_the_reached_cells_of_all_panels():
    def panel(steps, status):
        return xr.Dataset({"steps": ("lr", steps), "status": ("lr", status)})

    norm = steps_norm(panel([5, 900, 7], [1, 0, 1]), panel([300, 2], [1, -1]))
    assert (norm.vmin, norm.vmax) == (5, 300)
    empty = steps_norm(panel([5], [0]))
    assert (empty.vmin, empty.vmax) == (1, 10)


def test_new_data_replaces_data_of_the_other_kind(tmp_path):
    out = tmp_path / "toy.png"
    (tmp_path / "toy.json").write_text('{"old": 1}')
    TOY.main(["--out", str(out)])
    assert not (tmp_path / "toy.json").exists() and (tmp_path / "toy.nc").exists()


def test_an_interrupted_figure_is_one_line_that_says_it_resumes(tmp_path, capsys):
    def interrupted(smoke, checkpoint=None):
        raise KeyboardInterrupt

    resumable = FigureScript("toy", interrupted, draw, claims, checkpoint=True)
    assert resumable.main(["--out", str(tmp_path / "toy.png")]) == 130
    assert capsys.readouterr().err == "toy: interrupted; the same command resumes from its checkpoint\n"
    assert not (tmp_path / "toy.png").exists()
    plain = FigureScript("toy", lambda smoke: interrupted(smoke), draw, claims)
    assert plain.main(["--out", str(tmp_path / "toy.png")]) == 130
    assert capsys.readouterr().err == "toy: interrupted\n"
