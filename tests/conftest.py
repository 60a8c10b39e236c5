import os

# Two CPU devices even on a one-core machine, so the multi-device path is always exercised.
os.environ.setdefault("NQM_CPU_DEVICES", "2")
os.environ.setdefault("MPLBACKEND", "Agg")
