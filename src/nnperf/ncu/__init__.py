"""Nsight Compute: one NVTX-marked training step profiled under `ncu`, and its kernels.

Takes a `ProfileStepRequest` and gives an `.ncu-rep`, its raw CSV export and the tidy
per-kernel table: `metrics` (which counters, how to run `ncu`, how to read its CSV),
`command` (running it on this machine), `profiled_step` (the step it profiles, with a
calibration GEMM) and `kernels` (kernel kinds and `kernels.csv`).
"""
