"""The one compiled part: the send path's accelerator (broker/fastpath/_fastsend.c).

Optional by design: if it does not build (no C compiler, no zlib headers), the install goes on and the
broker runs the pure-Python send path, which is the reference the accelerator is tested against.
Everything else about the package is in pyproject.toml.
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension("broker.fastpath._fastsend", ["broker/fastpath/_fastsend.c"],
                             libraries=["z"], extra_compile_args=["-O2"], optional=True)])
