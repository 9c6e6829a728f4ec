"""clusterctl: client library, checkpoint data plane and CLI for the clusterd Slurm service."""

from .runtime import JobRuntime, job_runtime

__version__ = "0.1.0"

__all__ = ["JobRuntime", "job_runtime"]
