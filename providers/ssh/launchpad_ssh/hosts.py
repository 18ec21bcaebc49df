"""hosts.yaml: the machines the `ssh` provider may use. Validated with pydantic; every problem is one
line naming the file, the host and the field.

    # <launchpad config dir>/hosts.yaml  ($LAUNCHPAD_HOME/hosts.yaml when set)
    hosts:
      - name: box1                  # a-z 0-9 -, unique
        address: 203.0.113.7        # IP, DNS name or a ~/.ssh/config alias (HostName/Port/User/IdentityFile/ProxyJump)
        user: ubuntu
        gpus: A100:80GB:8           # dstack style NAME[:MEMORY]:COUNT, or {name: A100, count: 8, memory_gb: 80}
        price_per_hour: 10.32       # what you pay (the planner ranks on it); 0 for hardware you own
        # optional: port, private_address, key, host_key ("ssh-ed25519 AAAA..."), proxy_jump, region, labels, vcpus,
        # memory_gb, nvme_gb, mount_nvme, cuda, python, root, checkpoint_uri, stop_command, connect_timeout,
        # fabric_gbps (the bandwidth between your hosts, Gb/s: the multi-node preflight's all-reduce is judged against it)
    checkpoint_uri: s3://bucket/checkpoints     # optional default for every host
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from launchpad.errors import ConfigError

_NAME = r"^[a-z0-9][a-z0-9-]{0,40}$"
_URI = re.compile(r"^(file|s3|gs|az)://.+")


@dataclass(frozen=True)
class Gpus:
    name: str | None = None
    count: int = 0
    memory_gb: float = 0.0


class GpuFields(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(min_length=1)
    count: int = Field(1, ge=1, le=64)
    memory_gb: float | None = Field(None, gt=0, le=4096)


def _no_space(value: str | None) -> str | None:
    if value is not None and (not value.strip() or any(c.isspace() or ord(c) < 32 for c in value)):
        raise ValueError("must be non-empty, without spaces or control characters")
    return value


class Host(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=_NAME, description="unique; a-z, 0-9 and '-' (it names instances)")
    address: str
    private_address: str | None = None  # how the other nodes of a multi-node job reach this one
    port: int | None = Field(None, ge=1, le=65535)
    user: str | None = None
    key: str | None = None
    host_key: str | None = None
    proxy_jump: str | None = None
    gpus: Any = None  # parsed into `Gpus` by the validator below
    price_per_hour: float = Field(0.0, ge=0, le=10000)
    region: str = Field("ssh", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    labels: dict[str, str] = Field(default_factory=dict)
    vcpus: float = Field(0.0, ge=0)
    memory_gb: float = Field(0.0, ge=0)
    nvme_gb: float = Field(0.0, ge=0)
    mount_nvme: bool = False  # let the agent format/mount an unmounted NVMe disk on this host
    cuda: str | None = Field(None, pattern=r"^\d{1,2}(\.\d{1,2}){0,2}$")
    python: str | None = None
    root: str | None = None
    checkpoint_uri: str | None = None
    stop_command: list[str] | None = Field(None, min_length=1)
    connect_timeout: float = Field(30.0, gt=0, le=3600)
    fabric_gbps: float | None = Field(None, gt=0, le=100000)  # inter-node bandwidth per host, Gb/s (what you paid for)

    _plain = field_validator("address", "private_address", "user", "key", "python", "root", "proxy_jump")(_no_space)

    @field_validator("cuda", mode="before")
    @classmethod
    def _cuda_text(cls, v: Any) -> Any:
        return str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v

    @field_validator("host_key")
    @classmethod
    def _host_key(cls, v: str | None) -> str | None:
        if v is None:
            return v
        from launchpad.ssh.keys import parse_public_key

        parse_public_key(v)  # ValueError with the reason
        return " ".join(v.split()[:2])

    @field_validator("checkpoint_uri")
    @classmethod
    def _uri(cls, v: str | None) -> str | None:
        if v is not None and not _URI.match(v):
            raise ValueError("must be a store URI: s3://bucket/path, gs://..., az://... (file:// is a path on the host)")
        return v

    @field_validator("stop_command")
    @classmethod
    def _argv(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and any(not a or "\x00" in a for a in v):
            raise ValueError("must be an argv list of non-empty strings, e.g. [sudo, shutdown, -h, now]")
        return v

    @field_validator("gpus", mode="before")
    @classmethod
    def _gpus(cls, v: Any) -> Gpus:
        if isinstance(v, dict):
            try:
                v = GpuFields.model_validate(v)
            except ValidationError as e:
                err = e.errors()[0]
                where = ".".join(str(x) for x in err["loc"])
                raise ValueError(f"{where}: {err['msg']}" if where else err["msg"]) from None
        elif v is not None and not isinstance(v, (str, int)) or isinstance(v, bool):
            raise ValueError("must be a spec like 'A100:80GB:8' or {name: A100, count: 8, memory_gb: 80}")
        return parse_gpus(v)

    @property
    def gpu_info(self) -> Gpus:
        return self.gpus if isinstance(self.gpus, Gpus) else Gpus()


class HostsFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    hosts: list[Host] = Field(default_factory=list)
    checkpoint_uri: str | None = None

    @field_validator("checkpoint_uri")
    @classmethod
    def _uri(cls, v: str | None) -> str | None:
        return Host._uri(v)

    @model_validator(mode="after")
    def _unique(self) -> HostsFile:
        seen: set[str] = set()
        for h in self.hosts:
            if h.name in seen:
                raise ValueError(f"two hosts are named {h.name!r}; names must be unique")
            seen.add(h.name)
        return self


def parse_gpus(value: str | int | GpuFields | None) -> Gpus:
    """``A100:80GB:8`` / ``H100:8`` / ``RTX4090`` / {name, count, memory_gb} / 0 or None (no GPU)."""
    from launchpad.gpuspec import canonical_gpu_name, parse_gpu_spec

    if value is None or value == 0 or value == "":
        return Gpus()
    if isinstance(value, int):
        raise ValueError("give the GPU name too, e.g. 'A100:80GB:8' or {name: A100, count: 8, memory_gb: 80}")
    if isinstance(value, GpuFields):
        name, count, memory = canonical_gpu_name(value.name), value.count, value.memory_gb
    else:
        spec = parse_gpu_spec(value)
        if len(spec.names) != 1:
            raise ValueError(f"{value!r}: name exactly one GPU model, e.g. 'A100:80GB:8'")
        if spec.count_max != spec.count_min:
            raise ValueError(f"{value!r}: give an exact GPU count, e.g. 'A100:80GB:8'")
        if spec.memory_min_gb != spec.memory_max_gb and None not in (spec.memory_min_gb, spec.memory_max_gb):
            raise ValueError(f"{value!r}: give the exact memory per GPU, e.g. 80GB")
        if (spec.memory_min_gb is None) != (spec.memory_max_gb is None):
            raise ValueError(f"{value!r}: give the exact memory per GPU, e.g. 80GB (not a range)")
        name, count, memory = spec.names[0], spec.count_min, spec.memory_min_gb
    if memory is None:
        memory = _known_memory(name)
        if memory is None:
            raise ValueError(f"memory per GPU of {name} is not known (or differs between models): "
                             f"write it, e.g. '{name}:80GB:{count}'")
    return Gpus(name=name, count=count, memory_gb=float(memory))


def _known_memory(name: str) -> float | None:
    """The memory of `name` when every catalog lists one size for it (A10: 24; A100: 40 or 80 -> None)."""
    try:
        from launchpad.planner.catalog import load_catalog
    except ImportError:
        return None
    sizes = {o.gpu_memory_gb for offers in load_catalog().values() for o in offers if o.gpu == name and o.gpu_memory_gb}
    return sizes.pop() if len(sizes) == 1 else None


def load_hosts(path: Path) -> HostsFile:
    """Read and validate hosts.yaml. A missing file is an empty one. Raises ConfigError, one line per
    problem: ``<file>: hosts[1] (box2).port: ...``."""
    from launchpad.yamlsafe import YamlError, read_yaml_mapping

    if not path.exists():
        return HostsFile()
    try:
        data = read_yaml_mapping(path)
    except YamlError as e:
        raise ConfigError("\n".join(f"{path}: {p}" for p in e.problems)) from None
    hosts = data.get("hosts")
    if isinstance(hosts, dict):  # `hosts: {box1: {...}}` is the same as a list with names
        data = {**data, "hosts": [{"name": k, **v} if isinstance(v, dict) else v for k, v in hosts.items()]}
    try:
        return HostsFile.model_validate(data)
    except ValidationError as e:
        raise ConfigError("\n".join(_lines(path, data, e))) from None


def _lines(path: Path, data: dict, e: ValidationError) -> list[str]:
    lines = []
    for err in e.errors():
        loc = list(err["loc"])
        where = ""
        if loc[:1] == ["hosts"] and len(loc) > 1 and isinstance(loc[1], int):
            i = loc[1]
            hosts = data.get("hosts") or []
            name = hosts[i].get("name") if i < len(hosts) and isinstance(hosts[i], dict) else None
            where = f"hosts[{i}]" + (f" ({name})" if name else "")
            rest = [str(x) for x in loc[2:]]
            where += ("." + ".".join(rest)) if rest else ""
        else:
            where = ".".join(str(x) for x in loc) or "top level"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key (check the spelling; see the README's hosts.yaml example)"
        elif err["type"] == "missing":
            msg = "required"
        line = f"{path}: {where}: {msg}"
        if line not in lines:
            lines.append(line)
    return lines
