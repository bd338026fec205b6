"""The report's sections, one module each: the table a section shows, the records it finds
(worded by `nnperf.report.wording`) and `build(page)`, which returns the section (None where
it has nothing to show); `nnperf.report.render` lists them in the order a reader meets them.
"""
