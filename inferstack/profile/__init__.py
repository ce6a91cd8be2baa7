"""`inferstack profile`: measured throughput written back into a model's throughput_profile with its provenance.
entry.py turns a load test's result into an entry and recommendations.py an Inference Recommender job's answer;
writer.py edits the model file in place; measuring.py runs the load tests, deployed.py reads what a model runs as
in an environment, recommender.py builds the recommender's request (latency_thresholds.py: the percentile its
latency is judged at, which the entries read from it record); command.py and recommender_command.py are the CLI."""
