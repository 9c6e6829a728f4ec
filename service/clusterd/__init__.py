"""clusterd: gRPC service in front of Slurm (submission, supervision, topology, auth)."""

__version__ = "0.1.0"
