"""Vast.ai's refusals mapped to what the lifecycle does next: a missing or refused key blocks the provider
with one line, a 403 names the permission, low credit blocks the provider, 429/5xx are retried (bounded).
The 429/5xx answers are INJECTED into the double (`fail_next`): nothing here can overload Vast."""

from __future__ import annotations

import pytest
from vast_helpers import API_KEY, RELIABLE, offer_on

from launchpad.errors import AuthError, QuotaExceeded, TransientError
from launchpad.models import JOB_TAG, InstanceSpec

pytestmark = [pytest.mark.object_store, pytest.mark.sshd]


def _spec(job="job-e"):
    return InstanceSpec(job_id=job, token=f"{job}-1", tags={JOB_TAG: job})


def test_no_key_is_one_line_with_the_fix(vast_config, monkeypatch):
    from launchpad_vast import VastProvider

    monkeypatch.delenv("VAST_API_KEY")
    reason = VastProvider(vast_config).check()
    assert reason and "no Vast.ai API key" in reason and "VAST_API_KEY" in reason and "\n" not in reason


def test_the_vastai_cli_key_file_is_used(vast_config, monkeypatch, tmp_path):
    from launchpad_vast import VastProvider

    monkeypatch.delenv("VAST_API_KEY")
    path = tmp_path / "xdg" / "vastai" / "vast_api_key"  # where `vastai set api-key` writes it
    path.parent.mkdir(parents=True)
    path.write_text(API_KEY + "\n")
    assert VastProvider(vast_config).check() is None


def test_a_refused_key_blocks_the_provider_with_one_line(vast_config, vast_api, monkeypatch):
    from launchpad_vast import VastProvider

    monkeypatch.setenv("VAST_API_KEY", "revoked-key")
    provider = VastProvider(vast_config)
    reason = provider.check()
    assert reason and "rejected the API key" in reason and "\n" not in reason and "revoked-key" not in reason
    with pytest.raises(AuthError):
        provider.offers()
    assert all("revoked-key" not in path for _, path, _ in vast_api.requests)  # only ever in a header


def test_a_forbidden_call_is_an_auth_error_naming_it(vast, vast_api):
    vast_api.fail_next("PUT", "/asks/", 403, {"success": False, "error": "forbidden",
                                              "msg": "api key lacks permission instance_write"})
    with pytest.raises(AuthError) as e:
        vast.provision(offer_on(vast, RELIABLE), _spec())
    assert "instance_write" in str(e.value) and "PUT /asks/" in str(e.value)


def test_low_credit_blocks_the_provider(vast, vast_api):
    vast_api.fail_next("PUT", "/asks/", 400, {"success": False, "error": "insufficient_credit",
                                              "msg": "Your account lacks credit; see the billing page."})
    with pytest.raises(QuotaExceeded) as e:
        vast.provision(offer_on(vast, RELIABLE), _spec())
    assert e.value.scope == "provider" and vast_api.live() == []


def test_throttling_is_retried_then_succeeds(vast, vast_api):
    vast_api.fail_next("POST", "/bundles/", 429, "API requests too frequent: endpoint threshold=2.0", times=2)
    assert vast.offers()
    assert sum(1 for m, p, _ in vast_api.requests if m == "POST") == 3


def test_a_rent_is_never_sent_twice_blindly(vast, vast_api, monkeypatch):
    monkeypatch.setenv("LAUNCHPAD_VAST_RETRIES", "2")
    vast_api.fail_next("PUT", "/asks/", 502, "Bad Gateway", times=2)
    with pytest.raises(TransientError):
        vast.provision(offer_on(vast, RELIABLE), _spec())
    methods = [(m, p.split("?")[0]) for m, p, _ in vast_api.requests]
    rents = [i for i, (m, p) in enumerate(methods) if m == "PUT" and "/asks/" in p]
    assert len(rents) == 2 and methods[rents[0] + 1] == ("GET", "/api/v0/instances/")  # looked up in between
    assert vast_api.live() == []


def test_an_unreachable_api_is_usable_on_the_bundled_snapshot_not_misconfigured(vast_config, monkeypatch):
    """No route to Vast (a proxy, an outage) says nothing about the key: `plan` still ranks the snapshot."""
    from launchpad_vast import VastProvider

    monkeypatch.setenv("LAUNCHPAD_VAST_RETRIES", "1")
    provider = VastProvider({**vast_config, "url": "http://127.0.0.1:9"})
    try:
        assert provider.check() is None
        offers = provider.offers()
        assert offers and all(o.provider == "vast" for o in offers)
    finally:
        provider.close()
