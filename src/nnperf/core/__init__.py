"""The bottom layer: the words, the contract and the paths every other stage shares.

Takes a study config, gives typed torch-free requests: `vocab` (devices, precisions, phases,
keys), `contract` (the requests and their defaults), `layout` (every path, both ways),
`config` (validation, the run matrix), `devices`, `precision`, `variant`, `files` (atomic
JSON/CSV), `stats`, `wording`, `errors`, `jobs`, `codehash`, `cpuinfo` and `environment`
(the record stored with every result). Imports nothing above it, and nothing at all here.
"""
