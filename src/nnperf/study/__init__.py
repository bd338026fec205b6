"""A study as a whole, outside Snakemake (the top layer beside `report`).

Takes config files and gives what a study is and costs: `loading` reads it as the workflow
does, `selection` says which configurations each stage runs, `plan` estimates its jobs,
`preflight` checks what it needs from this machine and `stages` runs it stage by stage.
"""
