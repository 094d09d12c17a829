# compass-rl, CPU family: the stages that never touch a GPU in this code base, and the Prefect worker.
#   world, data_filter (its grader trains and samples on CPU: no device placement), merge (mergekit),
#   evaluation with the native / hf backends, `compass run|serve|artifacts`, `prefect worker start`.
# torch is the CPU wheel (docs/architecture.md §6); everything else is pinned by requirements/.
# Build from the repository root (the root .dockerignore keeps the context small):
#   docker build -f deploy/docker/cpu.Dockerfile -t compass-rl-cpu:0.1.0 .
# The tag is the project version (pyproject.toml); deploy/kuberay/ and docs/cluster.md use it.

# The full image has a compiler for any dependency that ships only a source archive;
# the runtime image below gets the finished environment and no compiler.
FROM python:3.11.7-bookworm AS build
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
WORKDIR /opt/compass
COPY requirements/ requirements/
# torch first, as the Makefile does: the +cpu build from the PyTorch CPU index (PyPI's Linux wheel is the CUDA one)
RUN /opt/venv/bin/pip install --no-cache-dir --extra-index-url "$TORCH_INDEX_URL" \
        -c requirements/constraints.txt -c requirements/lock.txt torch==2.13.0+cpu
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
CMD ["prefect", "worker", "start", "--pool", "compass-cpu", "--type", "process"]
