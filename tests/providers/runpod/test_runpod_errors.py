"""RunPod's refusals mapped to what the lifecycle does next: a rejected key blocks the provider, a sold-out GPU type
(the SDK's "no longer any instances available") -> NoCapacity for that offer -> the next offer, an empty balance
blocks the provider, "Something went wrong" is retried (bounded). Sold-out types are the double's `sold_out`;
the other refusals are INJECTED (`fail_next`): nothing here can empty a real RunPod account."""

from __future__ import annotations

import subprocess
import sys

import pytest
from runpod_double import SOLD_OUT
from runpod_helpers import cheap_offer

from launchpad.errors import AuthError, NoCapacity, ProviderError, QuotaExceeded, TransientError
from launchpad.models import JOB_TAG, InstanceSpec

pytestmark = [pytest.mark.sshd]


def _spec(job="job-e", token="job-e-1"):
    return InstanceSpec(job_id=job, token=token, tags={JOB_TAG: job})


def test_a_refused_key_is_an_auth_error_everywhere(runpod_config, runpod_api, monkeypatch):
    from launchpad_runpod import RunPodProvider

    offer = cheap_offer(RunPodProvider(runpod_config))  # while the key is still good
    monkeypatch.setenv("RUNPOD_API_KEY", "rp_revoked")
    provider = RunPodProvider(runpod_config)
    reason = provider.check()
    assert reason and reason.startswith("RunPod rejected the API key") and "\n" not in reason
    with pytest.raises(AuthError):
        provider.offers()  # no fallback to the snapshot: this account cannot rent anything
    with pytest.raises(AuthError) as e:
        provider.provision(offer, _spec())
    assert "RUNPOD_API_KEY" in str(e.value) and "rp_revoked" not in str(e.value)  # the key is never shown
    assert runpod_api.live() == []


def test_a_sold_out_gpu_type_is_no_capacity_for_that_offer_and_the_next_one_is_rented(runpod, runpod_api):
    offers = sorted((o for o in runpod.offers() if o.gpu_count == 1 and o.region == "secure"),
                    key=lambda o: o.price_per_hour)
    runpod_api.sold_out.add(offers[0].instance_type)
    with pytest.raises(NoCapacity) as e:
        runpod.provision(offers[0], _spec())
    assert e.value.scope == "offer" and "no longer any instances available" in str(e.value)
    assert runpod_api.live() == []
    nxt = next(o for o in offers if o.instance_type != offers[0].instance_type)
    inst = runpod.provision(nxt, _spec(token="job-e-2"))
    assert runpod_api.live()[0]["imageName"] and inst.offer == nxt
    runpod.teardown(inst)


def test_a_stopped_pod_whose_host_is_full_is_no_capacity(runpod, runpod_api):
    from launchpad.models import TeardownMode

    offer = cheap_offer(runpod)
    inst = runpod.provision(offer, _spec())
    runpod.teardown(inst, TeardownMode.STOP)
    runpod_api.sold_out.add(offer.instance_type)
    with pytest.raises(NoCapacity, match="not enough free GPUs"):
        runpod.provision(offer, _spec())
    runpod.teardown(inst)


def test_an_empty_balance_blocks_the_provider(runpod, runpod_api):
    runpod_api.fail_next("podFindAndDeployOnDemand", "You do not have enough funds to rent this pod. Your balance "
                         "must cover at least one hour.")
    with pytest.raises(QuotaExceeded) as e:
        runpod.provision(cheap_offer(runpod), _spec())
    assert e.value.scope == "provider" and "Billing" in str(e.value)


def test_something_went_wrong_is_retried_then_succeeds(runpod, runpod_api, monkeypatch):
    runpod_api.fail_next("gpuTypes", "Something went wrong. Please try again later or contact support.", times=2)
    assert runpod.offers()
    assert len(runpod_api.calls("gpuTypes")) == 3
    runpod_api.fail_next("podFindAndDeployOnDemand", "Something went wrong. Please try again later or contact "
                         "support.")  # refused before it did anything: sent again, one pod
    inst = runpod.provision(cheap_offer(runpod), _spec())
    assert len(runpod_api.calls("podFindAndDeployOnDemand")) == 2 and len(runpod_api.live()) == 1
    runpod.teardown(inst)


def test_retries_are_bounded(runpod, runpod_api, monkeypatch):
    monkeypatch.setenv("LAUNCHPAD_RUNPOD_RETRIES", "2")
    runpod_api.fail_next("myself", "Something went wrong. Please try again later or contact support.", times=5)
    with pytest.raises(TransientError, match="Something went wrong"):
        runpod.instances()
    assert len(runpod_api.calls("myself")) == 2


def test_an_unknown_error_is_a_provider_error_with_runpods_words(runpod, runpod_api):
    runpod_api.fail_next("podFindAndDeployOnDemand", "Invalid image name")
    with pytest.raises(ProviderError, match="podFindAndDeployOnDemand: Invalid image name") as e:
        runpod.provision(cheap_offer(runpod), _spec())
    assert not isinstance(e.value, (NoCapacity, TransientError, AuthError))


def test_the_sold_out_message_is_the_sdks_query_error():
    """The double answers RunPod's words; the SDK turns them into its QueryError, which is what is classified."""
    from launchpad_runpod.api import classify

    err = classify(SOLD_OUT, "podRentInterruptable")
    assert isinstance(err, NoCapacity) and err.scope == "offer"


def test_the_sdk_leaves_the_users_logging_alone():
    """runpod's import calls logging.basicConfig(level=INFO): a CLI run then printed every library's INFO line."""
    code = ("import logging; from launchpad_runpod import api; api.sdk(); "
            "logging.getLogger('botocore.credentials').info('Found credentials in environment variables.'); "
            "root = logging.getLogger(); print(len(root.handlers), root.level)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0", str(30)] and "Found credentials" not in proc.stderr, proc.stdout + proc.stderr
