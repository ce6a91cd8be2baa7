"""CDK stacks: wiring only. Constructs in inferstack.constructs build the resources."""
