"""The configuration schema (frozen pydantic models) and the instance facts it validates against:
the bottom layer, importable without the loader, the planner or any AWS SDK (the Triton image's export imports it)."""
