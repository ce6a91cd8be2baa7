"""Reusable L3 constructs. They build resources from typed arguments and never read files, environment
variables, context or AWS (stacks/ wires them)."""
