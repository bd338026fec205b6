"""Figures of the pipeline, one module per family; each function returns a matplotlib Figure.

The Agg backend is selected here, before pyplot is imported anywhere in the package, so
figures render on machines without a display (cluster nodes, CI).
"""

import matplotlib

matplotlib.use("Agg")
