"""Figures: one module per figure kind, each returning a matplotlib Figure (Agg, no pyplot)."""
