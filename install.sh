#!/usr/bin/env bash
# Create .venv with recallbench (editable) and every extra that runs on a CPU.
#
#   bash install.sh            # then: .venv/bin/recallbench run
#
# torch is pinned by constraints.txt (a CPU build); mamba-ssm is installed
# without compiling its CUDA kernels (its pure-torch references serve the CPU).
set -euo pipefail
cd "$(dirname "$0")"
venv=${VENV:-.venv}
[ -x "$venv/bin/python" ] || "${PYTHON:-python3}" -m venv "$venv"
pip=("$venv/bin/python" -m pip install -q -c constraints.txt)
"${pip[@]}" --upgrade pip setuptools wheel
"${pip[@]}" torch==2.13.0 triton transformers einops
MAMBA_SKIP_CUDA_BUILD=TRUE MAMBA_FORCE_BUILD=TRUE \
    "${pip[@]}" --no-build-isolation --no-deps mamba-ssm==2.3.2.post1
"${pip[@]}" -e ".[all]"
echo "recallbench installed in $venv"
