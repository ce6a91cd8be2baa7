"""NVIDIA Triton on SageMaker: the model-repository renderer (config.pbtxt), the inference client both
serving paths speak, and the SageMaker Triton base-image lookup."""
