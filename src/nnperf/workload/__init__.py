"""What is trained: the datasets, the networks and what one step of them costs on paper.

Takes a request's dataset and model names and gives the data on disk and read back
(`datasets`), the network by name (`models`) and its FLOPs, saved activations and bytes
per training step (`complexity`, rule `complexity`).
"""
