"""A suite path that collects no tests: `farm run` must refuse it before starting any fleet."""


def helper():
    return 1
