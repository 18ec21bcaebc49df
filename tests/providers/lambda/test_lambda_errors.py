"""Lambda's refusals mapped to what launchpad does next: a rejected or missing key -> one `check` line; a
sold-out offer -> the next offer; a quota -> the provider is skipped; 429/5xx -> retried (bounded);
invalid parameters -> Lambda's message, exit 2. The refusals Lambda gives for capacity, quota and load
are INJECTED into the double (`fail_next`): nothing here can sell out a real region."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from lambda_helpers import API_KEY, cheap_offer

from launchpad.errors import AuthError, ConfigError, NoCapacity, QuotaExceeded, TransientError
from launchpad.models import JOB_TAG, InstanceSpec, Offer

pytestmark = [pytest.mark.object_store, pytest.mark.sshd]
REPO = Path(__file__).resolve().parents[3]
LAUNCH = "/instance-operations/launch"


def _spec(job="job-e"):
    return InstanceSpec(job_id=job, token=f"{job}-1", tags={JOB_TAG: job})


def test_a_rejected_key_is_one_check_line_and_an_auth_error(lambda_config, monkeypatch, run_cli):
    from launchpad_lambda import LambdaProvider

    monkeypatch.setenv("LAMBDA_API_KEY", "secret_revoked_0000")
    provider = LambdaProvider(lambda_config)
    reason = provider.check()
    assert reason and reason.startswith("Lambda Cloud rejected the API key from LAMBDA_API_KEY: API key was invalid")
    assert "\n" not in reason and "secret_revoked" not in reason and "api-keys" in reason
    with pytest.raises(AuthError):
        LambdaProvider(lambda_config).offers()
    check = run_cli("check", "--json", env={"LAMBDA_API_KEY": "secret_revoked_0000"})
    [row] = [r for r in json.loads(check.stdout)["providers"] if r["provider"] == "lambda"]
    assert row["usable"] is False and row["reason"] == reason


def test_no_key_anywhere_names_where_to_put_one(lambda_config, monkeypatch, tmp_path):
    from launchpad_lambda import LambdaProvider

    monkeypatch.delenv("LAMBDA_API_KEY")
    monkeypatch.setenv("HOME", str(tmp_path))
    reason = LambdaProvider(lambda_config).check()
    assert reason and reason.startswith("no Lambda Cloud API key (neither LAMBDA_API_KEY nor ~/.lambda_cloud/lambda_keys)")
    assert "\n" not in reason


def test_the_key_file_of_lambdas_guides_and_a_configured_one(lambda_config, lambda_env, monkeypatch, tmp_path):
    from launchpad_lambda import LambdaProvider

    monkeypatch.delenv("LAMBDA_API_KEY")
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".lambda_cloud").mkdir()
    (tmp_path / ".lambda_cloud" / "lambda_keys").write_text(f"# launchpad test\napi_key = {API_KEY}\n")
    provider = LambdaProvider(lambda_config)
    assert provider.check() is None and provider.api.key.source.endswith(".lambda_cloud/lambda_keys")
    assert API_KEY not in repr(provider.api.key)
    (tmp_path / "key.txt").write_text(API_KEY + "\n")
    assert LambdaProvider({**lambda_config, "api_key_file": str(tmp_path / "key.txt")}).check() is None
    missing = LambdaProvider({**lambda_config, "api_key_file": str(tmp_path / "nope.txt")})
    assert missing.check() == (f"providers.lambda.api_key_file: {tmp_path / 'nope.txt'}: no such file (create a key at "
                               "https://cloud.lambdalabs.com/api-keys and export LAMBDA_API_KEY=<key> (or write "
                               "`api_key = <key>` to ~/.lambda_cloud/lambda_keys, mode 0600))")
    assert not [r for r in lambda_env.requests if r[1].endswith("/ssh-keys")]  # bad input: no API call made


def _lifecycle(provider, launchpad_home):
    from launchpad.lifecycle import Lifecycle
    from launchpad.state import StateDB

    return Lifecycle(StateDB(launchpad_home / "state.db"), {"lambda": provider})


def _submit(lc, tmp_path, *, checkpoint_uri: str | None = None, **resources):
    from launchpad.recipe import load_recipe

    data = yaml.safe_load((REPO / "recipes" / "smoke-lora.yaml").read_text())
    data["datasets"][0]["path"] = str(REPO / "recipes" / "data" / "smoke-chat.jsonl")
    data["resources"] = resources
    if checkpoint_uri:
        data["checkpoint"]["uri"] = checkpoint_uri
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(data))
    return lc.submit(load_recipe(path), path.read_text(), provider="lambda")


def test_a_sold_out_offer_moves_to_the_next_offer(lambda_provider, lambda_env, launchpad_home, tmp_path):
    """Capacity was listed but sold out at launch (Lambda's insufficient-capacity): the same type in the next
    region is tried."""
    lc = _lifecycle(lambda_provider, launchpad_home)
    job = _submit(lc, tmp_path, gpu="A10:1")
    lambda_env.fail_next("POST", LAUNCH, 400, "instance-operations/launch/insufficient-capacity",
                         "Not enough capacity to fulfill launch request.")
    inst = lc._ensure_instance(lc.db.job(job))
    events = [e for e in lc.db.events(job) if e["kind"].startswith("provision:")]
    [failed] = [e["data"] for e in events if e["kind"] == "provision:failed"]
    [ok] = [e["data"] for e in events if e["kind"] == "provision:ok"]
    assert failed["scope"] == "offer" and "no capacity" in failed["reason"]
    assert "gpu_1x_a10" in failed["offer"] and "gpu_1x_a10" in ok["offer"] and failed["offer"] != ok["offer"]
    assert [i["id"] for i in lambda_env.live()] == [inst.id]
    lambda_provider.teardown(inst)


def test_a_quota_skips_the_provider(lambda_provider, lambda_env):
    lambda_env.fail_next("POST", LAUNCH, 400, "global/quota-exceeded", "Quota exceeded.",
                         suggestion="Contact Support to increase your quota.")
    with pytest.raises(QuotaExceeded) as e:
        lambda_provider.provision(cheap_offer(lambda_provider), _spec())
    assert e.value.scope == "provider" and "Contact Support" in str(e.value) and lambda_env.live() == []


def test_sold_out_is_scoped_to_the_offer(lambda_provider, lambda_env):
    offer = cheap_offer(lambda_provider, gpu="A10")
    lambda_env.capacity["gpu_1x_a10"] = []  # sold out since the offers were listed (the double's own rule)
    with pytest.raises(NoCapacity) as e:
        lambda_provider.provision(offer, _spec())
    assert type(e.value) is NoCapacity and e.value.scope == "offer"


def test_throttling_is_retried_then_succeeds(lambda_provider, lambda_env):
    lambda_env.fail_next("POST", LAUNCH, 429, "global/too-many-requests", "Too many requests", times=2)
    inst = lambda_provider.provision(cheap_offer(lambda_provider), _spec())
    assert len(lambda_env.launches()) == 3 and len(lambda_env.live()) == 1
    lambda_provider.teardown(inst)


def test_retries_are_bounded(lambda_provider, lambda_env, monkeypatch):
    monkeypatch.setenv("LAUNCHPAD_LAMBDA_RETRIES", "2")
    lambda_env.fail_next("GET", "/instances", 503, "", "Service Unavailable", times=10)
    with pytest.raises(TransientError):
        lambda_provider.instances()
    assert len([r for r in lambda_env.requests if r[:2] == ("GET", "/api/v1/instances")]) == 2


def test_invalid_parameters_are_lambdas_message_and_bad_input(lambda_provider, lambda_env, lambda_config):
    from launchpad_lambda import LambdaProvider
    from launchpad_lambda.api import RequestRejected

    offer = cheap_offer(lambda_provider)
    with pytest.raises(RequestRejected) as e:
        lambda_provider.provision(Offer.from_dict({**offer.to_dict(), "region": "mars-1"}), _spec())
    assert str(e.value) == "Lambda Cloud refused launch lambda/gpu_1x_a10 (A10:1, mars-1): Invalid region: mars-1"
    assert e.value.exit_code == 2
    with pytest.raises(RequestRejected) as e:
        LambdaProvider({**lambda_config, "ssh_key_name": "nope"}).provision(offer, _spec())
    assert "SSH key 'nope' does not exist" in str(e.value) and "POST /ssh-keys" in str(e.value)
    assert lambda_env.live() == []


def test_no_checkpoint_store_is_one_clear_line_and_nothing_is_left_running(lambda_config, lambda_env, launchpad_home,
                                                                           tmp_path):
    from launchpad_lambda import LambdaProvider

    provider = LambdaProvider({k: v for k, v in lambda_config.items() if k != "checkpoint_uri"})
    assert provider.default_checkpoint_uri() is None
    assert provider.describe().endswith("no checkpoint_uri: recipes must name checkpoint.uri")
    lc = _lifecycle(provider, launchpad_home)
    job = _submit(lc, tmp_path)
    with pytest.raises(ConfigError) as e:
        lc.run(job)
    assert str(e.value).startswith(f"{tmp_path}") and ": checkpoint.uri: the recipe names none and Lambda Cloud has no " \
        "object store of its own" in str(e.value)
    assert "providers.lambda.checkpoint_uri" in str(e.value) and e.value.exit_code == 2
    assert lambda_env.live() == []
    assert not [p for m, p, b in lambda_env.requests if p.endswith("/launch")]  # refused before anything was rented
    provider.close()
