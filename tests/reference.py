"""Plain float64 numpy loops of the README's conventions (model and update rules), written independently of the package: the oracle."""

import numpy as np


def ab_alpha(g, v, rho, labels, eps):
    """α per coordinate: 1 − ρ ⟨g,v⟩_i / max(‖g‖_i ‖v‖_i, ε) over the group of each coordinate."""
    if labels is None:  # global
        return 1.0 - rho * np.dot(g, v) / max(np.linalg.norm(g) * np.linalg.norm(v), eps)
    alpha = np.empty_like(g)
    for lab in np.unique(labels):
        i = labels == lab
        alpha[i] = 1.0 - rho * np.dot(g[i], v[i]) / max(np.linalg.norm(g[i]) * np.linalg.norm(v[i]), eps)
    return alpha


def run(lam, lr, momentum, delay, *, method="sgdm", rho=0.0, labels=None, micro_steps=1, mode="both",
        alpha_min=None, alpha_max=None, eps=1e-12, dampening=False, target=0.01, max_steps=10_000,
        diverge_factor=1e6, rotation=None, trace=False):
    """Noiseless run of one cell; returns (T, status) or the loss trace."""
    lam = np.asarray(lam, float)
    H = np.diag(lam) if rotation is None else rotation @ np.diag(lam) @ rotation.T
    w = np.ones(lam.size) if rotation is None else rotation @ np.ones(lam.size)
    loss = lambda x: 0.5 * x @ H @ x
    L0 = loss(w)
    history = [w.copy() for _ in range(delay + 1)]  # history[-1 - k] = w_{t-k}
    v = np.zeros_like(w)
    worker_v = [np.zeros_like(w) for _ in range(delay + 1)]  # shifted: v_{t-D..t}
    c = (1 - momentum) if dampening else 1.0
    losses = []
    for t in range(max_steps):
        g = H @ history[0]
        if method == "sgdm":
            v = momentum * v + c * g
            w = w - lr * v
        elif method == "nesterov":
            v = momentum * v + c * g
            w = w - lr * (c * g + momentum * v)
        elif method == "shifted":
            v = momentum * worker_v[0] + c * g
            worker_v = worker_v[1:] + [v]
            w = w - lr * v
        elif method == "ab":
            u, ref = momentum * v, v
            for _ in range(micro_steps):
                a = ab_alpha(g, ref, rho, labels, eps)
                if alpha_min is not None or alpha_max is not None:
                    a = np.clip(a, alpha_min, alpha_max)
                u = u + c * a / micro_steps * g
                ref = u
            plain = momentum * v + c * g
            if mode == "both":
                v, step = u, u
            elif mode == "vel-only":
                v, step = u, plain
            else:
                v, step = plain, u
            w = w - lr * step
        history = history[1:] + [w.copy()]
        L = loss(w)
        losses.append(L)
        if not trace:
            if L < target:
                return t + 1, 1
            if not L <= diverge_factor * L0:
                return t + 1, -1
    return np.array(losses) if trace else (max_steps, 0)


def run_averaged(lam, lr, momentum, delay, *, ema=0.0, schedule=None, target=0.01, max_steps=10_000,
                 diverge_factor=1e6, noise=0.0, seed=None, trace=False):
    """SGDM under a constant delay with an iterate average and a learning-rate schedule, by the rules
    written out: ``η_t = lr·f(t)`` (``schedule``: ``f``, a function of the step t = 0, 1, …),
    ``v ← m v + g_t``, ``w ← w − η_t v``, ``ŵ ← γ ŵ + (1 − γ) w`` (``ŵ₀ = w₀``); T and the status read on
    ŵ, divergence on w. With ``noise`` σ > 0, ``g_t = λ w_{t−D} + σ √λ ξ_t`` drawn from numpy's
    ``seed``. Returns (T, status), or with ``trace`` the losses of (ŵ, w) at every step."""
    lam = np.asarray(lam, float)
    rng = np.random.default_rng(seed)
    loss = lambda x: 0.5 * np.sum(lam * x * x)
    w = np.ones(lam.size)
    avg, v = w.copy(), np.zeros_like(w)
    history = [w.copy() for _ in range(delay + 1)]  # history[0] = w_{t−D}
    bound, losses = diverge_factor * loss(w), []
    for t in range(max_steps):
        g = lam * history[0] + (noise * np.sqrt(lam) * rng.standard_normal(lam.size) if noise else 0.0)
        eta = lr * (1.0 if schedule is None else schedule(t))
        v = momentum * v + g
        w = w - eta * v
        avg = ema * avg + (1 - ema) * w
        history = history[1:] + [w.copy()]
        if trace:
            losses.append((loss(avg), loss(w)))
            continue
        if not loss(w) <= bound:
            return t + 1, -1
        if loss(avg) < target:
            return t + 1, 1
    return np.array(losses) if trace else (max_steps, 0)


# The methods run_scheduled steps (sgdm, ab and shifted are run by run, the constant-delay loop).
SCHEDULED = ("nesterov", "staleness", "restart", "dc-asgd", "dana", "ormo", "ormo-da")


def run_scheduled(method, lam, lr, momentum, schedule, *, workers=1, lambda_dc=0.0, dampening=False):
    """Noiseless per-step losses of ``method`` on diag(λ) under an explicit schedule of
    ``(delay τ_t, worker k_t)``: the gradient of step t is taken at what was sent at iteration
    ``max(0, t − τ_t)``. A plain transcription of each method's published rules."""
    lam = np.asarray(lam, float)
    w = np.ones(lam.size)
    sent = [w.copy()]  # sent[s]: the weights workers received at iteration s
    v = np.zeros_like(w)
    per_worker = np.zeros((workers, lam.size))
    c = (1 - momentum) if dampening else 1.0
    losses = []
    for t, (tau, k) in enumerate(zip(*schedule)):
        s = max(0, t - int(tau))
        g = lam * sent[s]
        if method == "nesterov":
            v = momentum * v + c * g
            w = w - lr * (c * g + momentum * v)
        elif method == "staleness":
            v = momentum * v + c * g
            w = w - lr / max(1, int(tau)) * v
        elif method == "restart":
            if g @ v < 0:
                v = np.zeros_like(v)
            v = momentum * v + c * g
            w = w - lr * v
        elif method == "dc-asgd":
            v = momentum * v + c * (g + lambda_dc * g * g * (w - sent[s]))
            w = w - lr * v
        elif method == "dana":
            per_worker[k] = momentum * per_worker[k] + c * g
            w = w - lr * per_worker[k]
        elif method in ("ormo", "ormo-da"):
            K, beta = workers, momentum
            latest, before, group = -(-t // K), -(-(t - 1) // K), -(-s // K)
            rate = lr * (min(1.0, K / max(1, int(tau))) if method == "ormo-da" else 1.0)
            if t >= 1 and latest > before:
                w = w - beta * v  # v holds u = η-scaled momentum here
                v = beta * v
            v = v + beta ** (latest - group) * rate * g
            w = w - (1 - beta ** (latest - group + 1)) / (1 - beta) * rate * g
        else:
            raise ValueError(method)
        sent.append(w - lr * momentum * per_worker.sum(0) if method == "dana" else w.copy())
        losses.append(0.5 * np.sum(lam * w * w))
    return np.array(losses)


# ----------------------------------------------------------------- exact moments, the slow way

def transition(lam: float, lr: float, momentum: float, delay: int, noise: float, method: str = "sgdm",
               dampening: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(A, b, x0)`` of one eigencomponent with curvature ``lam``.

    The state is ``(w_t, w_{t−1}, …, w_{t−D}, v_t, v_{t−1}, …, v_{t−V+1})`` with ``V = 1`` for SGDM
    and ``V = D + 1`` for shifted momentum (whose step continues ``v_{t−D}``).
    """
    if method not in ("sgdm", "shifted", "nesterov"):
        raise ValueError(f"expected dynamics exist for the linear methods sgdm, shifted, nesterov, not {method!r}")
    c = 1.0 - momentum if dampening else 1.0
    vs = delay + 1 if method == "shifted" else 1
    n = delay + 1 + vs
    v_old = delay + 1 + vs - 1  # index of the velocity the step continues (v_t, or v_{t−D})
    A, b = np.zeros((n, n)), np.zeros(n)
    # v_{t+1} = m v_old + c λ w_{t−D} + c σ √λ ξ
    v_row = np.zeros(n)
    v_row[v_old] += momentum
    v_row[delay] += c * lam
    v_noise = c * noise * np.sqrt(lam)
    # w_{t+1} = w_t − η v_{t+1}; Nesterov: w_t − η (c g_t + m v_{t+1})
    #   = w_t − η ((1 + m) c g_t + m² v_t): (1 + m) v_{t+1} less m·m v_t
    look = 1.0 + momentum if method == "nesterov" else 1.0
    A[0] = -lr * look * v_row
    if method == "nesterov":
        A[0, v_old] += lr * momentum
    A[0, 0] += 1.0
    b[0] = -lr * look * v_noise
    A[1:delay + 1, :delay] = np.eye(delay)  # shift the weight history
    A[delay + 1] = v_row
    b[delay + 1] = v_noise
    A[delay + 2:, delay + 1:n - 1] = np.eye(vs - 1)  # shift the velocity history
    x0 = np.r_[np.ones(delay + 1), np.zeros(vs)]
    return A, b, x0


def expected_loss(problem, *, lr: float, momentum: float, delay: int = 0, noise: float = 0.0,
                  steps: int = 1000, method: str = "sgdm", dampening: bool = False) -> np.ndarray:
    """``E[L(w_t)]`` for ``t = 1 … steps`` (float64), exactly, by second moments per component."""
    total = np.zeros(steps)
    for lam in problem.eigenvalues:
        A, b, mean = transition(lam, lr, momentum, delay, noise, method, dampening)
        cov = np.zeros((mean.size, mean.size))
        for t in range(steps):
            mean, cov = A @ mean, A @ cov @ A.T + np.outer(b, b)
            total[t] += 0.5 * lam * (mean[0] ** 2 + cov[0, 0])
    return total


# ----------------------------------------------------------------- long runs of many cells at once

LONG_RUN_METHODS = ("sgdm", "ab", "adam", "ab-adam", "rmsprop", "lion", "dc-asgd", "restart")


def long_runs(method, lam, hyper, *, delay=0, steps=200_000, rotation=None, noise=0.0, seed=0, target=0.01,
              diverge_factor=1e6, group="global", eps=1e-12, blocks=1000):
    """Many cells of one method, vectorised over cells, in float64: the long runs the settled test
    is measured against. ``hyper``: per-cell arrays (``lr``, ``momentum``, ``rho``, ``b1``, ``b2``,
    ``eps``, ``decay``, ``weight_decay``, ``lambda_dc``; the optax defaults where left out).
    Constant delay ``D``, gradient ``H w_{t−D} + σ ξ`` with ``ξ ~ N(0, H)`` (this loop's own draws),
    ``w₀ = 1`` in the eigenbasis. Written from the update rules (optax's documented ones for Adam,
    RMSProp and Lion), not from nqm.

    Returns a dict of per-cell arrays: ``first`` (the first passage T, 0 if never), ``exit`` and
    ``last_exit`` (the first and the last step at or above the target after T, 0 if none), ``diverged``
    (the loss left ``diverge_factor · L(w₀)`` or was not finite), ``floor`` (braked methods: the
    first step after T whose ‖g‖‖u‖ fell below ε, braking's floor; 0 if none), and ``block_max`` and
    ``block_mean`` ``(cells, blocks)``: the largest and the mean loss of each of ``blocks`` equal
    runs of steps, every step counted (∞ once diverged), from which :func:`level_after` reads a
    run's level after its own first passage.
    """
    lam = np.asarray(lam, np.float64)
    hyper = {k: np.asarray(v, np.float64) for k, v in hyper.items()}
    cells = next(iter(hyper.values())).size
    get = lambda name, default: hyper.get(name, np.full(cells, default))[:, None]  # noqa: E731
    lr = get("lr", 0.0)
    if rotation is None:
        hvp = lambda w: w * lam  # noqa: E731
        w = np.ones((cells, lam.size))
    else:
        hessian = (rotation * lam) @ rotation.T
        hvp = lambda w: w @ hessian  # noqa: E731  (H is symmetric)
        w = np.tile(rotation @ np.ones(lam.size), (cells, 1))
    loss = lambda w: 0.5 * np.sum(w * hvp(w), axis=1)  # noqa: E731
    start = loss(w[:1])[0]
    history = [w.copy() for _ in range(delay + 1)]  # history[0] = w_{t−D}
    m1, m2 = np.zeros_like(w), np.zeros_like(w)  # velocity / first moment, second moment
    rng = np.random.default_rng(seed)
    out = {k: np.zeros(cells, np.int64) for k in ("first", "exit", "last_exit", "floor")}
    out["diverged"], out["steps"] = np.zeros(cells, bool), steps
    if steps % blocks:
        raise ValueError(f"steps ({steps}) must be a multiple of blocks ({blocks})")
    size = steps // blocks
    block_max, block_sum = np.zeros((cells, blocks)), np.zeros((cells, blocks))
    for t in range(1, steps + 1):
        g = hvp(history[0])
        if noise:
            z = rng.standard_normal(lam.size) * np.sqrt(lam)
            g = g + noise * (z if rotation is None else rotation @ z)
        u, raw = None, g  # what braking measures against, and the gradient it scales
        if method in ("sgdm", "ab", "dc-asgd", "restart"):
            m = get("momentum", 0.0)
            if method == "ab":
                u = m1
                g = _brake(g, u, get("rho", 0.5), group, eps)
            elif method == "dc-asgd":
                g = g + get("lambda_dc", 0.04) * g * g * (history[-1] - history[0])
            elif method == "restart":
                m1 = np.where(np.sum(g * m1, axis=1, keepdims=True) < 0, 0.0, m1)
            m1 = m * m1 + g
            w = w - lr * m1
        elif method in ("adam", "ab-adam"):
            b1, b2 = get("b1", 0.9), get("b2", 0.999)
            if method == "ab-adam":
                u = m1
                g = _brake(g, u, get("rho", 0.5), "global", 1e-12)
            m1 = b1 * m1 + (1 - b1) * g
            m2 = b2 * m2 + (1 - b2) * g * g
            step = (m1 / (1 - b1 ** t)) / (np.sqrt(m2 / (1 - b2 ** t) + get("eps_root", 0.0)) + get("eps", 1e-8))
            w = w - lr * step
        elif method == "rmsprop":
            decay, m = get("decay", 0.9), get("momentum", 0.0)
            m2 = decay * m2 + (1 - decay) * g * g
            m1 = m * m1 + g / np.sqrt(m2 + get("eps", 1e-8))
            w = w - lr * m1
        elif method == "lion":
            b1, b2 = get("b1", 0.9), get("b2", 0.99)
            direction = np.sign((1 - b1) * g + b1 * m1)
            m1 = b2 * m1 + (1 - b2) * g
            w = w - lr * (direction + get("weight_decay", 1e-3) * w)
        else:
            raise ValueError(method)
        bad = out["diverged"]
        w = np.where(bad[:, None], 0.0, w)  # a diverged cell is done: keep its numbers finite
        history = history[1:] + [w]
        now = loss(w)
        diverged = ~bad & ~(now <= diverge_factor * start)
        out["diverged"] |= diverged
        now = np.where(out["diverged"], np.inf, now)
        reached = out["first"] > 0
        out["first"][~reached & (now < target) & ~out["diverged"]] = t
        out["last_exit"][reached & (now >= target)] = t
        out["exit"][reached & (out["exit"] == 0) & (now >= target)] = t
        if u is not None:
            small = np.sqrt(np.sum(raw * raw, axis=1)) * np.sqrt(np.sum(u * u, axis=1)) < eps
            out["floor"][reached & (out["floor"] == 0) & small] = t
        block = (t - 1) // size
        block_max[:, block] = np.maximum(block_max[:, block], now)
        block_sum[:, block] += now
    out["block_max"], out["block_mean"] = block_max, block_sum / size
    return out


def level_after(runs, noisy):
    """Each long run's level over the second half of what follows its own first passage T (whole
    blocks): without noise its largest loss, with noise its mean; NaN where it never reached the
    target. A run that diverged has level ∞."""
    blocks = runs["block_max"].shape[1]
    out = np.full(runs["first"].size, np.nan)
    for i, first in enumerate(runs["first"]):
        if first == 0:
            continue
        if runs["diverged"][i]:
            out[i] = np.inf
            continue
        # blocks wholly inside ((T + end)/2, end]: at least the last one
        start = int(np.ceil(blocks * (first / runs["steps"] + 1) / 2))
        start = min(start, blocks - 1)
        out[i] = runs["block_mean"][i, start:].mean() if noisy else runs["block_max"][i, start:].max()
    return out


def _brake(g, u, rho, group, eps):
    """``α g`` with ``α = 1 − ρ ⟨g, u⟩ / max(‖g‖ ‖u‖, ε)`` per group (global or element), per cell."""
    if group == "global":
        cos = np.sum(g * u, axis=1, keepdims=True) / np.maximum(
            np.sqrt(np.sum(g * g, axis=1, keepdims=True)) * np.sqrt(np.sum(u * u, axis=1, keepdims=True)), eps)
    else:
        cos = g * u / np.maximum(np.abs(g) * np.abs(u), eps)
    return (1.0 - rho * cos) * g
