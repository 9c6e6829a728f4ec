"""The ``clusterctl`` command line: thin commands over :class:`clusterctl.client.ClusterClient`."""
