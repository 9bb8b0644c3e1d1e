"""A very small calculator."""


def add(a, b):
    return a + b


def sub(a, b):
    return a - b
