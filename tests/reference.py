"""Plain float64 numpy loops of DESIGN.md §1–2, written independently of the package: the oracle."""

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
