"""Figures: each module turns tidy tables into a matplotlib Figure (Agg), nothing else."""
