"""Loom: topology-aware placement, balanced training and serving for Slurm clusters of mixed GPUs.

`loom.torch` gives a PyTorch program Loom's data parallelism (see doc/torch.md)."""
