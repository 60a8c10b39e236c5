#!/usr/bin/env bash
# nqm on an accelerator, in one go: the machine, `nqm bench` at its default size, then one panel of
# Figure 1 at the paper's scale (AB, rho = 0.5, D = 4, sigma = 0.05, 32 x 32 lr x momentum, N = 10^4,
# 500,000 steps) by first passage and settled, each timed, and the same panel in the automatic blocks
# against one block of all its cells (scripts/bench_blocks.py). Every result lands in OUTDIR.
#
#   bash scripts/gpu_check.sh OUTDIR [SECONDS] [SIZE]
#
# SECONDS: stop everything by then (default 540). SIZE "smoke" runs the panels tiny, on any CPU, and
# no bench (`nqm bench --quick` is the bench's own smoke size).
set -u
out=${1:?usage: bash scripts/gpu_check.sh OUTDIR [SECONDS] [SIZE]}
end=$((SECONDS + ${2:-540}))
mkdir -p "$out"
exec > >(tee "$out/log.txt") 2>&1  # everything printed also lands beside the results
left() { echo $((end - SECONDS > 1 ? end - SECONDS : 1)); }
py=${PYTHON:-python3}
grid="--lr geom:0.01:4:32 --momentum lin:0:0.98:32 --dim 10000 --max-steps 500000"
smoke=""
if [ "${3:-}" = smoke ]; then grid="--lr geom:0.01:4:3 --momentum lin:0:0.98:3 --dim 50 --max-steps 2000"; smoke=1; fi

(nvidia-smi -L 2>/dev/null; $py -c "import sys, jax; print('python', sys.version.split()[0], 'jax', jax.__version__, jax.devices())") | tee "$out/machine.txt"
[ -z "$smoke" ] && timeout "$(( $(left) < 240 ? $(left) : 240 ))" $py -m nqm bench 2>&1 | tee "$out/bench.txt"
for mode in first_passage settled; do
  flag=""; [ $mode = first_passage ] && flag=--first-passage
  start=$SECONDS
  timeout "$(left)" $py -m nqm sweep --method ab --rho 0.5 --delay 4 --noise 0.05 $grid $flag \
      --out "$out/panel_$mode.nc" --force 2> "$out/panel_$mode.log"
  echo "panel $mode: exit $? after $((SECONDS - start)) s"; tail -c 600 "$out/panel_$mode.log"; echo
done
size=""; [ -n "$smoke" ] && size=--smoke
timeout "$(left)" $py scripts/bench_blocks.py $size --out "$out"
