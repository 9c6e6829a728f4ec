"""Several clusterd replicas on one store: the supervisor lease and the fencing of Slurm actions."""
