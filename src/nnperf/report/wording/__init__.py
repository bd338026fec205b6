"""Findings, stops and noise causes in words: records in, sentences out, one module per family
of findings (`findings`, `measurement`, `details`), filled in by `templates`; `words` words any
record and a section's list."""
