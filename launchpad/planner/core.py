"""plan(): recipe -> Need -> every offer filtered (each rejection keeps its reason) -> scored -> ranked.

Order of the hard constraints (the first that fails is the reason shown): provider allow-list, accelerator
kind (GPU vs CPU, NVIDIA only), GPU spec, VRAM, host RAM and vCPUs (`Need.host_ram_for`), multi-node capability,
CUDA minimum, NVMe, stop capability, region, spot (no spot price / no spot market), price cap -- and only then
"not configured", so an offer from an unconfigured provider is shown as "not configured" only when it would otherwise
run the recipe;
one that could not run it anyway shows the real reason.

Spot: `resources.spot` false = on-demand variants only, true = spot variants only (an offer without a spot
price is rejected), auto = both, each ranked on its own price. Rejections before the spot step name the
catalog offer once, not once per market.

Speed: everything that depends only on the offer's *shape* (provider, instance type, GPU, count, memory,
CUDA, NVMe, interconnect) is computed once per shape, and the profile once per shape and market; per
offer only the region, price and cost are looked at. See benchmarks/planner.py.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..errors import BadInput, ProviderError
from ..models import Capability, Offer
from .catalog import Facts, facts_for, load_catalog, with_facts
from .egress import egress_per_gb
from .estimate import Profile, profile, version_tuple
from .need import need_from_recipe
from .settings import gpu_info, planner_settings
from .types import Need, Plan, RankedOffer, Rejection

MINIMIZE = ("cost", "time", "score")


def _gb(x: float) -> str:
    return f"{x:.1f}"


class _Evaluator:
    def __init__(self, need: Need, capabilities: Mapping[str, Mapping[Capability, str]], configured: set[str],
                 unavailable: Mapping[str, str], hook: Any = None):
        self.need = need
        self.caps = capabilities
        self.configured = configured
        self.unavailable = unavailable
        self.weights = planner_settings()["weights"]
        self.cpu_max_params = float(planner_settings()["estimate"]["cpu_max_params"])
        self.hook = hook
        self._shape: dict[tuple, tuple[str, str] | None] = {}
        self._variant: dict[tuple, tuple[str, str] | Profile] = {}
        self._region: dict[tuple[str, str | None], bool] = {}
        self._vram: dict[int, float | None] = {}
        self._provider: dict[str, tuple[str, str] | None] = {}
        self._patterns = [fnmatch.translate(g) for g in need.regions]
        self._region_re = re.compile("|".join(f"(?:{p})" for p in self._patterns)) if self._patterns else None

    # -- per provider ---------------------------------------------------------------------------------
    def provider_check(self, provider: str) -> tuple[str, str] | None:
        if provider in self._provider:
            return self._provider[provider]
        need, out = self.need, None
        if need.providers and provider not in need.providers:
            out = ("provider", f"{provider} is not in the allowed providers ({', '.join(need.providers)})")
        self._provider[provider] = out
        return out

    def unsupported(self, provider: str, cap: Capability, facts: Facts) -> str | None:
        """Reason the provider lacks `cap`: the configured class says so, or providers.yaml does."""
        cls_caps = self.caps.get(provider)
        if cls_caps and cap in cls_caps:
            return cls_caps[cap]
        fact = {Capability.STOP: "stop", Capability.SPOT: "spot", Capability.MULTI_NODE: "multi_node"}.get(cap)
        if fact and facts.known and not getattr(facts, fact):
            src = facts.source(fact)
            what = {"stop": "cannot stop instances, only terminate them", "spot": "sells no spot instances",
                    "multi_node": "cannot run multi-node jobs"}[fact]
            return f"{provider} {what}" + (f" ({src})" if src else "")
        return None

    # -- per shape ------------------------------------------------------------------------------------
    def vram_need(self, world: int) -> float | None:
        if world not in self._vram:
            self._vram[world] = self.need.vram_for(world)
        return self._vram[world]

    def shape(self, o: Offer) -> tuple[tuple, tuple[str, str] | None]:
        """(cache key, rejection or None) for the offer's shape, spot or not."""
        key = (o.provider, o.instance_type, o.gpu, o.gpu_count, o.gpu_memory_gb, o.cuda, o.nvme_gb,
               o.interconnect, o.vcpus, o.memory_gb, o.reliability, o.disk_mb_s, o.inet_down_mbps)
        try:
            return key, self._shape[key]
        except KeyError:
            res = self._shape[key] = self._check_shape(o)
            return key, res

    def variant(self, key: tuple, o: Offer) -> tuple[str, str] | Profile:
        """Spot-dependent checks and the profile of a shape that passed `shape`, per market (spot or not)."""
        vkey = (key, o.spot)
        hit = self._variant.get(vkey)
        if hit is None:
            facts = facts_for(o.provider, o.instance_type)
            why = self.unsupported(o.provider, Capability.SPOT, facts) if o.spot else None
            if why:
                hit = ("spot", why)
            else:
                extra = None
                if self.hook is not None:
                    extra = [t for r in self.hook(offer=o, need=self.need) or () for t in (r or ())]
                if facts.stop and self.unsupported(o.provider, Capability.STOP, facts):
                    facts = replace(facts, stop=False)  # the configured class cannot stop: nothing bills stopped
                hit = profile(o, self.need, facts, self.weights, extra)
            self._variant[vkey] = hit
        return hit

    def _check_shape(self, o: Offer) -> tuple[str, str] | None:
        need = self.need
        facts = facts_for(o.provider, o.instance_type)
        spec = need.gpu
        if not o.gpu or o.gpu_count < 1:
            if spec is not None:
                return "gpu", f"no GPU (the recipe asks for {need.gpu_text})"
            if need.params > self.cpu_max_params:
                return "cpu", (f"CPU only: a {need.params / 1e9:.1f}B-parameter model needs a GPU "
                               f"(CPU training is for models under {self.cpu_max_params / 1e9:g}B)")
            vram = self.vram_need(1)
            if vram is not None and o.memory_gb and vram > o.memory_gb:
                return "memory", f"RAM: needs {_gb(vram)} GB, {o.instance_type} has {_gb(o.memory_gb)} GB"
        else:
            info = gpu_info(o.gpu)
            vendor = info.get("vendor", "nvidia")
            if vendor != "nvidia":
                return "accelerator", f"{o.gpu} is not an NVIDIA GPU (the trainer needs CUDA)"
            if spec is not None and not spec.matches(o.gpu, o.gpu_memory_gb, o.gpu_count):
                if spec.names and o.gpu not in spec.names:
                    return "gpu", f"GPU {o.gpu} is not {' or '.join(spec.names)}"
                lo, hi = spec.memory_min_gb, spec.memory_max_gb
                if (lo is not None and o.gpu_memory_gb < lo) or (hi is not None and o.gpu_memory_gb > hi):
                    return "gpu", f"{o.gpu} has {o.gpu_memory_gb:g} GB per GPU, outside the spec {need.gpu_text}"
                want = (str(spec.count_min) if spec.count_min == spec.count_max
                        else f"{spec.count_min}..{spec.count_max or ''}")
                return "gpu_count", f"{o.gpu_count} x {o.gpu}, the recipe asks for {want}"
            vram = self.vram_need(o.gpu_count * need.nodes)
            if vram is not None and vram > o.gpu_memory_gb:
                return "vram", (f"VRAM: needs {_gb(vram)} GB per GPU ({need.adapter}, {o.gpu_count * need.nodes} "
                                f"GPU{'s' if o.gpu_count * need.nodes > 1 else ''}), {o.gpu} has {o.gpu_memory_gb:g} GB")
            # The host around the GPUs: the cheapest of several shapes (GCP g2-standard-4..32) wins only
            # when it can load the weights; unknown sizes (0) are not held against an offer.
            ram = need.host_ram_for(o.gpu_count)
            if o.memory_gb and o.memory_gb < ram:
                return "host", (f"host RAM: needs {_gb(ram)} GB ({need.host_why}), {o.instance_type} has "
                                f"{o.memory_gb:g} GB")
            cpus = need.host_cpus_for(o.gpu_count)
            if o.vcpus and o.vcpus < cpus:
                return "host", f"vCPUs: needs {cpus} ({need.host_cpus_per_gpu} per GPU), {o.instance_type} has {o.vcpus:g}"
        if need.nodes > 1:
            if why := self.unsupported(o.provider, Capability.MULTI_NODE, facts):
                return "multi_node", why
        if need.cuda_min and o.cuda and version_tuple(o.cuda) < version_tuple(need.cuda_min):
            return "cuda", f"CUDA {o.cuda} preinstalled, the recipe needs >= {need.cuda_min}"
        if need.nvme and not o.nvme_gb:
            if why := self.unsupported(o.provider, Capability.NVME, facts):
                return "nvme", why
            if facts.nvme_share:
                return "nvme", (f"local NVMe not guaranteed (only ~{facts.nvme_share:.0%} of {o.provider} hosts "
                                "have it)")
            return "nvme", f"no local NVMe on {o.instance_type}"
        if need.needs_stop:
            if why := self.unsupported(o.provider, Capability.STOP, facts):
                return "stop", f"{why}; the recipe sets autostop.action: stop"
        return None

    # -- per offer ------------------------------------------------------------------------------------
    def region_ok(self, o: Offer) -> bool:
        if self._region_re is None:
            return True
        key = (o.region, o.zone)
        ok = self._region.get(key)
        if ok is None:
            m = self._region_re.match
            ok = self._region[key] = bool(m(o.region) or (o.zone and m(o.zone)))
        return ok


def plan(recipe: Any, providers: Mapping[str, Any], unavailable: Mapping[str, str] | None = None, *,
         minimize: str = "cost", top: int | None = None, include_catalog: bool = True,
         only_providers: Sequence[str] | None = None, catalog: Mapping[str, Sequence[Offer]] | None = None,
         need: Need | None = None) -> Plan:
    """Rank every offer for `recipe`.

    `providers`: configured, usable provider objects by name (their `check()` passed); their offers come
    from `provider.offers()` (facts from providers.yaml fill unknown NVMe/CUDA/interconnect). A provider
    whose `offers()` raises `ProviderError` is treated as unavailable with that error as the reason.
    `only_providers` (the CLI's --provider) leaves every other provider out entirely (no rejections).
    `unavailable`: provider name -> why it is not usable. With `include_catalog`, catalog offers of
    providers *not* in `providers` are evaluated too and, when they pass every hard constraint, rejected as
    "<name>: not configured (<reason>)" so users see what they could get. `catalog` replaces the bundled
    catalog (tests, benchmarks). `top` keeps the best N ranked offers. Raises `BadInput` for an unknown
    `minimize`; never raises `NoFeasibleOffer` (callers decide: `plan.ranked` may be empty).
    """
    if minimize not in MINIMIZE:
        raise BadInput(f"--minimize must be one of {', '.join(MINIMIZE)} (got {minimize!r})")
    unavailable = dict(unavailable or {})
    need = need or need_from_recipe(recipe)
    only = set(only_providers or ())
    notes = list(need.notes)

    sources: list[tuple[str, Iterable[Offer], bool]] = []
    configured: set[str] = set()
    capabilities: dict[str, Mapping[Capability, str]] = {}
    for name, prov in providers.items():
        if only and name not in only:
            continue
        try:
            offers = [with_facts(o) for o in prov.offers()]
        except ProviderError as exc:
            unavailable[name] = f"offers() failed: {exc}"
            notes.append(f"{name}: could not list offers: {exc}")
            continue
        configured.add(name)
        capabilities[name] = dict(getattr(prov, "unsupported", {}) or {})
        sources.append((name, offers, True))
    if include_catalog:
        cat = catalog if catalog is not None else load_catalog()
        for name, listed in cat.items():
            if name not in configured and (not only or name in only):
                sources.append((name, listed, False))

    hook = _score_hook()
    ev = _Evaluator(need, capabilities, configured, unavailable, hook)
    ranked: list[RankedOffer] = []
    elsewhere: list[RankedOffer] = []
    rejected: list[Rejection] = []
    max_price, nodes, policy = need.max_price, need.nodes, need.spot
    want_on_demand = policy is False or policy == "auto"
    want_spot = policy is True or policy == "auto"
    shape, variant, region_ok = ev.shape, ev.variant, ev.region_ok
    check_region = bool(need.regions)
    default_egress = float(planner_settings()["estimate"]["default_egress_per_gb"])
    egress_cache: dict[tuple[str, str], float] = {}

    def egress_for(o: Offer) -> float:
        key = (o.provider, o.region)
        if key not in egress_cache:
            egress_cache[key] = need.checkpoint_bytes / 1e9 * egress_per_gb(o, need.checkpoint_uri, default_egress)
        return egress_cache[key]

    add = rejected.append
    for name, source_offers, is_conf in sources:
        prov_reason = ev.provider_check(name)
        not_conf = None
        if not is_conf:
            why = unavailable.get(name) or f"no launchpad-{name} plugin installed"
            not_conf = f"{name}: not configured ({why})"
        for o in source_offers:
            if prov_reason is not None:
                add(Rejection(o, prov_reason[1], prov_reason[0], is_conf))
                continue
            key, bad = shape(o)
            if bad is not None:
                add(Rejection(o, bad[1], bad[0], is_conf))
                continue
            if check_region and not region_ok(o):
                add(Rejection(o, f"region {o.zone or o.region} does not match {', '.join(need.regions)}",
                              "region", is_conf))
                continue
            # Markets: on-demand and/or spot per resources.spot; a variant is made only for offers that
            # got this far (dataclasses.replace is the slowest thing in this loop).
            variants = []
            if want_on_demand:
                variants.append(replace(o, spot=False) if o.spot else o)
            if want_spot:
                if o.spot_price_per_hour is not None:
                    variants.append(o if o.spot else replace(o, spot=True))
                elif policy is True:
                    add(Rejection(o, "no spot price for this offer (resources.spot: true)", "spot", is_conf))
                    continue
            for v in variants:
                res = variant(key, v)
                if type(res) is tuple:
                    add(Rejection(v, res[1], res[0], is_conf))
                    continue
                price = v.price
                if max_price is not None and price * nodes > max_price:
                    add(Rejection(v, f"${price * nodes:.2f}/h is over max_price ${max_price:g}/h", "price", is_conf))
                    continue
                p: Profile = res  # type: ignore[assignment]
                egress, breakdown = p.egress_usd, p.breakdown
                if need.checkpoint_uri and "://" in need.checkpoint_uri and need.checkpoint_bytes:
                    egress = egress_for(v)  # by where the store is: region matters here, unlike in the profile
                    breakdown = {**breakdown, "egress_usd": egress}
                ro = RankedOffer(v, p.score, p.scores, p.hours, p.hours * price * nodes + egress + p.disk_usd,
                                 breakdown)
                if not_conf is not None:
                    add(Rejection(v, not_conf, "not_configured", False))
                    elsewhere.append(ro)
                else:
                    ranked.append(ro)
    key = _sort_key(minimize)
    ranked.sort(key=key)
    elsewhere.sort(key=key)
    if top is not None:
        ranked = ranked[: max(0, top)]
        elsewhere = elsewhere[: max(0, top)]
    return Plan(need=need, ranked=tuple(ranked), rejected=tuple(rejected), minimize=minimize,
                configured=frozenset(configured), notes=tuple(notes), unconfigured=tuple(elsewhere))


def _bucket(x: float, pct: float) -> int:
    """Values within ~pct% of each other share a bucket, so the score decides between them."""
    if x <= 0:
        return -(10**9)
    return math.floor(math.log(x) / math.log1p(pct / 100.0))


def _sort_key(minimize: str):
    pct = float(planner_settings().get("tie_pct", 0) or 0)
    if minimize == "score":
        return lambda r: (-r.score, r.est_cost, r.offer.provider, r.offer.instance_type, r.offer.region)
    if minimize == "time":
        if pct:
            return lambda r: (_bucket(r.est_hours, pct), -r.score, r.est_cost, r.offer.provider, r.offer.region)
        return lambda r: (r.est_hours, -r.score, r.est_cost, r.offer.provider, r.offer.region)
    if pct:
        return lambda r: (_bucket(r.est_cost, pct), -r.score, r.est_cost, r.offer.provider, r.offer.region)
    return lambda r: (r.est_cost, -r.score, r.offer.provider, r.offer.region)


def _score_hook():
    """The `launchpad_score_offer` hook when any plugin implements it (else None: no per-shape call cost)."""
    try:
        from ..plugins import get_plugin_manager

        h = get_plugin_manager().hook.launchpad_score_offer
        return h if h.get_hookimpls() else None
    except Exception:  # a broken plugin environment must not stop planning
        return None
