"""The compiled parts: the send path's accelerator (rmqha/broker/fastpath/_fastsend.c) and the zero-copy
slave's frame loop (rmqha/broker/ha/_frames.c).

Optional by design: if one does not build (no C compiler, no zlib headers), the install goes on and the
broker runs the pure-Python path it replaces, which is the reference it is tested against.
Everything else about the package is in pyproject.toml.

Both build with every warning an error (WARNINGS). Since a failed build only falls back to Python,
`make lint` compiles both the same way and fails loudly on a warning.
"""
from setuptools import Extension, setup

WARNINGS = ["-Wall", "-Wextra", "-Werror"]

setup(ext_modules=[Extension("rmqha.broker.fastpath._fastsend", ["rmqha/broker/fastpath/_fastsend.c"],
                             libraries=["z"], extra_compile_args=["-O2", *WARNINGS], optional=True),
                   Extension("rmqha.broker.ha._frames", ["rmqha/broker/ha/_frames.c"], extra_compile_args=["-O2", *WARNINGS],
                             optional=True)])
