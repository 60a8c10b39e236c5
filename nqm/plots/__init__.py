"""Figures: heatmaps, stability curves, diagnostics."""
