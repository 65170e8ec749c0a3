#!/usr/bin/env bash
# Create .venv with recallbench (editable) and every extra.
#
#   bash install.sh                 # the CPU build: then .venv/bin/recallbench run
#   bash install.sh --cuda          # a GPU machine: torch's CUDA build, compiled kernels
#   bash install.sh [--cuda] --dry-run   # print the commands instead of running them
#
# CPU: torch is pinned by constraints.txt (a CPU build); mamba-ssm is installed without
# compiling its CUDA kernels (its pure-torch references serve the CPU).
# --cuda: the CUDA build of the same torch version (from the PyTorch index of $TORCH_CUDA,
# default cu130, or $TORCH_INDEX_URL), Triton >= 3.7.1 (fla's gated kernels on Hopper),
# and causal-conv1d and mamba-ssm compiled against it; needs nvcc of the same CUDA major
# version.  `recallbench doctor` then shows the kernel path of every adapter.
set -euo pipefail
cd "$(dirname "$0")"

cuda=0 dry=0
for arg in "$@"; do
    case "$arg" in
        --cuda) cuda=1 ;;
        --dry-run) dry=1 ;;
        *) echo "install.sh: unknown argument '${arg:0:40}': allowed --cuda, --dry-run" >&2; exit 2 ;;
    esac
done

step() {  # one line on stderr per step: the pip steps print nothing for minutes
    echo "install.sh: $* ..." >&2
}

run() {  # run a command, or print it with --dry-run
    if [ "$dry" = 1 ]; then printf '%q ' "$@"; echo; else "$@"; fi
}

venv=${VENV:-.venv}
torch_version=$(sed -n 's/^torch==//p' constraints.txt)
mamba=mamba-ssm==2.3.2.post1

if [ "$cuda" = 1 ]; then
    TORCH_CUDA=${TORCH_CUDA:-cu130}
    index=${TORCH_INDEX_URL:-https://download.pytorch.org/whl/$TORCH_CUDA}
    want=${TORCH_CUDA#cu}; want=${want%?}  # cu130 -> 13: the CUDA major version nvcc must have
    # the nvcc torch's extension builder takes: $CUDA_HOME's, else the one on PATH
    if [ -n "${CUDA_HOME:-}" ]; then nvcc=$CUDA_HOME/bin/nvcc
    else nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc); fi
    if [ ! -x "$nvcc" ]; then
        echo "install.sh --cuda: nvcc not found ($nvcc): install the CUDA $want toolkit (a -devel image has it) or set CUDA_HOME; nothing was installed" >&2
        exit 1
    fi
    have=$("$nvcc" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
    if [ "$have" != "$want" ]; then
        echo "install.sh --cuda: $nvcc is CUDA ${have:-unknown}, torch's $TORCH_CUDA build needs CUDA $want: set TORCH_CUDA to a torch build for CUDA ${have:-?} (cu126, cu128, cu130, ...) or CUDA_HOME to CUDA $want; nothing was installed" >&2
        exit 1
    fi
fi

if [ ! -x "$venv/bin/python" ]; then
    step "creating the virtual environment $venv"
    run "${PYTHON:-python3}" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip install -q -c constraints.txt)
step "upgrading pip, setuptools and wheel"
run "${pip[@]}" --upgrade pip setuptools wheel
if [ "$cuda" = 0 ]; then
    step "installing torch $torch_version (CPU build), triton, transformers and einops"
    run "${pip[@]}" "torch==$torch_version" triton transformers einops
    step "installing $mamba (its pure-torch references, no CUDA kernels)"
    run env MAMBA_SKIP_CUDA_BUILD=TRUE MAMBA_FORCE_BUILD=TRUE \
        "${pip[@]}" --no-build-isolation --no-deps "$mamba"
else
    step "installing torch $torch_version+$TORCH_CUDA from $index"
    run "${pip[@]}" --index-url "$index" "torch==$torch_version+$TORCH_CUDA"
    step "installing triton>=3.7.1, transformers, einops, ninja and packaging"
    run "${pip[@]}" "triton>=3.7.1" transformers einops ninja packaging
    step "compiling causal-conv1d 1.6.1 against torch (several minutes)"
    run env CAUSAL_CONV1D_FORCE_BUILD=TRUE \
        "${pip[@]}" --no-build-isolation --no-deps causal-conv1d==1.6.1
    step "compiling $mamba against torch (several minutes)"
    run env MAMBA_FORCE_BUILD=TRUE "${pip[@]}" --no-build-isolation --no-deps "$mamba"
fi
step "installing recallbench (editable) and its extras"
run "${pip[@]}" -e ".[all]"
if [ "$cuda" = 1 ]; then
    if [ "$dry" = 0 ] && ! "$venv/bin/python" -c "import torch, selective_scan_cuda, causal_conv1d_cuda" 2>/dev/null; then
        echo "install.sh --cuda: the compiled kernels of mamba-ssm or causal-conv1d do not import; $venv/bin/recallbench doctor shows what falls back" >&2
        exit 1
    fi
    run "$venv/bin/recallbench" doctor
fi
if [ "$dry" = 1 ]; then echo "(dry run: nothing was run)"; else echo "recallbench installed in $venv"; fi
