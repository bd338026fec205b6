"""Findings, stops and noise causes in words: records in, sentences out, one module per family."""
