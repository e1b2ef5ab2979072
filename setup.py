"""Build hook for the optional C accelerator of the chunker (everything else lives in pyproject.toml).

`optional=True`: without a compiler the install still succeeds and the chunker runs in pure Python.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "chalicelib.chunker._native",
            sources=["chalicelib/chunker/_native.c"],
            extra_compile_args=["-O2", "-std=c99", "-Wall", "-Wno-unused-parameter"],
            optional=True,
        )
    ]
)
