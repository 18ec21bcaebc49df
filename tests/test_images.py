from __future__ import annotations

import pytest

from launchpad.errors import NoCapacity
from launchpad.images import Image, cuda_tuple, pick_image

IMAGES = [Image("img:cu118", "11.8"), Image("img:cu121", "12.1"), Image("img:cu124", "12.4.1"), Image("img:cu128", "12.8")]


def test_versions_parse_the_ways_they_are_written():
    assert cuda_tuple("12.4") == (12, 4) and cuda_tuple("12.4.1") == (12, 4, 1) and cuda_tuple(12.1) == (12, 1)
    assert cuda_tuple(None) is None and cuda_tuple("latest") is None


@pytest.mark.parametrize("need, host_max, ref", [
    (None, None, "img:cu128"),  # nothing asked: the newest
    ("12.1", "12.4", "img:cu124"),  # the host's driver caps it: 12.8 would not start
    ("12.1", 12.2, "img:cu121"),
    ("11.8", "11.8", "img:cu118"),
    ("12.4", None, "img:cu128"),
])
def test_the_newest_image_the_host_can_run_that_meets_the_recipe(need, host_max, ref):
    assert pick_image(IMAGES, need=need, host_max=host_max).ref == ref


def test_no_image_that_fits_is_no_capacity_for_that_offer_naming_both_versions():
    with pytest.raises(NoCapacity) as e:
        pick_image(IMAGES, need="12.4", host_max="12.2", provider="vast")
    assert e.value.scope == "offer" and e.value.provider == "vast"
    assert "CUDA 12.4" in str(e.value) and "12.2" in str(e.value)
