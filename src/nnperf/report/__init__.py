"""The top layer beside `study`: tables, figures and the written summary of a study.

Takes the files the pipeline wrote and gives the tables (`aggregate`, `training_table`,
`machines` merges machines) and the report: `results` reads results folders into one
`ResultSet`, `sections` holds one module per section of the summary (its table, its
sentences and the section), `render` lists the sections and writes them as HTML and Markdown
(`templates/`), `plots` draws the figures. Shared by the sections: `format` (how a
number is written and a configuration named, ordered and quoted), `bounds` (what binds each
step on the roofline), `outline` (the document's parts).
"""
