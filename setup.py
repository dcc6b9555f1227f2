"""The compiled parts: the send path's accelerator (broker/fastpath/_fastsend.c) and the zero-copy
slave's frame loop (broker/ha/_frames.c).

Optional by design: if one does not build (no C compiler, no zlib headers), the install goes on and the
broker runs the pure-Python path it replaces, which is the reference it is tested against.
Everything else about the package is in pyproject.toml.
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension("broker.fastpath._fastsend", ["broker/fastpath/_fastsend.c"],
                             libraries=["z"], extra_compile_args=["-O2"], optional=True),
                   Extension("broker.ha._frames", ["broker/ha/_frames.c"], extra_compile_args=["-O2"],
                             optional=True)])
