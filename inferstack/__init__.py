"""inferstack: infrastructure as code for transformer inference on AWS accelerators."""
