# compass-rl, GPU training family: sft (sft_longcot, sft_domain), genrm, reasoning_rl and domain_rl with the
# native / hf rollout. What needs the GPU here is megatron-core (`backend: megatron` in SFT,
# `trainer.backend: megatron` in RL: the model moves to the current CUDA device); the torch trainer and the
# native / hf rollout run on CPU in this code base (docs/cluster.md). Also the Ray head and workers of
# deploy/kuberay/ when the rollout is not vLLM, and a `compass-gpu` Prefect worker.
# torch is PyPI's Linux wheel, the CUDA build: its CUDA libraries come as wheels, the host needs only the
# NVIDIA driver and container runtime. Same pins as .venv otherwise (requirements/).
# Build from the repository root:
#   docker build -f deploy/docker/train.Dockerfile -t compass-rl-train:0.1.0 .

# The full image has a compiler for any dependency that ships only a source archive.
FROM python:3.11.7-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
WORKDIR /opt/compass
COPY requirements/ requirements/
RUN /opt/venv/bin/pip install --no-cache-dir -c requirements/constraints.txt -c requirements/lock.txt torch==2.13.0
COPY pyproject.toml README.md ./
COPY compass/ compass/
COPY stages/ stages/
COPY flows/ flows/
COPY artifacts_schema/ artifacts_schema/
COPY configs/ configs/
COPY deploy/ deploy/
# editable, as `make install`: configs/, flows/ and deploy/prefect.yaml stay beside the code at /opt/compass
RUN /opt/venv/bin/pip install --no-cache-dir -c requirements/constraints.txt -c requirements/lock.txt -e .

FROM python:3.11.7-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    COMPASS_CHECKOUT=/opt/compass \
    COMPASS_LOG_DIR=/home/compass/.compass/logs \
    COMPASS_STATE_DIR=/home/compass/.compass/state \
    PREFECT_HOME=/home/compass/.prefect \
    PREFECT_SERVER_ANALYTICS_ENABLED=false \
    COMPASS_PROGRESS=0
# the code stays root-owned and read-only; logs, resumable stage state and Prefect's home go under $HOME
RUN groupadd --gid 1000 compass && useradd --uid 1000 --gid compass --create-home --shell /bin/bash compass
COPY --from=build /opt/venv /opt/venv
COPY --from=build /opt/compass /opt/compass
WORKDIR /opt/compass
USER 1000:1000
CMD ["prefect", "worker", "start", "--pool", "compass-gpu", "--type", "process"]
