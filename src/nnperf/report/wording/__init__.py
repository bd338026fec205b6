"""Findings, stops and noise causes in words: records in, sentences out, one module per family
(`words` words any record and a section's list)."""
