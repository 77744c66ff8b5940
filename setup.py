"""Build iodl._native from native/*.c: kernel uapi headers only, no libaio/liburing.

Switches (environment): IODL_DEBUG=1 (-O0 -g), IODL_SANITIZE=1 (ASan/UBSan), IODL_WERROR=1.
"""
import os
from glob import glob

from setuptools import Extension, setup

cflags = ["-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"]
ldflags = []
if os.environ.get("IODL_DEBUG"):
    cflags += ["-O0", "-g3", "-UNDEBUG"]
else:
    cflags += ["-O2"]
if os.environ.get("IODL_SANITIZE"):
    cflags += ["-fsanitize=address,undefined", "-fno-omit-frame-pointer"]
    ldflags += ["-fsanitize=address,undefined"]
if os.environ.get("IODL_WERROR"):
    cflags += ["-Werror"]

setup(
    ext_modules=[
        Extension(
            "iodl._native",
            sources=sorted(glob("native/*.c")),
            include_dirs=["native"],
            depends=sorted(glob("native/*.h") + glob("native/uapi/*.h")),
            extra_compile_args=cflags,
            extra_link_args=ldflags,
        )
    ]
)
