"""Job submission domain: spec validation, #SBATCH directives and their values, batch scripts, the job manager."""
