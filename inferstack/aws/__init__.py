"""What the commands read from the deployed environments: one boto3 session per environment (aws_sessions.py), the
stacks' output names and values (stack_outputs.py), and the ECR images the services run (ecr_images.py)."""
