"""What an operator sees of clusterd: Prometheus metrics and structured logs."""
