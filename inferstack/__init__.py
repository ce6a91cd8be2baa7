"""inferstack: infrastructure as code for transformer inference on AWS accelerators."""

__version__ = "0.1.0"  # recorded in release manifests; the git commit identifies a build exactly
