"""Rehearsals of what only an AWS account or a Docker engine does: image builds, the real serving
servers started the way the platform starts them, and the CDK CLI deploy path against an emulator."""
