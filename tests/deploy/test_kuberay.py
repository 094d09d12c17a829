"""The KubeRay manifests in deploy/kuberay/: what the CRDs require, images from deploy/docker/, credentials only
from a Secret, RayJob entrypoints that the real stage command line accepts and the DAG agrees with, and the
GPUs their configs' drivers and Ray actors ask for there in the job's pods."""
from __future__ import annotations

import argparse
import re
import tomllib

import pytest

from tests.deploy.deploy_files import (CHECKOUT_IN_IMAGE, CLUSTER_CONFIG_DIR, DOCKER_DIR, IMAGE, PAPER_2NODE_CONFIG,
                                       PAPER_CONFIG, ROOT, cluster_spec, containers, entrypoint_argv,
                                       entrypoint_config, groups, load_all, manifests, pins, project_version)

# Facts from KubeRay's CRDs (ray-project/kuberay v1.7.0, ray-operator/config/crd/bases, version v1): the
# required fields, and the property names, so that a misspelt key fails here instead of being pruned.
RAYCLUSTER_SPEC_KEYS = {"authOptions", "autoscalerOptions", "enableInTreeAutoscaling", "gcsFaultToleranceOptions",
                        "headGroupSpec", "headServiceAnnotations", "historyServerOptions", "managedBy",
                        "networkPolicy", "rayVersion", "suspend", "tlsOptions", "upgradeStrategy",
                        "workerGroupSpecs"}
HEAD_KEYS = {"enableIngress", "headService", "ingressOptions", "labels", "rayStartParams", "resources",
             "serviceType", "template"}
WORKER_KEYS = {"groupName", "idleTimeoutSeconds", "labels", "maxReplicas", "minReplicas", "numOfHosts", "priority",
               "rayStartParams", "replicas", "resources", "scaleStrategy", "suspend", "template"}
RAYJOB_SPEC_KEYS = {"activeDeadlineSeconds", "backoffLimit", "clusterSelector", "deletionStrategy", "entrypoint",
                    "entrypointNumCpus", "entrypointNumGpus", "entrypointResources", "jobId", "managedBy",
                    "metadata", "preRunningDeadlineSeconds", "rayClusterSpec", "runtimeEnvYAML",
                    "shutdownAfterJobFinishes", "submissionMode", "submitterConfig", "submitterPodTemplate",
                    "suspend", "ttlSecondsAfterFinished"}
WORKER_REQUIRED = {"groupName", "maxReplicas", "minReplicas", "template"}
SENSITIVE = re.compile(r"SECRET|PASSWORD|TOKEN|ACCESS_KEY|CREDENTIAL", re.I)
CREDENTIALS = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}

DOCS = [(p, d) for p in manifests() for d in load_all(p)]
JOBS = [(p, d) for p, d in DOCS if d.get("kind") == "RayJob"]


def _id(item):
    return item[0].name


def test_the_manifests_are_there():
    kinds = sorted((d["kind"], d["metadata"]["name"]) for _, d in DOCS)
    assert kinds == [("RayCluster", "compass-rl"), ("RayJob", "compass-data-filter"),
                     ("RayJob", "compass-domain-rl"), ("RayJob", "compass-reasoning-rl"),
                     ("RayJob", "compass-reasoning-rl-2node")]


def _check_cluster(spec: dict, where: str) -> None:
    assert set(spec) <= RAYCLUSTER_SPEC_KEYS, f"{where}: unknown keys {set(spec) - RAYCLUSTER_SPEC_KEYS}"
    assert isinstance(spec["rayVersion"], str)
    assert set(spec["headGroupSpec"]) <= HEAD_KEYS, f"{where}: head keys {set(spec['headGroupSpec']) - HEAD_KEYS}"
    for g in spec.get("workerGroupSpecs", []):
        assert WORKER_REQUIRED <= set(g) <= WORKER_KEYS, f"{where}: worker group keys {sorted(g)}"
        assert 0 <= g["minReplicas"] <= g.get("replicas", g["minReplicas"]) <= g["maxReplicas"], g["groupName"]
    names = [n for n, _ in groups(spec)]
    assert len(names) == len(set(names)), f"{where}: group names repeat"
    for name, g in groups(spec):
        assert all(isinstance(v, str) for v in g.get("rayStartParams", {}).values()), f"{where}/{name}"
        pod = g["template"]["spec"]
        assert pod["containers"] and all(c.get("name") and c.get("image") for c in pod["containers"])
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
        mounted = {m["name"] for c in pod["containers"] for m in c.get("volumeMounts", [])}
        assert mounted <= {v["name"] for v in pod.get("volumes", [])}, f"{where}/{name}: a mount without a volume"


@pytest.mark.parametrize("item", DOCS, ids=_id)
def test_what_kuberay_requires(item):
    path, doc = item
    assert doc["apiVersion"] == "ray.io/v1" and doc["kind"] in ("RayCluster", "RayJob"), path.name
    assert doc["metadata"]["name"]
    if doc["kind"] == "RayJob":
        assert set(doc["spec"]) <= RAYJOB_SPEC_KEYS, f"{path.name}: unknown keys {set(doc['spec']) - RAYJOB_SPEC_KEYS}"
        assert doc["spec"]["entrypoint"].strip()           # the operator refuses a job without one
        assert doc["spec"]["shutdownAfterJobFinishes"] is True
    _check_cluster(cluster_spec(doc), path.name)


def test_ray_version_is_the_pinned_ray():
    want = pins(ROOT / "requirements" / "constraints.txt")["ray"]
    assert {cluster_spec(d)["rayVersion"] for _, d in DOCS} == {want}


def test_images_are_built_by_deploy_docker():
    seen = set()
    for path, doc in DOCS:
        for c in containers(cluster_spec(doc)):
            m = IMAGE.match(c["image"])
            assert m, f"{path.name}: image {c['image']} is not one of deploy/docker's"
            assert (DOCKER_DIR / f"{m.group('family')}.Dockerfile").exists(), c["image"]
            assert m.group("tag") == project_version(), c["image"]
            seen.add(m.group("family"))
    assert {"cpu", "rollout"} <= seen


def test_credentials_come_only_from_a_secret():
    for path, doc in DOCS:
        text = path.read_text()
        assert "kind: Secret" not in text and not re.search(r"AKIA[0-9A-Z]{12,}", text), path.name
        for c in containers(cluster_spec(doc)):
            env = {e["name"]: e for e in c.get("env", [])}
            # any container may run stage code (a driver or an actor), so every one gets the store's credentials
            assert CREDENTIALS <= set(env), f"{path.name}/{c['name']}: missing {CREDENTIALS - set(env)}"
            for name, e in env.items():
                if SENSITIVE.search(name):
                    assert "value" not in e and e["valueFrom"]["secretKeyRef"]["name"], f"{path.name}: {name}"
            assert not c.get("envFrom") or all("secretRef" in s or "configMapRef" in s for s in c["envFrom"])


def test_the_endpoint_variable_reaches_s3fs(monkeypatch):
    # the manifests point the store at a non-AWS endpoint (MinIO, Ceph, SeaweedFS) through this variable
    names = {e["name"] for _, d in DOCS for c in containers(cluster_spec(d)) for e in c.get("env", [])}
    assert "AWS_ENDPOINT_URL_S3" in names
    import s3fs
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    fs.connect()                       # builds the client; nothing is sent
    assert fs.s3.meta.endpoint_url == "http://127.0.0.1:9"


class _Parsed(Exception):
    def __init__(self, ns):
        self.ns = ns


def _parse_with_the_stage_cli(stage: str, argv: list[str], monkeypatch) -> argparse.Namespace:
    """The stage's own argparse parser (compass.runtime.stage_cli) on ``argv``; stops before anything runs."""
    from compass.runtime import stage_cli
    real = argparse.ArgumentParser.parse_args

    def capture(self, args=None, namespace=None):
        raise _Parsed(real(self, args, namespace))
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", capture)
    try:
        stage_cli.main(stage, argv)
    except _Parsed as p:
        return p.ns
    except SystemExit as e:
        pytest.fail(f"`compass stage {stage}` rejects {argv}: exit {e.code}")
    pytest.fail(f"`compass stage {stage}` did not parse its arguments")


def _pairs(items: list[str]) -> dict[str, str]:
    return dict(i.split("=", 1) for i in items)


@pytest.mark.parametrize("item", JOBS, ids=_id)
def test_entrypoint_is_a_real_stage_command(item, monkeypatch):
    from compass.config import validate
    from compass.dag.pipeline import PIPELINE
    from compass.dag.pipeline_yaml import load_pipeline_config, load_pipeline_dict
    from compass.dag.stages import STAGES, stage_spec
    path, doc = item
    argv = entrypoint_argv(doc)
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert argv[:2] == ["compass", "stage"] and scripts["compass"] == "compass.cli.main:main", argv[:2]
    stage = argv[2]
    assert stage in STAGES, stage
    ns = _parse_with_the_stage_cli(stage, argv[3:], monkeypatch)
    spec = stage_spec(stage)
    node = next(n for n in PIPELINE if n.run_name == ns.section)
    assert node.stage == stage, f"{path.name}: section {ns.section} runs stage {node.stage}"

    # the config is a file of configs/cluster/, baked into the image at the checkout's place
    assert ns.config.startswith(CHECKOUT_IN_IMAGE + "/"), ns.config
    config_file = ROOT / ns.config[len(CHECKOUT_IN_IMAGE) + 1:]
    assert config_file.parent == CLUSTER_CONFIG_DIR and config_file.is_file(), config_file
    load_pipeline_config(config_file)                  # the whole file, as `compass stage --config` reads it
    data = load_pipeline_dict(config_file)[0]
    validate(spec.config, data[ns.section], f"{config_file}:{ns.section}")
    assert ns.store == data["store"], "the job writes to the store the config names"

    # inputs: every required slot, each the LATEST of the artifact the DAG feeds it, of the slot's kind
    inputs = _pairs(ns.input)
    required = set(spec.inputs) - set(spec.optional_inputs)
    assert required <= set(inputs) <= set(spec.inputs), f"{path.name}: input slots {sorted(inputs)}"
    for slot, ref in inputs.items():
        assert ref == f"{ns.store}/{spec.inputs[slot]}/{node.inputs[slot]}/latest", f"{path.name}: {slot}={ref}"
    # outputs: the names the pipeline gives them (the slot's own name when not passed)
    outputs = _pairs(ns.output_name)
    assert set(outputs) <= set(spec.outputs)
    assert {s: outputs.get(s, s) for s in spec.outputs} == node.outputs, f"{path.name}: output names"


def _limits(group: dict) -> dict:
    return group["template"]["spec"]["containers"][0]["resources"]["limits"]


def _gpus(group: dict) -> float:
    return float(_limits(group).get("nvidia.com/gpu", 0))


def _family(group: dict) -> str:
    return IMAGE.match(group["template"]["spec"]["containers"][0]["image"]).group("family")


def _driver_groups(doc: dict) -> list[tuple[str, dict]]:
    """Where Ray may start the entrypoint: a group with the GPUs it asks for, else (none asked) the head."""
    gpus = doc["spec"].get("entrypointNumGpus", 0)
    spec = cluster_spec(doc)
    return [(n, g) for n, g in groups(spec) if _gpus(g) >= gpus] if gpus else [("head", spec["headGroupSpec"])]


def _driver_cpus(doc: dict) -> float:
    """CPUs the driver and its child processes (reward.workers) can count on: what the entrypoint reserves; or, when
    it reserves nothing (Ray then starts it on the head), the head's container, if Ray places nothing else there
    (num-cpus 0)."""
    spec = doc["spec"]
    if spec.get("entrypointNumCpus"):
        return float(spec["entrypointNumCpus"])
    head = cluster_spec(doc)["headGroupSpec"]
    if not spec.get("entrypointNumGpus") and head.get("rayStartParams", {}).get("num-cpus") == "0":
        return float(_limits(head)["cpu"])
    return 0.0


def _job_config(doc: dict):
    """The stage section the RayJob runs, from the config file it names, validated by the stage's config model."""
    from compass.config import validate
    from compass.dag.pipeline_yaml import load_pipeline_dict
    from compass.dag.stages import stage_spec
    argv = entrypoint_argv(doc)
    section = argv[argv.index("--section") + 1]
    path = entrypoint_config(doc)
    return validate(stage_spec(argv[2]).config, load_pipeline_dict(path)[0][section], f"{path}:{section}")


def _in_driver(cfg) -> set[str]:
    """The backend kinds that run in the driver's process or its children: the trainer unless it is a Ray actor or
    fsdp ranks on Ray (ranks > 1), the rollout unless rollout.workers puts it in Ray actors."""
    out = set()
    trainer, rollout = getattr(cfg, "trainer", None), getattr(cfg, "rollout", None)
    if trainer is not None and not trainer.actor and not (trainer.backend.kind == "fsdp" and trainer.backend.ranks > 1):
        out.add(trainer.backend.kind)
    if rollout is not None and not rollout.workers:
        out.add(rollout.backend.kind)
    return out


def _ray_asks(cfg) -> list[tuple[str, int, float, str | None]]:
    """(what, how many, Ray GPUs each, placement strategy) of the Ray actors the RL engine starts for ``cfg``."""
    asks: list = []
    trainer, rollout = getattr(cfg, "trainer", None), getattr(cfg, "rollout", None)
    if trainer is not None:
        b = trainer.backend
        if trainer.actor:
            asks.append((f"{b.kind} trainer actor", 1, trainer.actor_resources.num_gpus, None))
        elif b.kind == "fsdp" and b.ranks > 1:
            asks.append(("fsdp ranks", b.ranks, b.gpus_per_rank, b.placement))
    if rollout is not None and rollout.workers:
        res = rollout.actor_resources
        asks.append((f"{rollout.backend.kind} rollout workers", rollout.workers, res.num_gpus, None))
    return asks


@pytest.mark.parametrize("item", JOBS, ids=_id)
def test_the_driver_lands_where_its_config_can_run(item):
    path, doc = item
    cfg = _job_config(doc)
    here = _in_driver(cfg)
    vllm = "vllm" in here
    cuda = vllm or "megatron" in here
    reward_workers = getattr(getattr(cfg, "reward", None), "workers", 0)
    spec = doc["spec"]
    assert spec.get("entrypointNumGpus", 0) >= (1 if cuda else 0), f"{path.name}: megatron / vLLM need a GPU"
    drivers = _driver_groups(doc)
    assert drivers, f"{path.name}: no group has the driver's GPUs"
    for name, group in drivers:
        container = group["template"]["spec"]["containers"][0]
        family = IMAGE.match(container["image"]).group("family")
        if vllm:      # the vLLM worker is a child process of the driver: its environment must be in the image
            assert family == "rollout", f"{path.name}/{name}: the vLLM rollout needs the rollout image"
        elif cuda:
            assert family in ("train", "rollout"), f"{path.name}/{name}: megatron needs a CUDA image"
        assert spec.get("entrypointNumCpus", 0) <= float(container["resources"]["limits"]["cpu"])
    if reward_workers:   # the reward service's processes are the driver's children: count them in its CPUs
        assert _driver_cpus(doc) > reward_workers, path.name


@pytest.mark.parametrize("item", JOBS, ids=_id)
def test_the_ray_actors_fit_the_cluster(item):
    """The GPUs the config's Ray actors ask for (fsdp ranks, rollout workers, a trainer actor) and the driver's are
    there in the worker groups at their replica counts; each actor fits one pod, on a CUDA image (the rollout
    image where it runs vLLM); STRICT_PACK ranks fit one pod."""
    path, doc = item
    cfg = _job_config(doc)
    pods = [g for n, g in groups(cluster_spec(doc)) if n != "head" for _ in range(g.get("replicas", g["minReplicas"]))]
    gpu_pods = [g for g in pods if _gpus(g)]
    total = sum(_gpus(g) for g in gpu_pods)
    asked = float(doc["spec"].get("entrypointNumGpus", 0))
    for what, count, each, placement in _ray_asks(cfg):
        asked += count * each
        if not each:
            continue
        fits = [g for g in gpu_pods if _gpus(g) >= each]
        assert fits, f"{path.name}: no pod has the {each} GPU(s) each of the {what} asks for"
        for g in fits:
            assert _family(g) in ("train", "rollout"), f"{path.name}: the {what} need a CUDA image"
            if what.startswith("vllm"):
                assert _family(g) == "rollout", f"{path.name}: the {what} need the rollout image"
        if placement == "STRICT_PACK":
            assert any(_gpus(g) >= count * each for g in gpu_pods), f"{path.name}: STRICT_PACK {what} span pods"
    assert asked <= total, f"{path.name}: the driver and the Ray actors ask for {asked} GPUs; the pods have {total}"


def test_the_two_node_config_is_papers_reasoning_rl_on_16_gpus():
    """paper-2node.yaml is paper.yaml (its base) with reasoning_rl's parallel layout and batch changed, nothing
    else; its fsdp ranks fill one GPU pod of its RayJob (PACK: one node's NVLink for their collectives)."""
    from compass.dag.pipeline_yaml import load_pipeline_config
    two, line = load_pipeline_config(PAPER_2NODE_CONFIG)
    paper, _ = load_pipeline_config(PAPER_CONFIG)
    assert str(PAPER_CONFIG) in line, line
    r = two.reasoning_rl
    b = r.trainer.backend
    assert (b.kind, b.ranks, b.gpus_per_rank, b.placement) == ("fsdp", 8, 1, "PACK") and not r.trainer.actor
    assert (r.rollout.backend.kind, r.rollout.workers, r.rollout.actor_resources.num_gpus) == ("native", 8, 1)
    # the paper's 512 prompts x 8 samples over 256 GPUs: 16 rollouts per GPU, here over 16 GPUs
    gpus = b.ranks * b.gpus_per_rank + r.rollout.workers * r.rollout.actor_resources.num_gpus
    assert gpus == 16 and r.sampling.prompts_per_step * r.sampling.group_size / gpus == 512 * 8 / 256
    changed = {"sampling": ("prompts_per_step",), "rollout": ("backend", "workers", "actor_resources"),
               "trainer": ("backend",)}
    mine, theirs = two.model_dump(), paper.model_dump()
    for section, keys in changed.items():
        for key in keys:
            del mine["reasoning_rl"][section][key], theirs["reasoning_rl"][section][key]
    assert mine == theirs, "paper-2node.yaml changes more than reasoning_rl's layout and batch"
    (job,) = [d for _, d in JOBS if entrypoint_config(d) == PAPER_2NODE_CONFIG]
    assert not job["spec"].get("entrypointNumGpus"), "the driver holds no GPU: all 16 are the actors'"
    gpu_pods = [g for n, g in groups(cluster_spec(job)) if n != "head" and _gpus(g)]
    assert gpu_pods and all(_gpus(g) == b.ranks * b.gpus_per_rank for g in gpu_pods)
