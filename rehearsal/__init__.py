"""Rehearsals of what only an AWS account or a Docker engine does: image builds, the real serving
servers started the way the platform starts them, and the CDK CLI deploy path against an emulator.
Used by tests, the Makefile and benchmarks; it needs moto and docker, so it lives beside the product
package, which never imports it (tests/test_package_imports.py)."""
