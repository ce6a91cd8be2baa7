"""A JSON Schema of CloudWatch's embedded metric format, written from the specification's rules
(docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html):
`_aws` with a millisecond Timestamp and metric directives; a directive's Namespace, dimension sets (arrays of
at most 30 keys) and at most 100 metric definitions with a valid Unit and StorageResolution 1 or 60.
`referenced_members_problems` adds what a schema cannot say: every dimension key names a string member of
the root (at most 1024 characters), every metric a number or an array of at most 100 numbers."""

from __future__ import annotations

import jsonschema

UNITS = [
    "Seconds",
    "Microseconds",
    "Milliseconds",
    "Bytes",
    "Kilobytes",
    "Megabytes",
    "Gigabytes",
    "Terabytes",
    "Bits",
    "Kilobits",
    "Megabits",
    "Gigabits",
    "Terabits",
    "Percent",
    "Count",
    "Bytes/Second",
    "Kilobytes/Second",
    "Megabytes/Second",
    "Gigabytes/Second",
    "Terabytes/Second",
    "Bits/Second",
    "Kilobits/Second",
    "Megabits/Second",
    "Gigabits/Second",
    "Terabits/Second",
    "Count/Second",
    "None",
]

SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["_aws"],
    "properties": {
        "_aws": {
            "type": "object",
            "required": ["Timestamp", "CloudWatchMetrics"],
            "properties": {
                "Timestamp": {"type": "integer", "minimum": 0},
                "CloudWatchMetrics": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["Namespace", "Dimensions", "Metrics"],
                        "additionalProperties": False,
                        "properties": {
                            "Namespace": {"type": "string", "minLength": 1, "maxLength": 1024},
                            "Dimensions": {
                                "type": "array",
                                "minItems": 1,
                                "items": {
                                    "type": "array",
                                    "maxItems": 30,
                                    "uniqueItems": True,
                                    "items": {"type": "string", "minLength": 1, "maxLength": 250},
                                },
                            },
                            "Metrics": {
                                "type": "array",
                                "minItems": 1,
                                "maxItems": 100,
                                "items": {
                                    "type": "object",
                                    "required": ["Name"],
                                    "additionalProperties": False,
                                    "properties": {
                                        "Name": {"type": "string", "minLength": 1, "maxLength": 1024},
                                        "Unit": {"enum": UNITS},
                                        "StorageResolution": {"enum": [1, 60]},
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}


def referenced_members_problems(record: dict) -> list[str]:
    problems = []
    for directive in record["_aws"]["CloudWatchMetrics"]:
        for keys in directive["Dimensions"]:
            for key in keys:
                value = record.get(key)
                if not isinstance(value, str) or len(value) > 1024:
                    problems.append(f"dimension {key!r} is not a root string of at most 1024 characters")
        for metric in directive["Metrics"]:
            value = record.get(metric["Name"])
            numbers = value if isinstance(value, list) else [value]
            if (
                not numbers
                or len(numbers) > 100
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in numbers)
            ):
                problems.append(f"metric {metric['Name']!r} is not a number or an array of 1-100 numbers")
    return problems


def assert_valid_emf(record: dict) -> None:
    jsonschema.validate(record, SCHEMA)
    assert referenced_members_problems(record) == []
