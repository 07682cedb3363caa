#!/usr/bin/env bash
# Wheels of the Python packages that benchmarks/fused_device.sh's calibrate step needs beyond a CUDA image's torch,
# Triton, pandas and PyYAML (benchmarks/calibrate_gpu.py validates the configuration with jsonschema), for a GPU
# node without a package index: downloaded here, where pip reaches one, into DIR (default .whl), for CPython
# PYTHON_VERSION (default 3.12) on x86-64 Linux. On the node, before the device script:
#
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
#
#   bash benchmarks/device_wheels.sh [DIR]
set -eu
DIR=${1:-.whl}
PYTHON_VERSION=${PYTHON_VERSION:-3.12}
PACKAGES="jsonschema jsonschema-specifications referencing rpds-py"  # jsonschema and what it needs (attrs aside)
platforms=""
for tag in manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_28_x86_64; do
    platforms="$platforms --platform $tag"
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PYTHON_VERSION" --implementation cp \
    $platforms -d "$DIR" $PACKAGES
ls "$DIR"
