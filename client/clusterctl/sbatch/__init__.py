"""sbatch's option table, its getopt rules and its value syntax: one parser for the CLI and clusterd.

The CLI reads the command line and ``SBATCH_*`` with it, clusterd reads ``#SBATCH`` lines and what
the CLI forwards with it, so ``--mem=1.5G`` or ``-t 1-2`` mean (or are refused) the same everywhere.
"""
