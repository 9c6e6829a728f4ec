"""The suite's one helper package: ports, the local stack, clusterd processes, S3, metrics.

Fixtures stay in conftest.py files and build on these; bench/ scripts import them too
(``python -m bench.<name>`` from the project root). Modules:

- :mod:`tests.support.ports`: ``free_port``.
- :mod:`tests.support.paths`: ``ROOT``, ``SLURM_FIXTURES``.
- :mod:`tests.support.stack`: ``STACK_DIR``, ``read_env_file``, ``Stack``, ``load_stack``.
- :mod:`tests.support.daemon`: ``Daemon``, a clusterd process in front of the stack's Slurm.
- :mod:`tests.support.wait`: ``wait_for``.
- :mod:`tests.support.s3server`: a private SeaweedFS S3 server.
- :mod:`tests.support.promtext`: ``scrape``, a /metrics page as a dict.
- :mod:`tests.support.runner`: ``ScriptedRunner``, Slurm's commands answered from a table.
"""
