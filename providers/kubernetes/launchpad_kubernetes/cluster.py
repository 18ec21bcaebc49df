# mypy: disable-error-code="import-untyped"
# (the kubernetes client ships no type information)
"""One cluster (a kubeconfig context): its API clients, its namespace, its settings, and the GPU shapes its
nodes offer.

Settings are the provider's section of config.yaml with the context's own section on top
(``clusters: {<context>: {...}}``), because clusters differ: the GPU resource name (``nvidia.com/gpu``, or
per-model names such as CoreWeave's ``nvidia.com/gpu-a100-80gb``), the node label that names the GPU,
prices (a cluster has no public price list), and, for clusters whose nodes do not say (no GPU feature
discovery, or no permission to list nodes), the shapes themselves under ``gpus:``.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from launchpad.errors import AuthError, LaunchpadError, NotConfigured, ProviderError, QuotaExceeded, TransientError
from launchpad.gpuspec import canonical_gpu_name

NAME = "kubernetes"
# Node labels that name a node's GPU, in the order they are tried: NVIDIA GPU feature discovery,
# CoreWeave, GKE, EKS/Karpenter.
PRODUCT_LABELS = ("nvidia.com/gpu.product", "gpu.nvidia.com/class", "cloud.google.com/gke-accelerator",
                  "karpenter.k8s.aws/instance-gpu-name")
MEMORY_LABEL = "nvidia.com/gpu.memory"  # MiB per GPU (GPU feature discovery)
_GPU_RESOURCE = re.compile(r"^nvidia\.com/gpu(-[a-z0-9][a-z0-9.-]*)?$")
_MEM = re.compile(r"(\d+)\s*g(?:b|i)?(?![a-z])", re.IGNORECASE)
_NOISE = re.compile(r"(NVLINK|PCIE|SXM\d*|HBM\d*E?)", re.IGNORECASE)


@dataclass(frozen=True)
class Shape:
    """GPUs of one kind on one kind of node: what offers are cut from."""

    product: str  # the node label's value, or the config entry's name
    gpu: str  # canonical ("A100")
    memory_gb: float
    count: int  # GPUs per node (allocatable)
    resource: str  # the extended resource the pod asks for
    label: str | None  # the node label the pod's affinity matches `product` on
    node_selector: Mapping[str, str] = field(default_factory=dict)
    price_per_gpu: float = 0.0
    vcpus: float = 0.0  # per node
    host_memory_gb: float = 0.0  # per node
    tolerations: tuple = ()


def gpu_name(product: str, resource: str = "") -> str:
    """``NVIDIA-A100-SXM4-80GB`` / ``A100_NVLINK_80GB`` / ``nvidia.com/gpu-a100-80gb`` -> ``A100``."""
    text = product or resource.removeprefix("nvidia.com/gpu-")
    return canonical_gpu_name(_NOISE.sub(" ", text)) if text else ""


def memory_from_name(text: str) -> float:
    m = _MEM.search(text or "")
    return float(m.group(1)) if m else 0.0


def quantity(text: Any) -> float:
    """A Kubernetes quantity (``16``, ``15500m``, ``64Gi``, ``131072Ki``) as a number (bytes for memory)."""
    s = str(text or "0").strip()
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "m": 1e-3}
    for suffix, mult in units.items():
        if s.endswith(suffix):
            return float(s[: -len(suffix)]) * mult
    try:
        return float(s)
    except ValueError:
        return 0.0


def api_error(e: Exception, what: str) -> LaunchpadError:
    """A kubernetes ApiException as launchpad's error (the API's own message, one line)."""
    import json

    status = getattr(e, "status", 0) or 0
    body = getattr(e, "body", None)
    message = str(getattr(e, "reason", "") or e)
    try:
        doc = json.loads(body) if body else {}
        message = doc.get("message") or message
    except (TypeError, ValueError):
        pass
    message = f"{what}: {message}".splitlines()[0]
    if status == 401:
        return AuthError(message, provider=NAME, hint="the kubeconfig's credentials were rejected: refresh them")
    if status == 403:
        if "exceeded quota" in message:
            return QuotaExceeded(message, provider=NAME, scope="region")
        return AuthError(message, provider=NAME, hint="README: Kubernetes, least privilege: the Role launchpad needs")
    if status in (0, 429, 500, 502, 503, 504):
        return TransientError(message, provider=NAME)
    return ProviderError(message, provider=NAME)


class Cluster:
    """One kubeconfig context. Constructed without I/O; the API client is made on first use."""

    def __init__(self, context: str, settings: Mapping[str, Any], kube_namespace: str | None):
        self.context = context
        self.settings = dict(settings)
        self.namespace = str(self.settings.get("namespace") or kube_namespace or "default")
        self._client: Any = None
        self._lock = threading.Lock()

    def client(self):
        with self._lock:
            if self._client is None:
                from kubernetes import config as kconfig

                try:
                    self._client = kconfig.new_client_from_config(config_file=self.settings.get("kubeconfig"),
                                                                  context=self.context, persist_config=False)
                except Exception as e:  # the kubeconfig itself is unusable (a missing file, a bad exec plugin)
                    raise NotConfigured(f"context {self.context}: {e}".splitlines()[0], provider=NAME) from None
            return self._client

    def core(self):
        from kubernetes import client

        return client.CoreV1Api(self.client())

    def batch(self):
        from kubernetes import client

        return client.BatchV1Api(self.client())

    def call(self, what: str, fn, *args, not_found: Any = ..., **kwargs):
        """``fn(*args, **kwargs)`` with ApiException mapped; `not_found` is returned for a 404 when given."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            return fn(*args, _request_timeout=float(self.settings.get("request_timeout") or 30), **kwargs)
        except ApiException as e:
            if e.status == 404 and not_found is not ...:
                return not_found
            raise api_error(e, f"{self.context}: {what}") from None
        except (HTTPError, OSError) as e:
            raise TransientError(f"{self.context}: {what}: the API server is not reachable ({e})".splitlines()[0],
                                 provider=NAME) from None

    # -- GPU shapes ------------------------------------------------------------------------------------
    def resource_names(self) -> list[str] | None:
        """The GPU resource names configured for this cluster (None: any ``nvidia.com/gpu*`` the nodes have)."""
        value = self.settings.get("gpu_resource")
        if not value:
            return None
        return [str(v) for v in value] if isinstance(value, list) else [str(value)]

    def shapes(self) -> list[Shape]:
        """From config (``gpus:``) when set, else from the nodes' labels and allocatable resources."""
        prices = {canonical_gpu_name(str(k)): float(v) for k, v in (self.settings.get("prices") or {}).items()}
        if self.settings.get("gpus"):
            return [self._configured(entry, prices) for entry in self.settings["gpus"]]
        nodes = self.call("list nodes", self.core().list_node, label_selector=self.settings.get("node_label_selector"))
        found: dict[tuple[str, str], Shape] = {}
        wanted = self.resource_names()
        label_pref = [self.settings["gpu_product_label"]] if self.settings.get("gpu_product_label") else list(PRODUCT_LABELS)
        for node in nodes.items:
            if node.spec and node.spec.unschedulable:
                continue
            alloc = (node.status.allocatable if node.status else None) or {}
            node_labels = node.metadata.labels or {}
            for resource, amount in alloc.items():
                if not (resource in wanted if wanted else _GPU_RESOURCE.match(resource)):
                    continue
                count = int(quantity(amount))
                if count < 1:
                    continue
                label = next((lb for lb in label_pref if node_labels.get(lb)), None)
                product = node_labels.get(label, "") if label else ""
                gpu = gpu_name(product, resource) or "GPU"
                mib = quantity(node_labels.get(MEMORY_LABEL))
                mem = round(mib / 1024) if mib else memory_from_name(product) or memory_from_name(resource) or _table_memory(gpu)
                key = (product or resource, resource)
                shape = Shape(product=product or resource, gpu=gpu, memory_gb=float(mem), count=count, resource=resource,
                              label=label, price_per_gpu=prices.get(gpu, 0.0),
                              vcpus=quantity(alloc.get("cpu")), host_memory_gb=quantity(alloc.get("memory")) / 2**30)
                if key not in found or found[key].count < count:
                    found[key] = shape
        return sorted(found.values(), key=lambda s: (s.gpu, s.product))

    def _configured(self, entry: Mapping[str, Any], prices: Mapping[str, float]) -> Shape:
        resource = str(entry.get("resource") or (self.resource_names() or ["nvidia.com/gpu"])[0])
        product = str(entry.get("product") or entry.get("gpu") or resource)
        gpu = canonical_gpu_name(str(entry["gpu"])) if entry.get("gpu") else gpu_name(product, resource)
        mem = float(entry.get("memory_gb") or memory_from_name(product) or memory_from_name(resource) or _table_memory(gpu))
        label = entry.get("label") or self.settings.get("gpu_product_label")
        price = entry.get("price_per_gpu_hour")
        return Shape(product=product, gpu=gpu, memory_gb=mem, count=int(entry.get("count") or 1), resource=resource,
                     label=str(label) if label and entry.get("product") else None,
                     node_selector={str(k): str(v) for k, v in (entry.get("node_selector") or {}).items()},
                     price_per_gpu=float(price) if price is not None else prices.get(gpu, 0.0),
                     vcpus=float(entry.get("vcpus") or 0), host_memory_gb=float(entry.get("memory_gb_host") or 0))


def _table_memory(gpu: str) -> float:
    from launchpad.planner.settings import gpu_info

    return float(gpu_info(gpu).get("memory_gb") or 0)


def contexts(kubeconfig: str | None) -> tuple[list[dict], dict | None]:
    """The kubeconfig's contexts and its current one (KUBECONFIG, ``:``-separated, else ~/.kube/config)."""
    from kubernetes import config as kconfig

    try:
        found, current = kconfig.list_kube_config_contexts(config_file=kubeconfig)
    except Exception as e:  # no file, or not a kubeconfig
        raise NotConfigured(f"no usable kubeconfig: {e}".splitlines()[0], provider=NAME,
                            hint="set KUBECONFIG, or `kubeconfig:` under providers: kubernetes: in config.yaml") from None
    return list(found or []), current
