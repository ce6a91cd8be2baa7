"""Stand-in for Triton's ONNX Runtime backend, for the real-Triton test tier (no NVIDIA container here).

Installed as `<backend-directory>/onnxruntime/model.py`: for a model whose config.pbtxt says
`backend: "onnxruntime"`, Triton 2.51 finds no libtriton_onnxruntime.so there and runs this file through
its Python backend instead (a "Python-based backend"). It loads the model's own
`<model>/<version>/<default_model_filename>` (model.onnx) with the onnxruntime Python package on the
CPU and, like the real backend, concatenates the requests of a dynamic batch, runs the graph once and
splits the outputs back per request.

Execution accelerators: the real backend reads `optimization.execution_accelerators.
gpu_execution_accelerator` (TensorRT) only for KIND_GPU / KIND_AUTO instances and ignores it on
KIND_CPU ones; so does this stand-in (it logs what it ignored). CPU accelerators (OpenVINO) are not
available here and fail the load rather than being silently dropped.

So that tests can see dynamic batching, every execute() appends one JSON line
{"model", "instance", "requests", "rows"} to the file named by INFERSTACK_STANDIN_BATCH_LOG when that
variable is set (one write per line, O_APPEND: safe across the instances' stub processes).
"""

import json
import os

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils

BATCH_LOG_ENV = "INFERSTACK_STANDIN_BATCH_LOG"


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.model_name = args["model_name"]
        self.instance = args["model_instance_name"]
        kind = args.get("model_instance_kind", "CPU")
        accelerators = config.get("optimization", {}).get("execution_accelerators", {})
        gpu_accelerators = [a.get("name") for a in accelerators.get("gpu_execution_accelerator", [])]
        cpu_accelerators = [a.get("name") for a in accelerators.get("cpu_execution_accelerator", [])]
        if kind != "CPU":
            raise pb_utils.TritonModelException(f"{self.model_name}: the onnxruntime stand-in runs KIND_CPU only")
        if cpu_accelerators:
            raise pb_utils.TritonModelException(
                f"{self.model_name}: cpu_execution_accelerator {cpu_accelerators} is not available in the stand-in"
            )
        if gpu_accelerators:
            pb_utils.Logger.log_info(
                f"onnxruntime stand-in: {self.model_name} runs on CPU; "
                f"gpu_execution_accelerator {gpu_accelerators} ignored, as the real "
                "backend ignores it for KIND_CPU instances"
            )
        filename = config.get("default_model_filename") or "model.onnx"
        path = os.path.join(args["model_repository"], args["model_version"], filename)
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # two instances on a 2-core machine
        self.session = ort.InferenceSession(path, sess_options=options, providers=["CPUExecutionProvider"])
        self.inputs = [i["name"] for i in config["input"]]
        self.outputs = [o["name"] for o in config["output"]]
        self.batch_log = os.environ.get(BATCH_LOG_ENV)

    def execute(self, requests):
        feeds = {
            name: [pb_utils.get_input_tensor_by_name(r, name).as_numpy() for r in requests] for name in self.inputs
        }
        sizes = [len(array) for array in feeds[self.inputs[0]]]
        results = self.session.run(self.outputs, {name: np.concatenate(arrays) for name, arrays in feeds.items()})
        self._record(len(requests), sum(sizes))
        responses, start = [], 0
        for size in sizes:
            tensors = [
                pb_utils.Tensor(name, np.ascontiguousarray(value[start : start + size]))
                for name, value in zip(self.outputs, results, strict=True)
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
            start += size
        return responses

    def _record(self, requests, rows):
        if not self.batch_log:
            return
        line = (
            json.dumps({"model": self.model_name, "instance": self.instance, "requests": requests, "rows": rows}) + "\n"
        )
        fd = os.open(self.batch_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
