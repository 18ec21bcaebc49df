"""Recipes: pydantic models of recipes/*.yaml.

Training keys use Axolotl's names so an Axolotl config ports over; launchpad's own sections are
`resources`, `checkpoint`, `autostop` and `env`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

NAME_PATTERN = r"^[a-z0-9][a-z0-9-]{0,62}$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Dataset(_Strict):
    path: str
    type: Literal["chat", "alpaca", "completion"] = "chat"


class Resources(_Strict):
    gpu: str | None = None  # dstack style: "A100:1", "H100:80GB:8", "24GB.."; None = CPU offers qualify
    nodes: int = Field(1, ge=1)
    cuda: str | None = None  # minimum CUDA version, "12.1"
    disk: Literal["nvme", "any"] = "any"
    spot: bool | Literal["auto"] = False
    regions: list[str] = Field(default_factory=list)  # globs: "us-*"
    max_price: float | None = Field(None, gt=0)  # USD per hour, whole job (all nodes)
    providers: list[str] = Field(default_factory=list)  # allow-list; empty = any configured


class Checkpoint(_Strict):
    uri: str | None = None  # file:// s3:// gs:// az://; None = the provider's default
    every_steps: int = Field(100, ge=1)
    keep: int = Field(3, ge=1)


class Autostop(_Strict):
    idle_minutes: int = Field(30, ge=1)
    action: Literal["stop", "terminate"] = "stop"


class Recipe(_Strict):
    name: str = Field(pattern=NAME_PATTERN)
    base_model: str
    adapter: Literal["qlora", "lora", "full"] = "lora"
    datasets: list[Dataset] = Field(min_length=1)
    sequence_len: int = Field(2048, ge=8)
    micro_batch_size: int = Field(1, ge=1)
    gradient_accumulation_steps: int = Field(1, ge=1)
    learning_rate: float = Field(2e-4, gt=0)
    num_epochs: float | None = Field(None, gt=0)
    max_steps: int | None = Field(None, ge=1)
    bf16: bool | Literal["auto"] = "auto"
    gradient_checkpointing: bool = False
    lora_r: int = Field(8, ge=1)
    lora_alpha: int = Field(16, ge=1)
    lora_dropout: float = Field(0.05, ge=0, lt=1)
    lora_target_modules: list[str] | None = None  # None = the model's attention projections
    lora_modules_to_save: list[str] | None = None  # Axolotl: also train these in full (embed_tokens, lm_head)
    deepspeed: str | None = None  # path to a DeepSpeed JSON config
    seed: int = 42
    logging_steps: int = Field(1, ge=1)

    resources: Resources = Field(default_factory=Resources)
    checkpoint: Checkpoint = Field(default_factory=Checkpoint)
    autostop: Autostop = Field(default_factory=Autostop)
    env: dict[str, str] = Field(default_factory=dict)  # values may be "${env:NAME}"; resolved at launch only

    # Where the recipe came from; not a recipe key (excluded from the schema and from dumps).
    source: str | None = Field(default=None, exclude=True)


def load_recipe(path: str | Path) -> Recipe:
    """Read, validate and resolve a recipe file. Raises RecipeError with one line per problem."""
    raise NotImplementedError  # written by the recipe work
