"""`inferstack profile`: measured throughput written back into a model's throughput_profile with its provenance.
entry.py turns a load test's result into an entry, recommendations.py an Inference Recommender job's, writer.py
edits the model file in place, recommender.py builds the job's request, command.py is the CLI."""
