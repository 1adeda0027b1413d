#!/usr/bin/env bash
# The one prepared run on a lent GPU machine (see README, "GPU machines"): the machine has
# torch with CUDA, numpy, matplotlib and pytest, and no Paddle, Jupyter or nbgrader.
#   COURSE_COMMIT=<sha> OUT=<folder> bash bench/gpu_device.sh
# writes OUT/log and OUT/cells/<page>.json (copy those into bench/results/gpu/cells/).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
: "${OUT:?set OUT to a folder for the results}"
: "${COURSE_COMMIT:?set COURSE_COMMIT to the commit that runs}"
mkdir -p "$OUT/cells"
exec > >(tee "$OUT/log") 2>&1
date -u +"start %Y-%m-%dT%H:%M:%SZ"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))"
# the exercises' answers on a real GPU (times printed, never asserted)
timeout 150 python3 -m pytest tests/checks/test_gpu_answers.py -q -s -p no:cacheprovider -o addopts="" || echo "gpu answers: exit $?"
# every chapter's GPU cells, the pages most about the GPU first; each page is written as it ends
timeout "${GPU_CHECK_SECONDS:-400}" python3 -m grader.gpu_check --frameworks torch --cells-out "$OUT/cells" \
  --pages "${GPU_CHECK_PAGES:-toolkit,async,multidevice,communication,data_parallel,sharding,auto_parallel}" \
  || echo "gpu_check: exit $?"
date -u +"end %Y-%m-%dT%H:%M:%SZ"
