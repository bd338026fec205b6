"""The measurement engine: takes a `RunRequest`, gives the run document and its rows.

The manager side (`runner`: request to documents; `manager`: drives worker processes under
the budget) starts workers; the worker side (`worker`: the child's protocol; `build`: the
run's data and `Training`; `step`, `feeders`, `timing`, `stability`) never imports it.
`stopping` holds the estimate and the stopping rule, `warmserver` the shared fork server,
`workerlog` the relay of a worker's stdout and stderr into its job's log, `rehearsal` recorded H100 timings replayed through the engine on a fake clock.
"""
