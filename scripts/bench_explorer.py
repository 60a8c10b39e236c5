"""How fast the ρ explorer redraws: one slider move reruns AB and SGDM on one cell (programs already
compiled) and redraws three panels. Prints the seconds per redraw at N = 1,000 and 2,000 steps, and
the ratio to one ``nqm.trajectory`` of the same cell (what a redraw costs beyond its two runs).

    python scripts/bench_explorer.py [--dim 1000] [--steps 2000] [--repeat 5]
"""

import argparse

import matplotlib

matplotlib.use("Agg")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)

    import nqm
    from nqm.bench import timed
    from nqm.plots.explore import DEFAULTS, draw_rho_view, rho_view

    nqm.use_every_core()
    problem = nqm.zhang(args.dim)
    cell = {k: v for k, v in DEFAULTS.items() if k != "rho"}
    figure = draw_rho_view(rho_view(problem=problem, steps=args.steps))  # compiles
    redraws, runs = [], []
    for i in range(args.repeat):
        rho = 0.25 + 0.25 * i

        def slider_moved():  # what the explorer does then: a new view, drawn on its canvas
            draw_rho_view(rho_view(rho, **{**cell, "momentum": 0.85 + 0.01 * i}, problem=problem, steps=args.steps), figure)
            figure.canvas.draw()

        redraws.append(timed(slider_moved)[0])
        runs.append(timed(lambda: nqm.trajectory("ab", rho=rho, **cell, problem=problem, steps=args.steps, stride=10,
                                                 record=("loss", "energy")))[0])
    redraw, run = sorted(redraws)[len(redraws) // 2], sorted(runs)[len(runs) // 2]
    print(f"N = {args.dim:,}, {args.steps:,} steps: a redraw takes {redraw:.2f} s (median of {args.repeat}), "
          f"{redraw / run:.1f}x one trajectory of the cell ({run:.2f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
