"""What the tests share: helpers, builders and fixtures' bodies, imported by test modules and conftest files.

No test module imports another test module or a conftest.py (tests/test_imports.py holds that); a helper two
test modules need lives here, and a fixture two folders need lives in the nearest conftest.py above both."""
