"""nnperf: measure how fast deep networks train on a machine, and why.

The package holds everything that computes; the Snakemake workflow around it only decides
what runs where. Every verb of the `nnperf` command is usable without Snakemake.
"""

__version__ = "0.1.0"
