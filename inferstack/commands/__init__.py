"""The commands that work from the config alone: validate, schema, plan (with its report) and render-triton."""
