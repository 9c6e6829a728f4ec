"""Generated gRPC stubs for clusterctl.v1 (do not edit; see scripts/gen_proto.py)."""
