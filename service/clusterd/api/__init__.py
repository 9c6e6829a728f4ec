"""gRPC surface: thin servicers, proto conversion, the auth/error interceptor."""
