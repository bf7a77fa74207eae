"""Generated protobuf and gRPC code for adk_mesh.v1. Do not edit."""
