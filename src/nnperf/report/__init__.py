"""The top layer beside `study`: tables, figures and the written summary of a study.

Takes the files the pipeline wrote and gives the tables (`aggregate`), the report:
`results` reads a results folder, `findings`, `operator_findings` and `time_to_accuracy`
say what the numbers mean, `format` writes them, `machines` merges machines, `document`
lays out the sections and renders them (`templates/`), and `plots` draws the figures.
"""
