"""The supervision loop: one queue poll for everyone, job events, restart policy."""
