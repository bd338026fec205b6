"""Thin command-line adapters: parse flags, call the library, write files."""
