#!/bin/sh
# run.sh - all benchmarks (make bench). Ratios are measured side by side in one run.
set -eu
cd "$(dirname "$0")"
echo "== sandbox core (issue 2)"
python3 core.py
echo "== images from a registry (issue 3)"
python3 pull.py
echo "== checkpoint and rewind (issue 6)"
python3 checkpoint.py
