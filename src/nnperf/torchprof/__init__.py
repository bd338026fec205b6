"""Operator profiles: a few training steps under torch.profiler, on any device.

Takes an `OperatorProfileRequest` and gives a trace and its tables: `profile` runs the
steps, `analysis` reads the trace (operators, layers, busy time, memory) and `memory` says
what a step's peak memory holds.
"""
