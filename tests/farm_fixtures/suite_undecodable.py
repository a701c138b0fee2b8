"""A failing test whose message and output hold bytes no codec decodes (lone surrogates), as a
test that prints raw subprocess output can produce: the farm must store it escaped, never crash."""

import sys

BAD = b"caf\xe9 \xff\xfe end".decode("utf-8", "surrogateescape")


def test_passes():
    pass


def test_fails_with_undecodable_bytes():
    sys.stdout.write("captured " + BAD + "\n")
    raise AssertionError("mismatch in " + BAD)
