"""A finished Inference Recommender job as `aws sagemaker describe-inference-recommendations-job` prints it (a
support module: no tests here). Figures: the published BERT-large trt-db-ig run's 3,192 invocations a minute on
ml.g4dn.xlarge, with a second configuration past the threshold and two on ml.g5.xlarge."""

from __future__ import annotations

import copy
import json
from pathlib import Path

JOB = "bert-large-classifier-staging-20250304100000"


def _recommendation(itype: str, per_minute: int, latency: int, count: int = 1, ended: str | None = None) -> dict:
    out = {
        "RecommendationId": f"{JOB}/{itype}-{per_minute}",
        "Metrics": {
            "CostPerHour": 0.736 * count,
            "CostPerInference": 0.0000038,
            "MaxInvocations": per_minute,
            "ModelLatency": latency,
            "CpuUtilization": 42.5,
            "MemoryUtilization": 31.0,
            "ModelSetupTime": 412,
        },
        "EndpointConfiguration": {
            "EndpointName": f"{JOB}-{itype.replace('.', '-')}",
            "VariantName": "AllTraffic",
            "InstanceType": itype,
            "InitialInstanceCount": count,
        },
        "ModelConfiguration": {"EnvironmentParameters": []},
    }
    if ended:
        out["InvocationEndTime"] = ended
    return out


SAMPLE = {
    "JobName": JOB,
    "JobDescription": "inferstack profile bert-large-classifier in staging",
    "JobType": "Advanced",
    "JobArn": f"arn:aws:sagemaker:us-east-1:222222222222:inference-recommendations-job/{JOB}",
    "RoleArn": "arn:aws:iam::222222222222:role/inferstack-recommender",
    "Status": "COMPLETED",
    "CreationTime": "2025-03-04T10:00:00.123000+00:00",
    "CompletionTime": "2025-03-04T12:31:07.456000+00:00",
    "LastModifiedTime": "2025-03-04T12:31:07.456000+00:00",
    "InputConfig": {"ModelName": "Model-1a2B3c4D5e6F", "JobDurationInSeconds": 5100},
    "StoppingConditions": {
        "MaxInvocations": 3000,
        "ModelLatencyThresholds": [{"Percentile": "P95", "ValueInMilliseconds": 300}],
    },
    "InferenceRecommendations": [
        _recommendation("ml.g4dn.xlarge", 3192, 212),
        _recommendation("ml.g4dn.xlarge", 3600, 340),  # more, but past the 300 ms threshold
        _recommendation("ml.g5.xlarge", 9000, 180, count=2),  # 4,500 a minute per instance
        _recommendation("ml.g5.xlarge", 4200, 95, ended="2025-03-04T11:58:00+00:00"),
    ],
}


def sample() -> dict:
    return copy.deepcopy(SAMPLE)


def write(path: Path, data: dict | None = None) -> Path:
    path.write_text(json.dumps(sample() if data is None else data, indent=2))
    return path
