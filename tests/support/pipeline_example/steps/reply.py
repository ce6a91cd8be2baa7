"""A pipeline's post-step (Triton Python backend): the classifier's sentiment BYTES [n] and sentiment_logits
FP32 [n, 2] -> the text contract's label and logits, passed on, and reply BYTES [n], a canned answer per label.
The example of docs/how-to/build-a-pipeline.md; served by tests/container/triton/test_pipeline.py."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils

REPLIES = {"negative": "sorry to hear that: a person will call you", "positive": "thank you!"}


class TritonPythonModel:
    def initialize(self, args):
        # The step's config.pbtxt, as Triton passes it (its parameters include step_file, and calls when set).
        self.config = json.loads(args["model_config"])

    def execute(self, requests):
        responses = []
        for request in requests:
            labels = pb_utils.get_input_tensor_by_name(request, "sentiment").as_numpy()
            logits = pb_utils.get_input_tensor_by_name(request, "sentiment_logits").as_numpy()
            replies = [REPLIES.get(label.decode("utf-8"), "?").encode("utf-8") for label in labels]
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("label", labels),
                        pb_utils.Tensor("logits", logits),
                        pb_utils.Tensor("reply", np.array(replies, dtype=np.object_)),
                    ]
                )
            )
        return responses
