"""The compiled parts: the send path's accelerator (rmqha/broker/fastpath/_fastsend.c) and the zero-copy
slave's frame loop (rmqha/broker/ha/_frames.c).

Optional by design: if one does not build (no C compiler, no zlib headers), the install goes on and the
broker runs the pure-Python path it replaces, which is the reference it is tested against.
Everything else about the package is in pyproject.toml.

Both build with every warning an error (WARNINGS). Since a failed build only falls back to Python,
`make lint` compiles both the same way and fails loudly on a warning.
"""

import shutil
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildWithTopologies(build_py):
    """A built package (a wheel) carries compose/ as rmqha/cluster/compose: the topologies the cluster
    tool and the pytest plugin start, for users who install the package instead of cloning it."""

    def run(self):
        super().run()
        if not self.editable_mode:
            target = Path(self.build_lib) / "rmqha" / "cluster" / "compose"
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(HERE / "compose", target)


WARNINGS = ["-Wall", "-Wextra", "-Werror"]

setup(
    cmdclass={"build_py": BuildWithTopologies},
    ext_modules=[
        Extension(
            "rmqha.broker.fastpath._fastsend",
            ["rmqha/broker/fastpath/_fastsend.c"],
            libraries=["z"],
            extra_compile_args=["-O2", *WARNINGS],
            optional=True,
        ),
        Extension(
            "rmqha.broker.ha._frames",
            ["rmqha/broker/ha/_frames.c"],
            extra_compile_args=["-O2", *WARNINGS],
            optional=True,
        ),
    ],
)
