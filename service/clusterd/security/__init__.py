"""Transport security, per-user limits and the audit log: what the interceptor enforces per call."""
