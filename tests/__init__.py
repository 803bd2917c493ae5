"""The test suite, a package so its shared helpers import as `tests.helpers.<module>`."""
