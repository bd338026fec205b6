"""The report's sections, one module each: the table a section shows, the sentences it
writes and `build(page)`, which returns the section (None where it has nothing to show).

`nnperf.report.document` lists them in the order a reader meets them; `key_findings` is the
short list above them. A section's figures are drawn by `nnperf.report.plots`.
"""
