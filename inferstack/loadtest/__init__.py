"""Load tests on Locust: one spec (spec.py), run locally, distributed on this machine or on Fargate in an
environment; one result format (results.py) that `loadtest`, `profile` and promotion's gate all read."""
