"""Job submission domain: spec validation, batch script handling, sbatch options, the job manager."""
