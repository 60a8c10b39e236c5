"""The noisy quadratic model: spectra, optional rotation, loss and per-component loss.

``L(w) = ½ wᵀ H w`` with ``H = Q diag(λ) Qᵀ`` (``Q = I`` unless rotated). Gradients are
``g = H w_{t−D} + σ ξ`` with ``ξ ~ N(0, H)``; the initial point is ``w₀ = Q·1`` (all ones in the
eigenbasis), or ``Q·u₀`` for a problem given its own initial error ``u₀`` (a real model's NQM
starts where the model starts, :mod:`nqm.transfer`). Everything here is plain numpy in float64: the engine casts what it needs;
per-step energies are recorded on device by :mod:`nqm.diagnostics`.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib

import numpy as np

from nqm.errors import NqmError
from nqm.validate import BOUNDS, count

# Dense rotations cost N² memory and N² work per step: refuse sizes where that is a mistake.
MAX_ROTATED_DIM = 4096


@dataclasses.dataclass(frozen=True, eq=False)
class Problem:
    """A quadratic ``½ wᵀ H w`` given by its eigenvalues and an optional rotation.

    Attributes:
      eigenvalues: ``λ_1 … λ_N`` (float64, positive, finite).
      spectrum: a short human-readable description, stored in result attributes.
      rotation_seed: seed of the Haar-random rotation ``Q``, or ``None`` (axis-aligned).
      initial: the initial error ``u₀`` per eigencomponent (the eigenbasis coordinates of ``w₀``,
        in the order of ``eigenvalues``), or ``None``: all ones, the convention (stored as
        ``None`` when given as all ones, so that results and digests are the same).
    """

    eigenvalues: np.ndarray
    spectrum: str = "explicit"
    rotation_seed: int | None = None
    initial: np.ndarray | None = None

    def __post_init__(self):
        lam = _eigenvalues(self.eigenvalues)
        if not np.all(np.isfinite(lam)) or np.any(lam <= 0):
            raise NqmError("eigenvalues must be finite and > 0 (the model is a convex quadratic)")
        if lam.size > BOUNDS["dim"]:
            raise NqmError(f"a problem has at most {BOUNDS['dim']:,} eigenvalues, got {lam.size:,}")
        if self.rotation_seed is not None:
            object.__setattr__(self, "rotation_seed", count(self.rotation_seed, "rotation_seed", low=0))
        if self.rotation_seed is not None and lam.size > MAX_ROTATED_DIM:
            raise NqmError(
                f"rotation needs a dense {lam.size}x{lam.size} Hessian; use dim <= {MAX_ROTATED_DIM} "
                "or drop --rotate"
            )
        lam.setflags(write=False)
        object.__setattr__(self, "eigenvalues", lam)
        object.__setattr__(self, "initial", _initial(self.initial, lam.size))

    @property
    def dim(self) -> int:
        return self.eigenvalues.size

    @property
    def lam_max(self) -> float:
        return float(self.eigenvalues.max())

    @functools.cached_property
    def rotation(self) -> np.ndarray | None:
        """``Q`` (Haar-orthogonal, from ``rotation_seed``), or ``None``."""
        if self.rotation_seed is None:
            return None
        return haar_orthogonal(self.dim, self.rotation_seed)

    @property
    def u0(self) -> np.ndarray:
        """The initial error per eigencomponent: ``initial``, or all ones."""
        return np.ones(self.dim) if self.initial is None else self.initial

    @property
    def w0(self) -> np.ndarray:
        """Initial weights in parameter coordinates: ``Q u₀`` (all ones in the eigenbasis by default)."""
        return self.u0 if self.rotation is None else self.rotation @ self.u0

    def with_rotation(self, seed: int | None) -> "Problem":
        """The same spectrum, rotated by the Haar-random ``Q`` drawn from ``seed``."""
        return dataclasses.replace(self, rotation_seed=None if seed is None else int(seed))

    def to_eigenbasis(self, w: np.ndarray) -> np.ndarray:
        """Coordinates ``Qᵀ w`` (the last axis of ``w`` is the parameter axis)."""
        w = np.asarray(w, dtype=np.float64)
        return w if self.rotation is None else w @ self.rotation

    def component_loss(self, w: np.ndarray) -> np.ndarray:
        """Per-eigencomponent loss ``½ λ_k u_k²`` with ``u = Qᵀ w``."""
        u = self.to_eigenbasis(w)
        return 0.5 * self.eigenvalues * u**2

    def loss(self, w: np.ndarray) -> np.ndarray:
        """``L(w) = ½ wᵀ H w`` (summed over the last axis)."""
        return self.component_loss(w).sum(-1)

    @property
    def initial_loss(self) -> float:
        if self.initial is None:
            return float(0.5 * self.eigenvalues.sum())
        return float(0.5 * np.sum(self.eigenvalues * self.initial**2))

    def describe(self) -> dict:
        """Attributes that identify the problem in a saved result."""
        return {
            "spectrum": self.spectrum,
            "dim": self.dim,
            "lam_max": self.lam_max,
            "lam_min": float(self.eigenvalues.min()),
            "rotation_seed": -1 if self.rotation_seed is None else self.rotation_seed,
            # Every eigenvalue to the last bit: what a checkpoint compares (the label shows a few).
            "spectrum_sha256": hashlib.sha256(self.eigenvalues.astype("<f8").tobytes()).hexdigest(),
            # only where the start is not the convention's, so that every other result stays as it was
            **({} if self.initial is None else {
                "initial_loss": self.initial_loss,
                "initial_sha256": hashlib.sha256(self.initial.astype("<f8").tobytes()).hexdigest()}),
        }


def zhang(dim: int = 10_000) -> Problem:
    """The spectrum ``λ_j = 1/j, j = 1…N`` of Zhang et al. (2019), the AB paper's default.

    Args:
      dim: the dimension ``N``, a positive integer.

    Returns:
      The problem.
    """
    dim = _positive_int(dim, "dim")
    return Problem(1.0 / np.arange(1, dim + 1), spectrum=f"zhang(1/j, N={dim})")


def loguniform(dim: int = 32, lo: float = 1e-4, hi: float = 1.0) -> Problem:
    """``N`` eigenvalues log-spaced from ``hi`` down to ``lo`` (AB paper App. K.4: 32, 1e-4, 1).

    Args:
      dim: the number of eigenvalues ``N``.
      lo, hi: the smallest and largest eigenvalue, ``0 < lo ≤ hi``.

    Returns:
      The problem.

    Raises:
      NqmError: a bound is not finite or not ordered.
    """
    dim = _positive_int(dim, "dim")
    if not (np.isfinite(lo) and np.isfinite(hi) and 0 < lo <= hi):
        raise NqmError(f"log-uniform spectrum needs 0 < lo <= hi, got lo={lo}, hi={hi}")
    return Problem(np.geomspace(hi, lo, dim), spectrum=f"loguniform(N={dim}, lo={lo:g}, hi={hi:g})")


def explicit(eigenvalues, initial=None) -> Problem:
    """A problem with the given eigenvalues (and initial error).

    Args:
      eigenvalues: the eigenvalues, a number or a 1-D array.
      initial: the initial error per eigencomponent (as many values as eigenvalues), or ``None``
        for all ones.

    Returns:
      The problem (its label shows the first 8 eigenvalues).

    Raises:
      NqmError: eigenvalues or an initial error that are not as above.
    """
    lam = _eigenvalues(np.atleast_1d(eigenvalues) if np.ndim(eigenvalues) == 0 else eigenvalues)
    return Problem(lam, spectrum="explicit(" + ",".join(f"{x:g}" for x in lam[:8]) + (",…)" if lam.size > 8 else ")"),
                   initial=initial)


def haar_orthogonal(dim: int, seed: int) -> np.ndarray:
    """A Haar-distributed orthogonal matrix: QR of a Gaussian matrix with the sign fix of R's diagonal.

    Args:
      dim: the matrix's size.
      seed: the seed of the Gaussian matrix.

    Returns:
      An orthogonal ``(dim, dim)`` float64 array.
    """
    rng = np.random.default_rng(seed)
    q, r = np.linalg.qr(rng.standard_normal((dim, dim)))
    return q * np.sign(np.diag(r))


def _positive_int(x, name: str) -> int:
    return count(x, name, high=BOUNDS["dim"])


def _initial(values, dim: int) -> np.ndarray | None:
    """The initial error as a read-only float64 array of ``dim`` finite values, not all zero
    (``None`` for all ones), or one error line."""
    if values is None:
        return None
    u = _eigenvalues(np.atleast_1d(values) if np.ndim(values) == 0 else values, "initial")
    if u.size != dim:
        raise NqmError(f"initial must have one value per eigenvalue ({dim:,}), got {u.size:,}")
    if not np.all(np.isfinite(u)) or not np.any(u != 0):
        raise NqmError("initial (the initial error per eigencomponent) must be finite and not all zero "
                       "(at zero error the model starts at its minimum)")
    if np.all(u == 1.0):
        return None
    u = u.copy()
    u.setflags(write=False)
    return u


def _eigenvalues(values, name: str = "eigenvalues") -> np.ndarray:
    """``values`` as a 1-D float64 array, or one error line (strings, nesting, None refused)."""
    try:
        raw = np.asarray(values)
        lam = None if raw.dtype.kind in "USbO" else raw.astype(np.float64)
    except (TypeError, ValueError, OverflowError):
        lam = None
    if lam is None or lam.ndim != 1 or lam.size == 0:
        shown = " ".join(repr(values).split())
        raise NqmError(f"{name} must be a non-empty 1-D list of numbers, got {shown[:80]}{'…' if len(shown) > 80 else ''}")
    return lam
