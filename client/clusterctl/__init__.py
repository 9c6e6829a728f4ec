"""clusterctl: client library, checkpoint data plane and CLI for the clusterd Slurm service."""

__version__ = "0.1.0"
