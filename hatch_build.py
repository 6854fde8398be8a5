"""Build hook: compile the native trace decoder (traceadvisor/trace/_kineto.c) into the wheel.

The extension is optional: where it cannot be compiled (no C compiler, no Python headers) the
build goes on with a warning and traceadvisor reads traces with its pure-Python path, which gives
the same results, only slower (docs/performance.md). ``TRACEADVISOR_NO_NATIVE=1`` skips it;
``TRACEADVISOR_REQUIRE_NATIVE=1`` turns a failed compile into a failed build (CI sets it).

For an editable install (``pip install -e .``, what the Makefile does) the compiled module is put
next to its source, where the editable import path finds it.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SOURCE = Path("traceadvisor") / "trace" / "_kineto.c"
MODULE = "traceadvisor.trace._kineto"


class NativeDecoderHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or os.environ.get("TRACEADVISOR_NO_NATIVE") == "1":
            return
        root = Path(self.root)
        try:
            built = _compile(root / SOURCE)
        except Exception as exc:  # any compiler failure: the pure-Python path still works
            if os.environ.get("TRACEADVISOR_REQUIRE_NATIVE") == "1":
                raise
            sys.stderr.write(
                f"traceadvisor: warning: native trace decoder not built ({exc}); traces load with the "
                "pure-Python decoder (same results, slower)\n"
            )
            return
        name = MODULE.rsplit(".", 1)[1] + sysconfig.get_config_var("EXT_SUFFIX")
        target = root / SOURCE.parent / name
        if version == "editable":
            shutil.copyfile(built, target)
        else:
            build_data["force_include"][str(built)] = str(SOURCE.parent / name)
        build_data["pure_python"] = False
        build_data["infer_tag"] = True


def _compile(source: Path) -> Path:
    """Compile ``source`` with the compiler and flags Python was built with (setuptools' build_ext)."""
    from setuptools import Distribution, Extension
    from setuptools.command.build_ext import build_ext

    out = Path(tempfile.mkdtemp(prefix="traceadvisor-native-"))
    ext = Extension(MODULE, sources=[str(source)], extra_compile_args=_flags())
    dist = Distribution({"name": "traceadvisor-native", "ext_modules": [ext]})
    cmd = build_ext(dist)
    cmd.build_lib = str(out / "lib")
    cmd.build_temp = str(out / "tmp")
    cmd.ensure_finalized()
    cmd.run()
    return Path(cmd.get_ext_fullpath(MODULE))


def _flags() -> list[str]:
    if sys.platform == "win32":
        return []
    return ["-Wall", "-Wno-unused-parameter", "-Wno-missing-field-initializers"]
