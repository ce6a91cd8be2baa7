"""Reviewer tooling: an offline diff of two synthesized cloud assemblies, and per-environment diagrams.

Reads only what `cdk synth` wrote (manifests, templates, tree.json): no CDK import, no AWS access."""
