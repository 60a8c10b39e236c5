"""What a result's last bits depend on beyond its settings: the versions of the numeric libraries,
the CPU and the XLA flags (XLA:CPU and numpy pick kernels per CPU: vector width, FMA contraction,
reduction order), and the accelerator where one ran the cells (a GPU's kernels round differently
again). Recorded in every result (attribute ``platform``), never part of its identity:
the same settings on another machine are the same computation, equal within rounding.
No JAX is imported here: the versions come from the installed packages' metadata.
"""

from __future__ import annotations

import importlib.metadata
import os
import pathlib
import platform

LIBRARIES = ("jax", "jaxlib", "numpy", "scipy", "xarray")


def describe() -> dict:
    """The machine and environment as fields: library versions, architecture, CPU vendor and model,
    its widest vector instruction set, the XLA flags and numpy's disabled CPU features (None where
    unknown, "" where not set)."""
    info = _cpuinfo()
    fields = {name: _version(name) for name in LIBRARIES}
    fields.update(
        machine=platform.machine() or None,
        cpu_vendor=info.get("vendor_id") or info.get("CPU implementer") or None,
        cpu_model=info.get("model name") or info.get("CPU part") or platform.processor() or None,
        cpu_isa=vector_isa(info),
        xla_flags=" ".join(sorted(os.environ.get("XLA_FLAGS", "").split())),
        npy_disable_cpu_features=os.environ.get("NPY_DISABLE_CPU_FEATURES", ""),
    )
    return fields


def platform_line(devices=()) -> str:
    """:func:`describe` in one line, as results record it.

    Args:
      devices: the JAX devices that ran the cells (``jax.devices()``): an accelerator among them is
        named at the end (e.g. ``"; gpu: 1 x NVIDIA H200"``); none, or CPUs, add nothing.

    Returns:
      The line.
    """
    d = describe()
    versions = ", ".join(f"{name} {d[name]}" for name in LIBRARIES)
    flags = "; ".join(f"{k}={d[k]}" for k in ("xla_flags", "npy_disable_cpu_features") if d[k])
    line = f"{d['machine']} {d['cpu_vendor']} '{d['cpu_model']}' {d['cpu_isa']}; {versions}" + (f"; {flags}" if flags else "")
    return line + "".join(f"; {kind}" for kind in accelerators(devices))


def accelerators(devices) -> list[str]:
    """The accelerators among JAX devices, one entry per platform and model.

    Args:
      devices: JAX devices (anything with ``platform`` and ``device_kind``).

    Returns:
      e.g. ``["gpu: 1 x NVIDIA H200"]``; empty on CPU (:func:`describe` describes the CPU).
    """
    counts = {}
    for device in devices:
        if device.platform != "cpu":
            key = f"{device.platform}: %d x {device.device_kind}"
            counts[key] = counts.get(key, 0) + 1
    return [key % count for key, count in counts.items()]


def vector_isa(info: dict) -> str | None:
    """The widest vector instruction set among a CPU's flags (x86-64 or Arm), or None.

    Args:
      info: the fields of one processor in /proc/cpuinfo (``flags`` on x86-64, ``Features`` on Arm).

    Returns:
      ``"avx512f"``, ``"avx2"``, ``"avx"``, ``"sse4_2"``, ``"sve2"``, ``"sve"``, ``"neon"`` or ``None``.
    """
    flags = set((info.get("flags") or info.get("Features") or "").split())
    for isa in ("avx512f", "avx2", "avx", "sse4_2", "sve2", "sve"):
        if isa in flags:
            return isa
    return "neon" if "asimd" in flags else None


def _cpuinfo() -> dict:
    """The first processor's fields of /proc/cpuinfo (empty where there is none)."""
    try:
        text = pathlib.Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    info = {}
    for line in text.splitlines():
        if not line.strip():
            if info:
                break
            continue
        key, _, value = line.partition(":")
        info.setdefault(key.strip(), value.strip())
    return info


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None
