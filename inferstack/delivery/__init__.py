"""After synth: release manifests, promotion between environments, smoke tests and the AWS sessions and
stack outputs they read."""
