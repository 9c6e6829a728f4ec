"""The service's own model of what a caller asks for and what happens to a job.

The gRPC messages are the wire form (converted in clusterd.api), the store keeps its own encoding
(clusterd.store.codec); everything between works on these types.
"""
