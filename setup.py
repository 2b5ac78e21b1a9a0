"""Install the paddle_vtensor package with its ops built against the paddle already installed:

    pip install --no-build-isolation .

``--no-build-isolation`` is what custom-operator packages need: the ops are compiled against the
headers and library of the paddle in *this* environment (CPU or GPU build), which an isolated build
environment would not have. paddle is therefore not a declared dependency (pip would otherwise
replace a paddlepaddle-gpu with the CPU package); install it first.

The compile uses the one source list and the flags in paddle_vtensor/_build.py, as setup_ops.py
(the ops-only build) and the just-in-time build do. Objects are kept in build/ops/, so reinstalling
an unchanged tree does not compile again.
"""
import os
import re
import sys

from setuptools import find_namespace_packages, setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

ROOT = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, ROOT)

from paddle_vtensor import _packaged  # noqa: E402  (stdlib only until a build starts)


class BuildPyWithOps(build_py):
    """build_py, then the ops library into the built package (paddle_vtensor/_lib/)."""

    def run(self):
        super().run()
        # The PADDLE_VTENSOR_AUTOPATCH hook: a .pth at the top of the built tree lands in
        # site-packages, where Python runs its one import line at every interpreter start.
        self.copy_file(os.path.join(ROOT, "paddle_vtensor_autopatch.pth"), self.build_lib)
        if getattr(self, "editable_mode", False):
            return  # an editable install runs from the tree: the just-in-time build serves it
        try:
            import paddle  # noqa: F401
        except ImportError as e:
            raise SystemExit("paddle_vtensor: install paddlepaddle (or paddlepaddle-gpu) first, then "
                             "pip install --no-build-isolation . (the ops are built against it)") from e
        out = os.path.join(self.build_lib, "paddle_vtensor", _packaged.LIB_DIR)
        info = _packaged.build_into(out, os.path.join(ROOT, "build", "ops"))
        print(f"paddle_vtensor: ops built into {out} for paddle {info['paddle']} "
              f"({'CUDA' if info['cuda'] else 'CPU'})")


class BinaryDistribution(Distribution):
    def has_ext_modules(self):  # the wheel holds a compiled library: tag it for this platform
        return True


def _version() -> str:
    with open(os.path.join(ROOT, "paddle_vtensor", "__init__.py")) as f:
        return re.search(r'__version__ = "([^"]+)"', f.read()).group(1)


setup(
    name="paddle-vtensor",
    version=_version(),
    description="KV caches that grow in place in virtual memory, for PaddlePaddle",
    # Every subpackage: the API, _ops/, integration/, generation/ and bench/ (the command line).
    py_modules=["paddle_vtensor_autopatch"],  # the .pth's hook: top level, so it imports no paddle
    packages=find_namespace_packages(include=["paddle_vtensor", "paddle_vtensor.*"], exclude=["*.__pycache__"]),
    python_requires=">=3.9",
    install_requires=["numpy"],
    cmdclass={"build_py": BuildPyWithOps},
    distclass=BinaryDistribution,
    zip_safe=False,
)
