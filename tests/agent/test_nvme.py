"""NVMe detection on lsblk outputs of real instance types. The files in data/ follow `lsblk --json --bytes`
as those machines print it (device names, models and layouts as AWS and GCP document them; sizes rounded)."""

from pathlib import Path

import pytest

from launchpad.agent.nvme import choose_data_dir, parse_lsblk

DATA = Path(__file__).parent / "data"


def lsblk(name: str) -> str:
    return (DATA / f"lsblk-{name}.json").read_text()


def test_p4d_has_eight_unmounted_instance_store_disks():
    disks = parse_lsblk(lsblk("p4d.24xlarge"))
    assert [d.name for d in disks] == [f"nvme{i}n1" for i in range(1, 9)]
    assert all(d.mountpoint is None and d.size_bytes == 10**12 for d in disks)


def test_ebs_only_machine_has_no_local_nvme():
    assert parse_lsblk(lsblk("p5.48xlarge-ebs-only")) == []


def test_gcp_local_ssd_counts_and_persistent_disk_does_not():
    assert [d.name for d in parse_lsblk(lsblk("gcp-a3-localssd"))] == ["nvme1n1", "nvme2n1"]


def test_already_mounted_nvme_is_reused(tmp_path):
    mount = tmp_path / "opt-dlami-nvme"
    text = lsblk("g5.2xlarge-dlami-mounted").replace("/opt/dlami/nvme", str(mount))
    (disk,) = parse_lsblk(text)
    assert disk.mountpoint == str(mount)
    chosen = choose_data_dir([tmp_path / "fallback"], lsblk_json=text)
    assert chosen.kind == "nvme" and chosen.path == mount and chosen.warning is None


def test_unmounted_nvme_without_permission_falls_back_with_a_warning(tmp_path):
    chosen = choose_data_dir([tmp_path / "a"], lsblk_json=lsblk("p4d.24xlarge"), allow_mount=False)
    assert chosen.kind == "fallback" and chosen.path == tmp_path / "a"
    assert "not mounted" in chosen.warning


def test_no_nvme_warns_unless_the_provider_never_expected_any(tmp_path):
    chosen = choose_data_dir([tmp_path / "a"], lsblk_json=lsblk("p5.48xlarge-ebs-only"))
    assert chosen.kind == "fallback" and "no local NVMe" in chosen.warning
    quiet = choose_data_dir([tmp_path / "a"], lsblk_json=lsblk("p5.48xlarge-ebs-only"), expect_nvme=False)
    assert quiet.warning is None


def test_fallback_picks_the_writable_candidate(tmp_path):
    unwritable = Path("/proc/launchpad-cannot-write-here")
    chosen = choose_data_dir([unwritable, tmp_path / "ok"], lsblk_json=None)
    assert chosen.path == tmp_path / "ok"


@pytest.mark.parametrize("name", ["p4d.24xlarge", "g5.2xlarge-dlami-mounted", "p5.48xlarge-ebs-only", "gcp-a3-localssd"])
def test_root_disk_is_never_chosen(name):
    assert all(d.mountpoint not in ("/", "/boot/efi") for d in parse_lsblk(lsblk(name)))
