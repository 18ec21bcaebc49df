"""The catalog snapshot builder: each trap of the source data, on small SkyPilot-format files written
here, plus the committed snapshot itself."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from launchpad.planner.build_catalog import main, read_source
from launchpad.planner.catalog import load_catalog, read_catalog_csv

REPO = Path(__file__).resolve().parents[2]
# SkyPilot-format vms.csv catalogs (one folder per cloud); CI has them beside the checkout
SHARED = Path(os.environ.get("LAUNCHPAD_CATALOG_SOURCE") or REPO.parent / "shared" / "catalog")

GCP = """InstanceType,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,GpuInfo,Region,AvailabilityZone,Price,SpotPrice
a2-highgpu-1g,12.0,85.0,,,,us-central1,us-central1-a,0.9,0.4
a2-highgpu-2g,24.0,170.0,,,,us-central1,us-central1-a,1.8,0.8
n1-standard-8,8.0,30.0,,,,us-central1,us-central1-a,0.38,0.08
,,,A100,1,{'Gpus': [{'MemoryInfo': {'SizeInMiB': 40960}}]},us-central1,us-central1-a,2.9,1.1
,,,A100,2,{'Gpus': [{'MemoryInfo': {'SizeInMiB': 40960}}]},us-central1,us-central1-a,5.8,
,,,A100,1,{'Gpus': [{'MemoryInfo': {'SizeInMiB': 40960}}]},us-west1,us-west1-b,2.9,1.1
,,,T4,1,{'Gpus': [{'MemoryInfo': {'SizeInMiB': 16384}}]},us-central1,us-central1-a,0.35,0.14
,,,tpu-v4-8,1,tpu-v4-8,us-central1,us-central1-a,12.9,3.9
"""
VAST = """InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region
1x-A100_SXM4-32-65536,A100,1,32,64.0,"{'Gpus': [{'Name': 'A100', 'Count': 1, 'MemoryInfo': {'SizeInMiB': 81920}}], 'TotalGpuMemoryInMiB': 81920}",0.93,0.00,"Czechia, CZ, EU"
2x-A100_SXM4-32-65536,A100,2,32,64.0,"{'Gpus': [{'Name': 'A100', 'Count': 2, 'MemoryInfo': {'SizeInMiB': 81920}}], 'TotalGpuMemoryInMiB': 81920}",1.87,0.00,"Germany, DE, EU"
1x-RTX_6000Ada-32-65536,RTX6000-Ada,1,32,64.0,"{'Gpus': [{'Name': 'RTX6000-Ada', 'Count': 1, 'MemoryInfo': {'SizeInMiB': 49140}}], 'TotalGpuMemoryInMiB': 49140}",0.7,0.31,"Texas, US, NA"
"""  # noqa: E501 (verbatim catalog rows)
FLUID = ("InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region,GpuInfo,SpotPrice\r\n"
         "H100_PCIE_80GB::1,H100,1,28,180.0,2.89,CANADA,\"{'Gpus': [{'Name': 'H100', 'Count': 1, 'MemoryInfo': "
         "{'SizeInMiB': 81920}}], 'TotalGpuMemoryInMiB': 81920}\",\r\n")
AZURE = """InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,Generation
Standard_A1_v2,,,1,2,,0.05,0.00924,eastus,V1
Standard_NC24ads_A100_v4,A100-80GB,1,24,220,A100-80GB,3.67,0.73,eastus,V2
Standard_NC12s_v3,V100,2,12,224,V100,8.468,1.564886,eastus,"V1,V2"
"""
AWS = """InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,AvailabilityZone,Arch
g6f.large,L4,0.125,2.0,8.0,,0.2,,us-east-1,us-east-1a,x86_64
g5.xlarge,A10G,1.0,4.0,16.0,"{'Gpus': [{'Name': 'A10G', 'Count': 1, 'MemoryInfo': {'SizeInMiB': 22888}}], 'TotalGpuMemoryInMiB': 22888}",1.006,0.45,us-east-1,us-east-1a,x86_64
"""  # noqa: E501 (verbatim catalog rows)


@pytest.fixture
def source(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    for cloud, text in {"gcp": GCP, "vast": VAST, "fluidstack": FLUID, "azure": AZURE, "aws": AWS}.items():
        (src / cloud).mkdir(parents=True)
        (src / cloud / "vms.csv").write_bytes(text.encode())
    return src


def test_gcp_accelerators_are_joined_to_their_host_vm(source: Path) -> None:
    rows = {(r.instance_type, r.gpu, r.gpu_count, r.zone): r for r in read_source(source)["gcp"]}
    a1 = rows[("a2-highgpu-1g", "A100", 1, "us-central1-a")]
    assert a1.price == pytest.approx(0.9 + 2.9)
    assert a1.spot_price == pytest.approx(0.4 + 1.1)
    assert (a1.vcpus, a1.memory_gb, a1.gpu_memory_gb) == (12.0, 85.0, 40.0)
    # spot unknown on the accelerator row -> the joined offer has no spot price
    assert rows[("a2-highgpu-2g", "A100", 2, "us-central1-a")].spot_price is None
    # attachable GPUs go on an N1 host with 8 vCPUs per GPU
    t4 = rows[("n1-standard-8", "T4", 1, "us-central1-a")]
    assert t4.price == pytest.approx(0.38 + 0.35)
    # no host VM in us-west1-b: not an offer; TPUs are dropped; no row without an instance type survives
    assert not any(z == "us-west1-b" for (_, _, _, z) in rows)
    assert all(r.instance_type and not r.gpu.startswith("TPU") for r in rows.values())
    assert len(rows) == 3


G2_N1 = """InstanceType,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,GpuInfo,Region,AvailabilityZone,Price,SpotPrice
g2-standard-4,4.0,16.0,,,,us-east4,us-east4-a,0.2,0.08
g2-standard-8,8.0,32.0,,,,us-east4,us-east4-a,0.3,0.1
g2-standard-24,24.0,96.0,,,,us-east4,us-east4-a,1.0,0.3
n1-standard-8,8.0,30.0,,,,us-east4,us-east4-a,0.38,0.08
n1-highmem-8,8.0,52.0,,,,us-east4,us-east4-a,0.47,0.1
n1-standard-16,16.0,60.0,,,,us-east4,us-east4-a,0.76,0.16
,,,L4,1,,us-east4,us-east4-a,0.5,0.12
,,,V100,1,,us-east4,us-east4-a,2.48,0.74
"""


def test_gcp_keeps_every_valid_host_shape(tmp_path: Path) -> None:
    """Issue 9 item 4: one L4 comes on several g2 shapes (not only g2-standard-8); an attachable GPU goes on
    every N1 VM within its limits (one V100: at most 12 vCPUs, so not n1-standard-16)."""
    (tmp_path / "gcp").mkdir()
    (tmp_path / "gcp" / "vms.csv").write_text(G2_N1)
    rows = read_source(tmp_path)["gcp"]
    l4 = {r.instance_type: r.price for r in rows if r.gpu == "L4"}
    assert l4 == {"g2-standard-4": pytest.approx(0.7), "g2-standard-8": pytest.approx(0.8)}
    assert {r.instance_type for r in rows if r.gpu == "V100"} == {"n1-standard-8", "n1-highmem-8"}


def test_vast_spot_price_zero_means_unknown(source: Path) -> None:
    rows = read_source(source)["vast"]
    a100 = [r for r in rows if r.gpu == "A100"]
    assert a100 and all(r.spot_price is None for r in a100)
    ada = next(r for r in rows if r.gpu == "RTX6000ADA")
    assert ada.spot_price == pytest.approx(0.31)  # a real spot price is kept


def test_vast_a100_memory_comes_from_gpuinfo_not_the_name(source: Path) -> None:
    rows = {r.instance_type + r.region: r for r in read_source(source)["vast"]}
    assert rows["1x-A100_SXM4-32-65536Czechia, CZ, EU"].gpu_memory_gb == 80
    # Vast's SizeInMiB is the total over GPUs: 2 GPUs with 81920 MiB in all are 40 GB each
    assert rows["2x-A100_SXM4-32-65536Germany, DE, EU"].gpu_memory_gb == 40


def test_fluidstack_crlf_parses(source: Path) -> None:
    (row,) = read_source(source)["fluidstack"]
    assert (row.instance_type, row.region, row.gpu, row.gpu_memory_gb, row.price) == (
        "H100_PCIE_80GB::1", "CANADA", "H100", 80, 2.89)
    assert row.spot_price is None


def test_names_memory_cpu_rows_and_fractional_gpus(source: Path) -> None:
    rows = read_source(source)
    azure = {r.instance_type: r for r in rows["azure"]}
    assert "Standard_A1_v2" not in azure  # CPU-only rows are not in the GPU snapshot
    assert (azure["Standard_NC24ads_A100_v4"].gpu, azure["Standard_NC24ads_A100_v4"].gpu_memory_gb) == ("A100", 80)
    assert azure["Standard_NC12s_v3"].gpu_memory_gb == 16  # from the GPU table when the row has no GpuInfo
    aws = {r.instance_type: r for r in rows["aws"]}
    assert "g6f.large" not in aws and aws["g5.xlarge"].gpu_memory_gb == 22
    # ...but the benchmark can read the CPU rows too
    assert any(r.instance_type == "Standard_A1_v2" for r in read_source(source, gpu_only=False)["azure"])


def test_written_catalog_round_trips_into_offers(source: Path, tmp_path: Path, capsys) -> None:
    dest = tmp_path / "out"
    assert main([str(source), str(dest)]) == 0
    assert (dest / "PROVENANCE.md").read_text().startswith("# Provenance")
    offers = read_catalog_csv("gcp", dest / "gcp.csv")
    o = next(o for o in offers if o.instance_type == "a2-highgpu-1g")
    assert (o.provider, o.gpu, o.gpu_count, o.price_per_hour, o.spot) == ("gcp", "A100", 1, pytest.approx(3.8), False)
    assert o.interconnect and o.interconnect.startswith("nvlink")  # facts from providers.yaml: A2 has NVLink


def test_committed_snapshot_covers_seven_clouds_with_the_traps_handled() -> None:
    cat = load_catalog()
    assert set(cat) == {"aws", "gcp", "azure", "lambda", "vast", "fluidstack", "paperspace"}
    assert sum(len(v) for v in cat.values()) > 2500
    vast = cat["vast"]
    assert all(o.spot_price_per_hour is None for o in vast)
    assert {o.gpu_memory_gb for o in vast if o.gpu == "A100" and o.gpu_count == 1} == {40, 80}
    assert all(o.instance_type for o in cat["gcp"])
    assert all(o.gpu and o.gpu_count >= 1 for offers in cat.values() for o in offers)


@pytest.mark.skipif(not SHARED.is_dir(), reason="needs SkyPilot-format catalogs: set LAUNCHPAD_CATALOG_SOURCE=DIR "
                    "(one folder per cloud with vms.csv), or have ../shared/catalog beside the checkout")
def test_committed_snapshot_is_what_the_builder_makes(tmp_path: Path) -> None:
    main([str(SHARED), str(tmp_path)])
    for csv_path in sorted((REPO / "configs" / "catalog").glob("*.csv")):
        assert (tmp_path / csv_path.name).read_text() == csv_path.read_text(), csv_path.name


def test_lambda_multi_gpu_rows_keep_each_gpus_memory():
    """Lambda's source writes one GPU's memory in TotalGpuMemoryInMiB: 8x A100 40GB is 40 GB a GPU, not 5."""
    import csv

    rows = {r["InstanceType"]: r for r in csv.DictReader((REPO / "configs" / "catalog" / "lambda.csv").open())}
    assert float(rows["gpu_8x_a100"]["GpuMemoryGB"]) == 40
    assert float(rows["gpu_8x_h100_sxm5"]["GpuMemoryGB"]) == 80
    assert float(rows["gpu_1x_a100"]["GpuMemoryGB"]) == 40
