"""The benchmark suites: their tasks with published references, and the report of a suite's runs."""
