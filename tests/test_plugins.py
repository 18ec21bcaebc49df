"""Plugins load through the entry-point group `launchpad`, exactly as a third-party distribution would."""

from __future__ import annotations

import json
import textwrap

import pytest

PLUGIN = textwrap.dedent(
    '''
    from launchpad.plugins import hookimpl
    from launchpad.provider import Provider

    class ThrowawayProvider(Provider):
        name = "throwaway"
        def check(self): return "throwaway is never usable: it exists to test plugin loading"
        def offers(self): return []
        def provision(self, offer, spec): raise NotImplementedError
        def sync(self, instance, bundle): raise NotImplementedError
        def train(self, instance, bundle): raise NotImplementedError
        def progress(self, instance): raise NotImplementedError
        def logs(self, instance, *, follow=False): return iter(())
        def checkpoint(self, instance, *, timeout=600): return None
        def teardown(self, instance, mode=None): pass
        def status(self, instance): raise NotImplementedError
        def instances(self): return []

    @hookimpl
    def launchpad_register_providers(register):
        register(ThrowawayProvider)
    '''
)


def install_plugin(site, body=PLUGIN, module="launchpad_throwaway", ep_name="throwaway"):
    """A minimal installed distribution: a module plus a dist-info with entry_points.txt on sys.path."""
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{module}.py").write_text(body)
    dist = site / f"{module.replace('_', '-')}-0.0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module.replace('_', '-')}\nVersion: 0.0.1\n")
    (dist / "entry_points.txt").write_text(f"[launchpad]\n{ep_name} = {module}\n")
    return {"PYTHONPATH": str(site)}


def test_throwaway_plugin_shows_in_check(tmp_path, run_cli):
    env = install_plugin(tmp_path / "site")
    proc = run_cli("check", "--json", env=env)
    rows = {r["provider"]: r for r in json.loads(proc.stdout)["providers"]}
    assert rows["throwaway"]["usable"] is False
    assert "never usable" in rows["throwaway"]["reason"]
    assert "launchpad-throwaway 0.0.1" in rows["throwaway"]["plugin"]
    assert rows["local"]["usable"] is True


def test_disable_plugins_hides_it(tmp_path, run_cli):
    env = install_plugin(tmp_path / "site")
    proc = run_cli("check", "--json", env={**env, "LAUNCHPAD_DISABLE_PLUGINS": "throwaway"})
    assert "throwaway" not in {r["provider"] for r in json.loads(proc.stdout)["providers"]}


def test_misspelled_hook_is_an_error(tmp_path, run_cli):
    body = "from launchpad.plugins import hookimpl\n\n@hookimpl\ndef launchpad_register_provider(register):\n    pass\n"
    env = install_plugin(tmp_path / "site", body=body, module="launchpad_typo", ep_name="typo")
    proc = run_cli("check", env=env)
    assert proc.returncode != 0
    assert "launchpad_register_provider" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_builtin_local_registers_like_a_plugin():
    from importlib.metadata import entry_points

    from launchpad.plugins import get_provider_classes

    assert "local" in {ep.name for ep in entry_points(group="launchpad")}
    assert "local" in get_provider_classes()


def test_stores_registered_through_the_hook():
    from launchpad.plugins import get_store_classes

    assert "file" in get_store_classes()


@pytest.mark.parametrize("heavy", ["torch", "transformers", "boto3", "botocore", "google.cloud", "azure",
                                   "kubernetes", "paramiko", "peft"])
def test_cli_import_is_light(heavy):
    import subprocess
    import sys

    code = f"import sys, launchpad, launchpad.cli; print({heavy!r} in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
