"""A pipeline's pre-step (Triton Python backend): TEXT BYTES [n] -> clean_text BYTES [n], whitespace collapsed.
The example of docs/how-to/build-a-pipeline.md; served by tests/container/triton/test_pipeline.py."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            texts = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            clean = [" ".join(t.decode("utf-8").split()).encode("utf-8") for t in texts.reshape(-1)]
            out = pb_utils.Tensor("clean_text", np.array(clean, dtype=np.object_))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
