"""Slurm seam: the backend interface (base), its data types (types) and concrete backends."""
